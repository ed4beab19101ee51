"""A `secretRef` is read as the namespace's service account, never with the operator's rights.

The attacker is a tenant who may create Stead's objects in its namespace but may not read a Secret
there (`edit` could: this tenant has `view` and Stead's kinds). It names the Secret in a
blueprint whose script prints the value reversed (masking hides the value and its encodings, not
every transformation a script can make) and reads the run log back. The test's name makes its
namespace one the session's operator trusts (`t-test-app*`): scripts run on the operator's host,
the path where the operator used to read the Secret with its own rights.
"""

from __future__ import annotations

import json
from pathlib import Path

from operators.cluster import Binaries, ClusterInfo
from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.tenant_accounts import grant_secret, tenant_kubectl
from tests.e2e.test_apps import app, apply, blueprint, run_state

PASSWORD = "adm1n-only-Pw-7f3e"


def spying_spec() -> dict[str, object]:
    return {
        "credentials": [{"name": "loot", "type": "password", "username": "x",
                         "secret": {"secretRef": {"name": "admin-only", "key": "password"}}}],
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
            {"name": "leak", "type": "exec", "script": "printf '%s\\n' '@@{loot.secret}@@' | rev"}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
    }


def test_app_secret_ref_the_tenant_may_not_read_is_not_read_for_it(
    operator: OperatorProcess, kubectl: Kubectl, cluster: ClusterInfo, binaries: Binaries, namespace: str,
    tmp_path: Path,
) -> None:
    kubectl("create", "secret", "generic", "admin-only", "-n", namespace, f"--from-literal=password={PASSWORD}")
    tenant = tenant_kubectl(kubectl, cluster, binaries, namespace, tmp_path, role="view")
    denied = tenant("get", "secret", "admin-only", "-n", namespace, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr

    apply(tenant, blueprint("spy", namespace, spying_spec()))
    tenant("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/spy")
    for attempt in range(2):  # the same attack twice: a retry reads nothing more
        name = f"spy-{attempt}"
        apply(tenant, app(name, namespace, "spy"))
        run = run_state(tenant, namespace, f"{name}-create", "Succeeded", "Failed", seconds=60)
        shown = tenant("get", "apps,actionruns,events", "-n", namespace, "-o", "yaml").stdout
        assert PASSWORD[::-1] not in shown and PASSWORD not in shown, "the Secret was read for the tenant"
        assert run["state"] == "Failed", run
        assert (f"Secret admin-only: service account {namespace}/default may not read it: it needs get on "
                f"secrets/admin-only in namespace {namespace}") in run["reason"], run["reason"]
        stalled = wait_until(lambda n=name: _stalled(tenant, namespace, f"{n}-create"), 30, "the run Stalled")
        assert stalled["reason"] == "SecretForbidden", stalled  # it exists: not SecretNotFound
        assert run["phase"] == "Failed", run  # not `Running`
        assert PASSWORD not in (operator.log_path.read_text())

    # Once the namespace lets its account read the Secret, the same blueprint runs (and masking hides
    # the value it prints as is).
    grant_secret(kubectl, namespace, "admin-only")
    apply(tenant, app("granted", namespace, "spy"))
    run = run_state(tenant, namespace, "granted-create", "Succeeded", "Failed", seconds=60)
    assert run["state"] == "Succeeded", run


def _stalled(kubectl: Kubectl, namespace: str, run: str) -> dict[str, str] | None:
    body = json.loads(kubectl("get", "actionrun", run, "-n", namespace, "-o", "json").stdout)
    conditions = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}
    stalled = conditions.get("Stalled")
    return stalled if stalled and stalled.get("status") == "True" else None
