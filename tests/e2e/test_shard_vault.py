"""Issue 25, finding 7: a vault entry written by one replica is seen by the others.

Two sharded replicas, each serving webhooks on its own loopback port; the API server sends a
Blueprint's mutating call to r0 (which seals its inline secret, issue 25 finding 2) and its
validating call to r1 (which has never seen the entry). The blueprint must be admitted, the
replica that holds the project (r0 or r1, as the ring says) stores the entry when it reconciles
the blueprint, and must open the secret when the App's create action runs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from operators.runtime.shard import Ring, by_bucket, claim_name
from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.test_apps import app, apply, blueprint, run_state
from tests.e2e.test_blueprint import OPERATOR_NAMESPACE

PROJECTS = 2  # one the ring places on r0 (it sealed the secret), one on r1 (it did not)
SECRET = "sv-cred-9Wq!x3"


def replica(operator: OperatorProcess, work: Path, name: str, runs: Path) -> OperatorProcess:
    return OperatorProcess(
        operator.cluster, store=work / name / "store", log_path=work / f"{name}.log",
        extra_args=("--replica-id", name, "--sharding", "leases", "--lease-seconds", "2",
                    "--pipelines-state", str(runs), "--no-shipped-objects", "--trust-local-namespaces", "t-sv-*"))


@pytest.fixture(scope="module")
def split(operator: OperatorProcess, kubectl: Kubectl,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    """r0 and r1 in place of the session's operator: mutating calls to r0, validating calls to r1."""
    work = tmp_path_factory.mktemp("shard-vault")
    runs = Path(tempfile.mkdtemp(prefix="stead-sv-runs-"))
    runs.chmod(0o777)  # scripts run as an unprivileged user
    r0, r1 = replica(operator, work, "r0", runs), replica(operator, work, "r1", runs)
    operator.stop()
    try:
        r0.start()
        mutating = json.loads(kubectl("get", "mutatingwebhookconfiguration", "stead-mutation", "-o", "json").stdout)
        r1.start()  # registers both configurations with its own URL and CA
        mutating["metadata"] = {"name": "stead-mutation", "labels": mutating["metadata"].get("labels") or {}}
        kubectl("replace", "-f", "-", input=json.dumps(mutating))  # mutating calls back to r0
        yield r0, r1
    finally:
        r0.stop()
        r1.stop()
        shutil.rmtree(runs, ignore_errors=True)
        operator.start()  # registers its own configurations again


def spec() -> dict[str, Any]:
    """A Local task that fails unless the credential's secret opens to the value applied."""
    return {
        "substrates": [{"name": "host", "type": "Local"}],
        "credentials": [{"name": "cred", "type": "password", "username": "u", "secret": {"value": SECRET}}],
        "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
            {"name": "check", "type": "exec", "script": f"test '@@{{cred.secret}}@@' = '{SECRET}' && echo opened"}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
    }


def placed(prefix: str) -> dict[str, str]:
    """A namespace name per replica, r0 and r1, that the ring of the two places on it (by bucket)."""
    ring, key = Ring(["r0", "r1"]), by_bucket()
    found: dict[str, str] = {}
    for _ in range(200):  # bounded: each name lands on one of two replicas
        name = f"{prefix}-{uuid.uuid4().hex[:5]}"
        found.setdefault(str(ring.owner(key(name))), name)
        if len(found) == 2:
            return found
    raise AssertionError(f"no names for both replicas: {found}")


def holder(kubectl: Kubectl, project: str) -> str | None:
    found = kubectl("get", "lease", claim_name(project), "-n", OPERATOR_NAMESPACE, "-o", "json", check=False)
    return json.loads(found.stdout)["spec"].get("holderIdentity") if found.returncode == 0 else None


def test_an_inline_secret_stored_by_one_replica_is_admitted_by_another_and_opened_by_the_holder(
    split: tuple[OperatorProcess, OperatorProcess], kubectl: Kubectl,
) -> None:
    by_replica = placed("t-sv")
    namespaces = list(by_replica.values())
    try:
        for namespace in namespaces:
            kubectl("create", "namespace", namespace)
            result = apply(kubectl, blueprint("bp", namespace, spec()), check=False)
            assert result.returncode == 0, f"{namespace}: refused across replicas: {result.stderr}"
        for name, namespace in by_replica.items():  # each project held by the replica the ring names
            wait_until(lambda: holder(kubectl, namespace) == name, 30, f"{name} to hold {namespace}")  # noqa: B023
        for namespace in namespaces:
            kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "40s", "blueprint/bp")
            apply(kubectl, app("a", namespace, "bp"))
        for name, namespace in by_replica.items():
            status = run_state(kubectl, namespace, "a-create", "Succeeded", "Failed", seconds=60)
            assert status["state"] == "Succeeded", (name, namespace, json.dumps(status)[:800])
    finally:
        for namespace in namespaces:
            kubectl("delete", "namespace", namespace, "--wait=false", check=False)
