"""Service lifecycles end to end (docs/services.md): Lifecycle, ServiceEntity and ServiceInstance on the
real local control plane with a real operator process, through kubectl.

The tests whose instances deploy an App are named `test_app_service_*`: their namespaces
(`t-test-app-service-*`) are the ones the session's operator trusts to run scripts on its host.
Status PATCHes are counted from the API server's audit log.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

from operators.cluster import ClusterInfo
from operators.lsm.builtin import BUILTINS
from operators.lsm.kinds import CLUSTER_LIFECYCLE_KIND
from operators.runtime.kube.client import KubeClient, load_access
from operators.runtime.kube.crds import apply_shipped, shipped_objects
from tests.e2e.conftest import AuditLog, Kubectl, OperatorProcess, wait_until
from tests.e2e.test_apps import apply, blueprint, get, patches

API = "stead.dev/v1alpha1"


def greeter_spec(nap: float = 0) -> dict[str, Any]:
    """Creating publishes an address (an r attribute reads it back); `update` fails for who=boom."""
    sleep = f"sleep {nap}; " if nap else ""
    return {
        "variables": [{"name": "who", "value": "world", "runtime": True, "regex": "[a-z]+"},
                      {"name": "region", "value": "eu", "runtime": True, "options": ["eu", "us"]}],
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
            {"name": "publish", "type": "setvar", "variables": ["address"],
             "script": f"{sleep}echo address=host-@@{{who}}@@"}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
        "actions": [{"name": "update", "tasks": [
            {"name": "apply", "type": "exec",
             "script": f'{sleep}test "@@{{who}}@@" != boom && echo updated to @@{{who}}@@'}]}],
    }


def entity(name: str, namespace: str, lifecycle: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ServiceEntity", "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "description": "A greeter.",
                "attributes": [
                    {"name": "name", "type": "string", "description": "The identity."},
                    {"name": "who", "type": "string", "modifier": "rw+"},
                    {"name": "region", "type": "string"},
                    {"name": "address", "type": "string", "modifier": "r", "optional": True},
                ],
                "identity": "name",
                "lifecycle": lifecycle or {"builtin": "simple"},
                "realization": {"blueprint": "greeter",
                                "inputs": [{"variable": "who", "attribute": "who"},
                                           {"variable": "region", "attribute": "region"}],
                                "outputs": [{"attribute": "address", "property": "Service_S_address",
                                             "deployment": "tier"}]},
                **spec}}


def instance(name: str, namespace: str, entity_name: str = "greeter", **attributes: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ServiceInstance", "metadata": {"name": name, "namespace": namespace},
            "spec": {"entity": entity_name, "attributes": {"name": name, "region": "eu", **attributes}}}


def catalog(kubectl: Kubectl, namespace: str, nap: float = 0) -> None:
    apply(kubectl, blueprint("greeter", namespace, greeter_spec(nap)))
    apply(kubectl, entity("greeter", namespace))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "40s", "blueprint/greeter",
            "serviceentity/greeter")


def si(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    return get(kubectl, "serviceinstance", name, namespace)


def status_of(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = si(kubectl, namespace, name).get("status") or {}
    return found


def in_state(kubectl: Kubectl, namespace: str, name: str, state: str, seconds: float = 60,
             version_above: int = 0) -> dict[str, Any]:
    """The status once the instance is in `state` (past `version_above`) and its reconcile is over."""
    def reached() -> dict[str, Any] | None:
        status = status_of(kubectl, namespace, name)
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        done = conditions.get("Reconciling") == "False"
        if status.get("state") == state and (status.get("version") or 0) > version_above and done:
            return status
        return None

    found: dict[str, Any] = wait_until(reached, seconds, f"{name} in state {state}", interval=0.2)
    return found


def merge(kubectl: Kubectl, namespace: str, name: str, patch: dict[str, Any], check: bool = True) -> Any:
    return kubectl("patch", "serviceinstance", name, "-n", namespace, "--type", "merge", "-p", json.dumps(patch),
                   check=check)


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def walk(status: dict[str, Any], since: int = 0) -> list[tuple[str | None, str, str]]:
    return [(e.get("from"), e["to"], e["trigger"]) for e in status["log"] if e["version"] > since]


def transfer_events(kubectl: Kubectl, namespace: str, name: str) -> list[str]:
    events = json.loads(kubectl("get", "events", "-n", namespace, "--field-selector",
                                f"involvedObject.name={name},involvedObject.kind=ServiceInstance", "-o",
                                "json").stdout)["items"]
    return sorted(e["message"] for e in events if e["reason"] in ("Transfer", "TransferError"))


def test_app_service_simple_lifecycle_walk(operator: OperatorProcess, kubectl: Kubectl, namespace: str,
                                          audit: AuditLog) -> None:
    catalog(kubectl, namespace)
    writes: dict[str, int] = {}

    # create -> up: the App is launched with the attributes, the address comes back as an r attribute
    mark = audit.mark()
    apply(kubectl, instance("db-1", namespace, who="one"))
    up = in_state(kubectl, namespace, "db-1", "up")
    assert walk(up) == [(None, "start", "create"), ("start", "acknowledged", "auto"),
                        ("acknowledged", "creating", "auto"), ("creating", "up", "resource_based")]
    assert up["version"] == 4 and up["app"] == "db-1" and up["modelState"] == "active"
    assert up["activeAttributes"] == {"name": "db-1", "who": "one", "region": "eu", "address": "host-one"}
    assert up["identity"] == "db-1" and "candidateAttributes" not in up
    assert condition(up, "Ready")["status"] == "True"
    app = get(kubectl, "app", "db-1", namespace)
    assert app["spec"]["inputs"] == {"who": "one", "region": "eu"} and app["status"]["state"] == "running"
    assert app["metadata"]["ownerReferences"][0]["kind"] == "ServiceInstance"
    created = patches(audit, mark, "serviceinstances", "db-1")
    writes["create + App up"] = created
    assert created == 2, created  # the creation (and its autos), then the App's success
    row = kubectl("get", "si", "db-1", "-n", namespace).stdout.splitlines()
    assert row[0].split() == ["NAME", "PHASE", "READY", "ENTITY", "IDENTITY", "STATE", "VERSION", "ENTITYVERSION",
                              "AGE"]
    assert row[1].split()[1:8] == ["Provisioned", "True", "greeter", "db-1", "up", "4", "1"]

    # update -> up: the App takes the new inputs and runs its update action; rollback holds the old set
    mark = audit.mark()
    merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"who": "two"}, "currentVersion": 4}})
    up = in_state(kubectl, namespace, "db-1", "up", version_above=4)
    assert walk(up, 4) == [("up", "update_start", "on_update"), ("update_start", "update_acknowledged", "auto"),
                           ("update_acknowledged", "update_inprogress", "auto"),
                           ("update_inprogress", "up", "resource_based")]
    assert up["activeAttributes"]["who"] == "two" and up["rollbackAttributes"]["who"] == "one"
    assert get(kubectl, "app", "db-1", namespace)["spec"]["inputs"]["who"] == "two"
    run = get(kubectl, "actionrun", "db-1-update-2", namespace)["status"]
    assert run["state"] == "Succeeded" and "updated to two" in json.dumps(run["runLog"])
    writes["update + App updated"] = patches(audit, mark, "serviceinstances", "db-1")
    assert writes["update + App updated"] == 2
    version = up["version"]

    # refusals: nothing changes
    mark = audit.mark()
    stale = merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"who": "three"}, "currentVersion": 4}},
                  check=False)
    assert stale.returncode != 0
    assert (f"The given current version (4) doesn't match the actual current version ({version}) of service "
            "instance db-1") in stale.stderr
    readonly = merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"address": "x"}, "currentVersion": version}},
                     check=False)
    assert readonly.returncode != 0 and "spec.attributes.address: read-only (modifier r)" in readonly.stderr
    once = merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"region": "us"}, "currentVersion": version}},
                 check=False)
    assert once.returncode != 0 and "spec.attributes.region: set at creation only (modifier rw)" in once.stderr
    unknown = merge(kubectl, namespace, "db-1", {"spec": {"stateRequest": {"target": "rollback",
                                                                           "currentVersion": version}}}, check=False)
    assert unknown.returncode != 0 and 'cannot be set to "rollback"' in unknown.stderr
    assert status_of(kubectl, namespace, "db-1")["version"] == version
    assert patches(audit, mark, "serviceinstances", "db-1") == 0

    # an update that fails validation -> update_rejected (Stalled, with why); a delete is refused there
    mark = audit.mark()
    merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"who": "Bad1"}, "currentVersion": version}})
    rejected = in_state(kubectl, namespace, "db-1", "update_rejected", version_above=version)
    assert walk(rejected, version) == [("up", "update_start", "on_update"),
                                       ("update_start", "update_rejected", "auto")]
    assert rejected["validationProblems"] == [
        "spec.attributes.who (Blueprint variable who): 'Bad1' does not match '[a-z]+'"]
    assert rejected["phase"] == "Rejected"  # what is true now, not Realizing
    stalled = condition(rejected, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "ValidationFailed"
    assert "state request up" in stalled["message"]  # the way out is shown
    assert rejected["candidateAttributes"]["who"] == "Bad1" and rejected["activeAttributes"]["who"] == "two"
    writes["update rejected by validation"] = patches(audit, mark, "serviceinstances", "db-1")
    assert writes["update rejected by validation"] == 1
    refused = kubectl("delete", "si", "db-1", "-n", namespace, "--wait=false", check=False)
    assert refused.returncode != 0
    assert 'in state "update_rejected" cannot be deleted: the state has no on_delete transfer' in refused.stderr
    assert "deletionTimestamp" not in si(kubectl, namespace, "db-1")["metadata"]

    # set-state back to up: the candidate set is cleared
    version = rejected["version"]
    mark = audit.mark()
    merge(kubectl, namespace, "db-1", {"spec": {"stateRequest": {"target": "up", "currentVersion": version,
                                                                 "message": "abort the update"}}})
    up = in_state(kubectl, namespace, "db-1", "up", version_above=version)
    assert walk(up, version) == [("update_rejected", "up", "api_set_state")]
    assert "candidateAttributes" not in up and up["activeAttributes"]["who"] == "two"
    assert up["stateRequest"]["target"] == "up" and "abort the update" in up["log"][-1]["message"]
    writes["set-state up"] = patches(audit, mark, "serviceinstances", "db-1")
    assert writes["set-state up"] == 1
    stale = merge(kubectl, namespace, "db-1", {"spec": {"stateRequest": {"currentVersion": version - 1}}},
                  check=False)
    assert stale.returncode != 0 and "doesn't match the actual current version" in stale.stderr

    # an update whose App fails -> update_failed; set-state rollback -> up with the previous values
    version = up["version"]
    mark = audit.mark()
    merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"who": "boom"}, "currentVersion": version}})
    failed = in_state(kubectl, namespace, "db-1", "update_failed", version_above=version)
    assert walk(failed, version)[-1] == ("update_inprogress", "update_failed", "resource_based")
    assert failed["activeAttributes"]["who"] == "boom" and failed["rollbackAttributes"]["who"] == "two"
    assert condition(failed, "Stalled")["reason"] == "DeploymentFailed" and failed["phase"] == "Failed"
    assert "update action failed" in failed["log"][-1]["message"]
    writes["update + App fails"] = patches(audit, mark, "serviceinstances", "db-1")
    assert writes["update + App fails"] == 2
    version = failed["version"]
    mark = audit.mark()
    merge(kubectl, namespace, "db-1", {"spec": {"stateRequest": {"target": "rollback", "currentVersion": version}}})
    up = in_state(kubectl, namespace, "db-1", "up", version_above=version)
    assert walk(up, version) == [("update_failed", "rollback", "api_set_state"), ("rollback", "up", "resource_based")]
    assert up["activeAttributes"]["who"] == "two" and up["candidateAttributes"]["who"] == "boom"
    assert get(kubectl, "app", "db-1", namespace)["spec"]["inputs"]["who"] == "two"
    writes["set-state rollback + App rolled back"] = patches(audit, mark, "serviceinstances", "db-1")
    assert writes["set-state rollback + App rolled back"] == 2
    events = transfer_events(kubectl, namespace, "db-1")
    assert len(events) == len(up["log"]), events  # one Event per executed transfer

    # delete -> deleting -> terminated: the App goes first (its delete action runs), then the instance
    mark = audit.mark()
    kubectl("delete", "si", "db-1", "-n", namespace, "--timeout", "60s")
    gone = kubectl("get", "app", "db-1", "-n", namespace, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    writes["delete + App deleted"] = patches(audit, mark, "serviceinstances", "db-1")
    assert writes["delete + App deleted"] == 2
    print("\nstatus PATCHes per step of the walk: " + json.dumps(writes))


def test_app_service_survives_an_operator_restart(operator: OperatorProcess, kubectl: Kubectl, namespace: str,
                                                   audit: AuditLog) -> None:
    catalog(kubectl, namespace, nap=4)
    apply(kubectl, instance("web", namespace, who="one"))
    wait_until(lambda: status_of(kubectl, namespace, "web").get("state") == "creating", 30, "state creating",
               interval=0.2)
    operator.stop()
    try:
        time.sleep(1)
    finally:
        operator.start()
    up = in_state(kubectl, namespace, "web", "up")
    assert [e["version"] for e in up["log"]] == [1, 2, 3, 4]
    assert up["activeAttributes"]["address"] == "host-one"
    merge(kubectl, namespace, "web", {"spec": {"attributes": {"who": "two"}}})
    wait_until(lambda: status_of(kubectl, namespace, "web").get("state") == "update_inprogress", 30,
               "state update_inprogress", interval=0.2)
    operator.stop()
    try:
        time.sleep(1)
    finally:
        operator.start()
    up = in_state(kubectl, namespace, "web", "up", version_above=4)
    assert [e["version"] for e in up["log"]] == list(range(1, 9)) and up["activeAttributes"]["who"] == "two"
    assert Counter(transfer_events(kubectl, namespace, "web")).most_common(1)[0][1] == 1  # none twice
    mark = audit.mark()
    operator.stop()
    operator.start()
    time.sleep(2)
    assert patches(audit, mark, "serviceinstances", "web") == 0  # a restart costs an up instance nothing


def test_lifecycles_are_checked_at_apply_time_and_show_model_states(kubectl: Kubectl, namespace: str,
                                                                   operator: OperatorProcess) -> None:
    broken = {"apiVersion": API, "kind": "Lifecycle", "metadata": {"name": "broken", "namespace": namespace},
              "spec": {"initialState": "start", "states": [{"name": "start"}, {"name": "gone", "deleted": True}],
                       "transfers": [{"source": "start", "target": "nowhere", "auto": True}]}}
    refused = apply(kubectl, broken, check=False)
    assert refused.returncode != 0
    assert 'spec.transfers[0].target: unknown state "nowhere"' in refused.stderr
    assert 'spec.states[1].deleted: "gone" is a deleted state that no transfer leads to' in refused.stderr
    good = {"apiVersion": API, "kind": "Lifecycle", "metadata": {"name": "tiny", "namespace": namespace},
            "spec": {"initialState": "start", "states": [
                {"name": "start", "validateSelf": "candidate"}, {"name": "up", "exportResources": True},
                {"name": "gone", "deleted": True}],
                "transfers": [{"source": "start", "target": "up", "auto": True, "targetOperation": "promote"},
                              {"source": "up", "target": "gone", "onDelete": True}]}}
    apply(kubectl, good)
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "20s", "lifecycle/tiny")
    status = get(kubectl, "lifecycle", "tiny", namespace)["status"]
    assert status["modelStates"] == {"start": "candidate", "up": "active", "gone": "inactive"}
    assert status["stateCount"] == 3 and status["transferCount"] == 2


def wait_for_builtins(kubectl: Kubectl) -> None:
    """The operator installs the built-ins once its webhook serves, in the background of its start:
    `kubectl wait` would fail at once on an object not created yet."""
    names = ("simple", "service", "testing-basic-lifecycle")
    wait_until(lambda: kubectl("get", "clc", *names, check=False).returncode == 0, 60, "the built-ins installed")
    kubectl("wait", "--for=condition=Ready", "--timeout", "60s", *(f"clusterlifecycle/{n}" for n in names))


def test_the_builtin_lifecycles_are_cluster_lifecycles_installed_with_the_crds(
        kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    names = ("simple", "service", "testing-basic-lifecycle")
    wait_for_builtins(kubectl)
    listed = json.loads(kubectl("get", "clc", "-o", "json").stdout)["items"]
    shipped = {o["metadata"]["name"]: o for o in listed if o["metadata"].get("labels", {}).get("stead.dev/shipped")}
    assert sorted(shipped) == sorted(names)
    assert all("namespace" not in o["metadata"] for o in shipped.values())
    assert shipped["simple"]["status"]["stateCount"] == len(BUILTINS["simple"].states)
    # `kubectl get stead` lists every kind (docs/README.md), the cluster-wide lifecycles too
    everything = kubectl("get", "stead", "-n", namespace, "-o", "name").stdout.split()
    assert {f"clusterlifecycle.stead.dev/{n}" for n in names} <= set(everything), everything
    # validated at apply time like a Lifecycle
    broken = {"apiVersion": API, "kind": "ClusterLifecycle", "metadata": {"name": f"broken-{namespace}"},
              "spec": {"initialState": "start", "states": [{"name": "start"}],
                       "transfers": [{"source": "start", "target": "nowhere", "auto": True}]}}
    refused = apply(kubectl, broken, check=False)
    assert refused.returncode != 0 and 'spec.transfers[0].target: unknown state "nowhere"' in refused.stderr


def test_an_entity_waits_for_its_lifecycle_and_an_instance_for_its_entity(kubectl: Kubectl, namespace: str,
                                                                         operator: OperatorProcess) -> None:
    plain = entity("plain", namespace, {"name": "mine"})
    del plain["spec"]["realization"]
    plain["spec"]["config"] = {}
    apply(kubectl, plain)
    wait_until(lambda: condition(get(kubectl, "serviceentity", "plain", namespace).get("status") or
                                 {"conditions": [{"type": "Stalled", "status": "?"}]}, "Stalled")["status"] == "True",
               20, "the entity Stalled")
    message = condition(get(kubectl, "serviceentity", "plain", namespace)["status"], "Stalled")["message"]
    assert "no Lifecycle 'mine' in namespace" in message and "simple, service, testing_basic_lifecycle" in message
    apply(kubectl, instance("p-1", namespace, "plain", who="x"))
    wait_until(lambda: (status_of(kubectl, namespace, "p-1").get("conditions") or [{}])[0].get("reason")
               == "EntityNotReady", 20, "the instance waiting for its entity")
    mine = {"apiVersion": API, "kind": "Lifecycle", "metadata": {"name": "mine", "namespace": namespace},
            "spec": {"initialState": "start", "states": [
                {"name": "start", "validateSelf": "candidate"}, {"name": "up", "exportResources": True},
                {"name": "rejected"}, {"name": "gone", "deleted": True}],
                "transfers": [{"source": "start", "target": "up", "auto": True, "validate": True, "error": "rejected",
                               "targetOperation": "promote"},
                              {"source": "rejected", "target": "gone", "onDelete": True},
                              {"source": "up", "target": "gone", "onDelete": True}]}}
    apply(kubectl, mine)
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "20s", "serviceentity/plain")
    up = in_state(kubectl, namespace, "p-1", "up")  # no realization: up at once, in one write
    assert walk(up) == [(None, "start", "create"), ("start", "up", "auto")]
    bad = apply(kubectl, {**plain, "spec": {**plain["spec"], "config": {"auto_nothing": False}}}, check=False)
    assert bad.returncode != 0 and "spec.config.auto_nothing: the lifecycle has no auto transfer" in bad.stderr
    moved = apply(kubectl, {**plain, "spec": {**plain["spec"], "lifecycle": {"builtin": "simple"}}}, check=False)
    assert moved.returncode != 0 and "spec.lifecycle: cannot change while the entity has instances (p-1)" in \
        moved.stderr
    # an edit of the Lifecycle reaches the instance, though its entity stays Ready: a new auto transfer out of up
    mine["spec"]["states"].append({"name": "done"})
    mine["spec"]["transfers"] += [{"source": "up", "target": "done", "auto": True},
                                  {"source": "done", "target": "gone", "onDelete": True}]
    apply(kubectl, mine)
    done = in_state(kubectl, namespace, "p-1", "done", seconds=30)
    assert walk(done)[-1] == ("up", "done", "auto")
    kubectl("delete", "si", "p-1", "-n", namespace, "--timeout", "30s")


def test_a_rejected_instance_of_a_lifecycle_that_deletes_it_goes(kubectl: Kubectl, namespace: str,
                                                                 operator: OperatorProcess) -> None:
    plain = entity("basic", namespace, {"builtin": "testing_basic_lifecycle"})
    del plain["spec"]["realization"]
    plain["spec"]["attributes"][1]["type"] = "int"  # who must be an int: "x" fails validation
    apply(kubectl, plain)
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "20s", "serviceentity/basic")
    apply(kubectl, instance("b-1", namespace, "basic", who="x"))
    wait_until(lambda: kubectl("get", "si", "b-1", "-n", namespace, check=False).returncode != 0, 30,
               "the rejected instance gone")
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    messages = [e["message"] for e in events if e["involvedObject"]["name"] == "b-1"]
    assert any("start -> rejected (auto, version 2)" in m and "expected int" in m for m in messages), messages


def test_a_namespace_deletion_takes_instances_in_any_state(kubectl: Kubectl, namespace: str,
                                                          operator: OperatorProcess) -> None:
    other = f"{namespace[:50]}-gone"
    kubectl("create", "namespace", other)
    try:
        plain = entity("plain", other)
        del plain["spec"]["realization"]
        apply(kubectl, plain)
        kubectl("wait", "--for=condition=Ready", "-n", other, "--timeout", "20s", "serviceentity/plain")
        apply(kubectl, instance("stuck", other, "plain", who="x"))
        in_state(kubectl, other, "stuck", "up")
        merge(kubectl, other, "stuck", {"spec": {"attributes": {"who": 7}}})  # not a string: rejected
        in_state(kubectl, other, "stuck", "update_rejected", version_above=2)
        assert kubectl("delete", "si", "stuck", "-n", other, "--wait=false", check=False).returncode != 0
        kubectl("delete", "namespace", other, "--timeout", "60s")  # the namespace controller's deletes go through
    finally:
        kubectl("delete", "namespace", other, "--wait=false", "--ignore-not-found")


def test_app_service_refuses_a_duplicate_identity_and_an_update_where_no_transfer_takes_one(
        kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    catalog(kubectl, namespace, nap=6)  # the App's create takes a while: the instance stays in `creating`
    apply(kubectl, instance("first", namespace, who="one"))
    wait_until(lambda: status_of(kubectl, namespace, "first").get("state") == "creating", 30, "first in creating",
               interval=0.2)
    # the identity is unique per entity: another instance claiming "first" is refused at apply time
    dup = instance("second", namespace, who="two")
    dup["spec"]["attributes"]["name"] = "first"
    refused = apply(kubectl, dup, check=False)
    assert refused.returncode != 0
    assert "spec.attributes.name: service identity name=first is already used by service instance first" in (
        refused.stderr)
    # an update in a state without an on_update transfer: 409 naming the state and where updates are taken
    version = status_of(kubectl, namespace, "first")["version"]
    changed = merge(kubectl, namespace, "first", {"spec": {"currentVersion": version,
                                                             "attributes": {"who": "three"}}}, check=False)
    assert changed.returncode != 0
    assert ('service instance first in state "creating" cannot be updated: the state has no on_update transfer '
            "(states that allow an update: rejected, up, update_rejected)") in changed.stderr, changed.stderr
    assert si(kubectl, namespace, "first")["spec"]["attributes"]["who"] == "one"  # untouched
    in_state(kubectl, namespace, "first", "up")


def test_the_operator_installs_restores_and_updates_the_builtins_but_leaves_an_admins_object(
        kubectl: Kubectl, cluster: ClusterInfo, operator: OperatorProcess) -> None:
    """apply_shipped, as every operator start runs it: a deleted built-in comes back, an edited one is
    put back as shipped, and an object of the same name without the shipped label is an admin's."""
    wait_for_builtins(kubectl)
    kubectl("delete", "clusterlifecycle", "testing-basic-lifecycle")
    kubectl("patch", "clusterlifecycle", "simple", "--type=json",
            "-p", '[{"op": "add", "path": "/spec/states/0/description", "value": "edited"}]')

    def ship() -> None:
        async def body() -> None:
            async with KubeClient(load_access(cluster.kubeconfig)) as kube:
                await apply_shipped(kube, [CLUSTER_LIFECYCLE_KIND], wait_seconds=20)
        asyncio.run(body())

    ship()
    shipped = {o["metadata"]["name"]: o["spec"] for o in shipped_objects(CLUSTER_LIFECYCLE_KIND)}
    for name in ("testing-basic-lifecycle", "simple"):
        assert get(kubectl, "clusterlifecycle", name, "default")["spec"] == shipped[name]
    # an admin's `service`: the label gone, the spec edited; left alone, then given back
    kubectl("label", "clusterlifecycle", "service", "stead.dev/shipped-")
    kubectl("patch", "clusterlifecycle", "service", "--type=json",
            "-p", '[{"op": "add", "path": "/spec/states/0/description", "value": "the admin\'s"}]')
    try:
        ship()
        states = get(kubectl, "clusterlifecycle", "service", "default")["spec"]["states"]
        assert states[0]["description"] == "the admin's"
    finally:
        kubectl("label", "clusterlifecycle", "service", "stead.dev/shipped=true")
        ship()
    assert get(kubectl, "clusterlifecycle", "service", "default")["spec"] == shipped["service"]
