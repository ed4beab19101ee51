"""Scripts of two trusted namespaces on the operator's host cannot reach each other, nor the operator's files.

The session's operator runs as root and trusts `t-test-app*` (the namespaces of tests named
`test_app*`): their scripts run on its host, each namespace as a uid of its own
(`--script-uid-range`), each step in a cgroup of its own. The victim namespace runs a long step
whose environment and working directory hold a value; the attacker, a tenant with `edit` in its
own trusted namespace, runs a step that reads every process's environment and working directory
it can, greps the operator's LMDB store and run files for the value, and leaves a daemon behind
with ``setsid env -u STEAD_MARKER`` (out of its process group, without the marker the runner used
to find a step's processes by).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from operators.cluster import Binaries, ClusterInfo
from operators.runtime.engine.runs import DEFAULT_SCRIPT_UIDS, script_uid
from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.tenant_accounts import tenant_kubectl
from tests.e2e.test_apps import app, apply, blueprint, run_state
from tests.unit.pipelines.test_script_user import running


def one_task(script: str, **spec: object) -> dict[str, object]:
    return {"substrates": [{"name": "host", "type": "Local"}],
            "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
                {"name": "work", "type": "exec", "script": script}]}]}],
            "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}], **spec}


def attack(store: Path, runs: Path, tag: str) -> str:
    pattern = "victim-[a-z0-9]*"
    return "\n".join([
        f"for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null | grep -o '{pattern}' | "
        "sed 's/^/env: /'",
        "for p in /proc/[0-9]*; do cat $p/cwd/notes 2>/dev/null; done | sed 's/^/file: /'",
        f"grep -a -o -h -r '{pattern}' {store} {runs} 2>/dev/null | sed 's/^/stored: /'",
        f"setsid env -u STEAD_MARKER sh -c 'while :; do sleep 1; done # {tag}' </dev/null >/dev/null 2>&1 &",
        "echo uid $(id -u)",
        "echo done",
    ])


@pytest.fixture
def host_operator(operator: OperatorProcess, cluster: ClusterInfo) -> Iterator[OperatorProcess]:
    """The operator with its home in a directory every user of the host may enter (as /var/lib/stead
    would be; pytest's own are root's alone, which would hide the store whatever its mode). The
    session's operator stops meanwhile."""
    home = Path(tempfile.mkdtemp(prefix="stead-e2e-home-"))
    home.chmod(0o755)
    operator.stop()
    proc = OperatorProcess(cluster, store=home / "store", log_path=home / "operator.log")
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()
        shutil.rmtree(home, ignore_errors=True)
        operator.start()


@pytest.fixture
def attacker_namespace(kubectl: Kubectl) -> Iterator[str]:
    """A second trusted namespace (its name matches the session operator's `t-test-app*`)."""
    name = f"t-test-app-eve-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def test_app_scripts_of_another_namespace_cannot_read_a_running_step_nor_the_store_nor_outlive_their_step(
    host_operator: OperatorProcess, kubectl: Kubectl, cluster: ClusterInfo, binaries: Binaries, namespace: str,
    attacker_namespace: str, tmp_path: Path,
) -> None:
    value = f"victim-{uuid.uuid4().hex[:12]}"
    victim = one_task(f'export VICTIM_TOKEN={value}; echo "$VICTIM_TOKEN" > "$HOME/notes"; echo waiting; sleep 300')
    apply(kubectl, blueprint("victim", namespace, victim))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/victim")
    apply(kubectl, app("victim", namespace, "victim"))
    wait_until(lambda: any(str(t.get("task")).endswith("work") and t.get("state") == "running"
                           for t in (run_state(kubectl, namespace, "victim-create", "Running").get("runLog") or [])),
               60, "the victim's step running", interval=0.2)

    tenant = tenant_kubectl(kubectl, cluster, binaries, attacker_namespace, tmp_path)
    store, runs = host_operator.store, host_operator.store.with_name(host_operator.store.name + "-runs")
    for attempt in range(2):  # the same attack twice: nothing is left to the second
        tag = f"escaped-{uuid.uuid4().hex[:10]}"
        name = f"eve-{attempt}"
        apply(tenant, blueprint(name, attacker_namespace, one_task(attack(store, runs, tag))))
        tenant("wait", "--for=condition=Ready", "-n", attacker_namespace, "--timeout", "30s", f"blueprint/{name}")
        apply(tenant, app(name, attacker_namespace, name))
        run = run_state(tenant, attacker_namespace, f"{name}-create", "Succeeded", "Failed", seconds=60)
        assert run["state"] == "Succeeded", run
        output = next(t for t in run["runLog"] if str(t["task"]).endswith("work"))["replicas"][0]["output"]
        assert "done" in output, output
        assert value not in output, f"the attacker read the victim's value:\n{output}"
        assert running(tag) == [], "a process of the attacker's step outlived it"
        uids = {ns: script_uid(ns, *DEFAULT_SCRIPT_UIDS) for ns in (namespace, attacker_namespace)}
        assert f"uid {uids[attacker_namespace]}" in output and uids[attacker_namespace] != uids[namespace]
    # the victim's step was running all along (what the attacker looked for was there to find)
    assert run_state(kubectl, namespace, "victim-create", "Running")["state"] == "Running"
    for path in (store, runs):
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    kubectl("patch", "actionrun", "victim-create", "-n", namespace, "--type", "merge",
            "-p", json.dumps({"spec": {"abort": True}}))
    run_state(kubectl, namespace, "victim-create", "Aborted", "Failed", seconds=30)
