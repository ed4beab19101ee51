"""The Environment kind end to end, on the real local control plane with a real operator process."""

from __future__ import annotations

import json

import pytest

from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.kube.client import USER_AGENT
from tests.e2e.conftest import AuditLog, Kubectl, OperatorProcess, env_manifest, wait_until


def _ready(kubectl: Kubectl, namespace: str, *names: str, seconds: str = "30s") -> None:
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", seconds,
            *[f"environment/{n}" for n in names])


def test_example_becomes_ready_with_its_story_in_columns_and_events(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "examples/environment.yaml")
    _ready(kubectl, namespace, "demo")
    status = json.loads(kubectl("get", "env", "demo", "-n", namespace, "-o", "json").stdout)["status"]
    assert status["phase"] == "Provisioned" and status["observedGeneration"] == 1
    assert status["nodeCount"] == 3 and status["roles"] == {"cinder": 1, "compute": 2, "controller": 1}
    # one table per kind; the cluster's ClusterLifecycles are listed too (`kubectl get stead` is every kind)
    tables = kubectl("get", "stead", "-n", namespace).stdout.strip().split("\n\n")
    table = next(t.split("\n") for t in tables if "environment.stead.dev/" in t)
    assert table[0].split() == ["NAME", "PHASE", "READY", "RELEASE", "NODES", "GRAPHS", "AGE"]  # no graphs: empty
    row = table[1].split()
    assert row[0].endswith("demo") and row[1:5] == ["Provisioned", "True", "mitaka-9.0", "3"]
    events = wait_until(lambda: kubectl("get", "events", "-n", namespace, "-o", "json",
                                        "--field-selector", "involvedObject.name=demo").stdout.count('"Provisioned"'),
                        10, "the Provisioned event")
    assert events >= 1


def test_components_that_do_not_exist_are_shown_until_they_appear(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-f", "-", input=env_manifest("named", namespace, components=["nova", "keystone"]))
    _ready(kubectl, namespace, "named")  # usable: its nodes and hierarchy do not depend on components

    def components_found() -> dict[str, str]:
        status = json.loads(kubectl("get", "env", "named", "-n", namespace, "-o", "json").stdout)["status"]
        return next(c for c in status["conditions"] if c["type"] == "ComponentsFound")

    condition = components_found()
    assert condition["status"] == "False" and condition["reason"] == "ComponentNotFound"
    assert condition["message"].startswith("spec.components: no ConfigComponent named nova, keystone")
    for name in ("nova", "keystone"):
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "stead.dev/v1alpha1", "kind": "ConfigComponent",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"resources": [{"name": "conf"}]}}))
    wait_until(lambda: components_found()["status"] == "True", 30, "the Environment to see its components")


BAD_SPECS = [
    pytest.param(
        {"nodes": [{"name": "a", "roles": ["x"]}, {"name": "a", "roles": ["z"]}]},
        'spec.nodes[1]: Duplicate value: {"name":"a"}', id="duplicate-node-names"),
    pytest.param({"hierarchyLevels": []}, "spec.hierarchyLevels", id="empty-levels"),
    pytest.param({"hierarchyLevels": ["cluster", ""]}, "spec.hierarchyLevels[1]", id="empty-level"),
    pytest.param(
        {"hierarchyLevels": ["cluster", "role", "cluster"]},
        'spec.hierarchyLevels[2]: Duplicate value: "cluster"', id="duplicate-levels"),
    pytest.param({"nodes": [{"name": "a", "roles": []}]}, "spec.nodes[0].roles", id="node-without-roles"),
]


@pytest.mark.parametrize("spec,message", BAD_SPECS)
def test_bad_specs_are_refused_at_apply_time_naming_the_field(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, spec: dict[str, object], message: str
) -> None:
    nodes = spec.pop("nodes", None)
    manifest = env_manifest("bad", namespace, nodes=nodes, **spec)  # type: ignore[arg-type]
    result = kubectl("apply", "-f", "-", input=manifest, check=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert kubectl("get", "env", "bad", "-n", namespace, check=False).returncode != 0  # nothing stored


def test_operator_never_writes_spec(operator: OperatorProcess, kubectl: Kubectl, namespace: str,
                                    audit: AuditLog) -> None:
    mark = audit.mark()
    kubectl("apply", "-f", "-", input=env_manifest("e", namespace))
    _ready(kubectl, namespace, "e")
    kubectl("patch", "env", "e", "-n", namespace, "--type", "merge", "-p", '{"spec":{"release":"newton-10.0"}}')
    wait_until(lambda: '"observedGeneration":2' in kubectl("get", "env", "e", "-n", namespace, "-o", "json")
               .stdout.replace(" ", ""), 30, "generation 2 observed")
    ours = [e for e in audit.since(mark) if e.user_agent.startswith((USER_AGENT, "kopf"))
            and e.resource == "environments" and e.verb in ("patch", "update", "create", "delete")]
    assert ours and all(e.subresource == "status" for e in ours)
    assert len([e for e in ours if e.name == "e"]) == 2  # one status PATCH per generation


def test_delete_removes_the_object_and_its_store_entry(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-f", "-", input=env_manifest("gone", namespace))
    _ready(kubectl, namespace, "gone")
    key = object_key("Environment", namespace, "gone")

    def stored() -> bool:
        store = LocalStore(operator.store, readonly=True)
        try:
            return store.get(key) is not None
        finally:
            store.close()

    assert stored()
    kubectl("delete", "env", "gone", "-n", namespace, "--wait=true", "--timeout=30s")
    wait_until(lambda: not stored(), 15, "the store entry to go")
    assert kubectl("get", "env", "gone", "-n", namespace, check=False).returncode != 0


def test_restart_with_200_provisioned_objects_sends_no_patch(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, audit: AuditLog
) -> None:
    count = 200
    docs = "\n".join(env_manifest(f"env-{i:03d}", namespace) for i in range(count))
    kubectl("apply", "-f", "-", input=docs)
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "120s", "environment", "--all")
    total = len(json.loads(kubectl("get", "env", "-A", "-o", "json").stdout)["items"])

    operator.stop()
    mark = audit.mark()
    operator.start()
    # The restarted operator has looked at every object once it counted them all as skipped.
    wait_until(lambda: operator.metric("stead_reconcile_skipped_total", kind="Environment") >= total,
               60, f"{total} objects checked after the restart")
    # A positive control: a real change after the restart is seen, and written exactly once.
    kubectl("patch", "env", "env-007", "-n", namespace, "--type", "merge", "-p", '{"spec":{"release":"r2"}}')
    wait_until(lambda: '"observedGeneration":2' in kubectl("get", "env", "env-007", "-n", namespace, "-o", "json")
               .stdout.replace(" ", ""), 30, "the change to be provisioned")

    patches = [e for e in audit.since(mark) if e.verb == "patch" and e.resource == "environments"]
    by_operator = [e for e in patches if e.subresource == "status"]
    assert [e.name for e in by_operator] == ["env-007"], by_operator
    assert operator.metric("stead_reconcile_runs_total", kind="Environment") == 1
