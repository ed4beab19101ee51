"""Argo CD's view of Stead, on live objects: the chart's health checks and actions (tests/argocd.py runs them as
Argo CD does) read real objects brought to Ready, reconciling, stalled, a failed run and a queued run, and the
actions' results are sent to the API server as Argo CD sends them (a merge patch, or a create).

With STEAD_CAPTURE=1 the objects are also written, cleaned (tests/argocd.py `cleaned`), into the kinds'
testdata/ directories, which the unit tests (tests/unit/test_argocd.py) read: the testdata are what Stead
really writes, not what someone thought it writes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cluster import Binaries
from operators.cluster.versions import KUBERNETES_VERSION
from tests import argocd
from tests.e2e.conftest import Kubectl, OperatorProcess, env_manifest, wait_until
from tests.e2e.test_apps import app, apply, blueprint, small_spec
from tests.e2e.test_graphs import environment, graph, shell  # noqa: F401  (the graphs' Environment on sshd nodes)
from tests.sshd import ssh_nodes  # noqa: F401

API = "stead.dev/v1alpha1"
CAPTURE = os.environ.get("STEAD_CAPTURE") == "1"
SHOWN_NAMESPACE = "stead-demo"
"""The test's namespace is random: testdata name this one instead, so that messages quoting it stay stable."""


class Live:
    """Reads live objects, judges them with the chart's scripts, and captures them as testdata."""

    def __init__(self, kubectl: Kubectl, namespace: str) -> None:
        self.kubectl = kubectl
        self.namespace = namespace
        self.judged: dict[str, dict[str, dict[str, str]]] = {}
        """kind -> testdata file -> the health asserted on it (written to health_test.yaml when capturing)"""

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        where = [] if kind == "clusterlifecycle" else ["-n", namespace or self.namespace]
        out: dict[str, Any] = json.loads(self.kubectl("get", kind, name, *where, "-o", "json").stdout)
        return out

    def judge(self, obj: dict[str, Any], capture_as: str, status: str, message: str) -> dict[str, Any]:
        """Assert the health Argo CD would show (`message`: the whole message, or `...` where it goes on);
        capture the object as <Kind>/testdata/<capture_as>.yaml when asked."""
        shown = argocd.health(obj)
        pattern = ".*".join(re.escape(part) for part in message.split("..."))
        assert shown.status == status and re.fullmatch(pattern, shown.message, re.DOTALL), (shown, obj.get("status"))
        if CAPTURE:
            path = argocd.TREE / obj["kind"] / "testdata" / f"{capture_as}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            text = json.dumps(argocd.cleaned(obj)).replace(self.namespace, SHOWN_NAMESPACE)
            path.write_text(yaml.safe_dump(json.loads(text), sort_keys=False))
            self.judged.setdefault(obj["kind"], {})[f"testdata/{capture_as}.yaml"] = {
                "status": shown.status, "message": shown.message.replace(self.namespace, SHOWN_NAMESPACE)}
        return obj

    def write_tests(self) -> None:
        """Each kind's health_test.yaml (upstream's format): what this test asserted on the objects it captured,
        beside the entries of files it did not capture again."""
        for kind, judged in self.judged.items():
            path = argocd.TREE / kind / "health_test.yaml"
            tests = yaml.safe_load(path.read_text())["tests"] if path.exists() else []
            kept = [t for t in tests if t["inputPath"] not in judged]
            made = [{"healthStatus": health, "inputPath": input_path} for input_path, health in judged.items()]
            path.write_text(yaml.safe_dump({"tests": sorted(kept + made, key=lambda t: t["inputPath"])},
                                           sort_keys=False, width=200))

    def send(self, live: dict[str, Any], impacted: list[argocd.Impacted]) -> list[str]:
        """Write what an action returned as Argo CD does: a create, or the merge patch from the live object."""
        names = []
        for item in impacted:
            resource = item.resource
            kind, name = resource["kind"].lower(), resource["metadata"]["name"]
            if item.operation == "create":
                self.kubectl("create", "-f", "-", input=json.dumps(resource))
            else:
                assert item.operation == "patch", item
                patch = argocd.merge_patch(live, resource)
                assert set(patch) == {"spec"}, patch  # the actions change spec only
                self.kubectl("patch", kind, name, "-n", resource["metadata"]["namespace"], "--type", "merge",
                             "-p", json.dumps(patch))
            names.append(name)
        return names


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def until(live: Live, kind: str, name: str, test: Any, what: str, seconds: float = 40,
          namespace: str | None = None) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        obj = live.get(kind, name, namespace)
        return obj if test(obj) else None
    found: dict[str, Any] = wait_until(reached, seconds, f"{kind}/{name} {what}", interval=0.2)
    return found


def state_is(*states: str) -> Any:
    return lambda obj: (obj.get("status") or {}).get("state") in states


def settled(*states: str) -> Any:
    """In one of `states` at the object's generation: a run's state moves to Aborted before its status observes
    the generation that set spec.abort (meanwhile its health is Progressing: the new generation is not observed)."""
    return lambda obj: state_is(*states)(obj) and (obj.get("status") or {}).get("observedGeneration") == \
        obj["metadata"]["generation"]


def ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return (status.get("observedGeneration") == obj["metadata"]["generation"]
            and conditions(obj).get("Ready", {}).get("status") == "True")


def stalled(obj: dict[str, Any]) -> bool:
    return conditions(obj).get("Stalled", {}).get("status") == "True"


def reconciling(obj: dict[str, Any]) -> bool:
    return conditions(obj).get("Reconciling", {}).get("status") == "True"


def lifecycle(name: str, namespace: str) -> dict[str, Any]:
    """start validates its candidate attributes (up, or rejected), then up <-> down by state requests."""
    return {"apiVersion": API, "kind": "Lifecycle", "metadata": {"name": name, "namespace": namespace},
            "spec": {"initialState": "start", "states": [
                {"name": "start", "validateSelf": "candidate"}, {"name": "up", "exportResources": True},
                {"name": "down"}, {"name": "rejected"}, {"name": "gone", "deleted": True}],
                "transfers": [
                    {"source": "start", "target": "up", "auto": True, "validate": True, "error": "rejected",
                     "targetOperation": "promote"},
                    {"source": "up", "target": "down", "apiSetState": True},
                    {"source": "down", "target": "up", "apiSetState": True},
                    *({"source": s, "target": "gone", "onDelete": True} for s in ("up", "down", "rejected"))]}}


def entity(name: str, namespace: str, lifecycle_name: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ServiceEntity", "metadata": {"name": name, "namespace": namespace},
            "spec": {"description": "A counter.", "identity": "name", "lifecycle": {"name": lifecycle_name},
                     "config": {}, "attributes": [{"name": "name", "type": "string", "description": "The identity."},
                                                  {"name": "size", "type": "int", "modifier": "rw+"}]}}


def instance(name: str, namespace: str, size: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ServiceInstance", "metadata": {"name": name, "namespace": namespace},
            "spec": {"entity": "counter", "attributes": {"name": name, "size": size}}}


CLOCK = "20260101000000"
"""The time the actions name their runs after (os.date): fixed, so that a capture names them as the last did."""


def test_app_argocd_health_and_actions_on_live_objects(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str, environment: tuple[str, Path],  # noqa: F811
        tmp_path: Path) -> None:
    live = Live(kubectl, namespace)
    graphs_namespace, _ = environment

    # --- Ready, and stalled: a blueprint, apps, a missing blueprint -------------------------------------------
    apply(kubectl, blueprint("small", namespace, small_spec()))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/small")
    for name in ("demo", "other"):
        apply(kubectl, app(name, namespace, "small", inputs={"who": "stead"}))
    apply(kubectl, app("ghost", namespace, "nowhere"))
    apply(kubectl, lifecycle("flip", namespace))
    apply(kubectl, entity("counter", namespace, "flip"))
    apply(kubectl, instance("good", namespace, 3))
    apply(kubectl, instance("bad", namespace, "three"))
    apply(kubectl, {"apiVersion": API, "kind": "ConfigComponent", "metadata": {"name": "web", "namespace": namespace},
                    "spec": {"resources": [{"name": "conf", "schema": {
                        "type": "object", "properties": {"workers": {"type": "integer", "minimum": 1}}}}]}})
    kubectl("apply", "-f", "-", input=env_manifest("cfg", namespace, components=["web"]))
    apply(kubectl, {"apiVersion": API, "kind": "ConfigValues",
                    "metadata": {"name": "conf-root", "namespace": namespace},
                    "spec": {"environment": "cfg", "resource": "conf", "kind": "values", "level": {},
                             "data": {"workers": 2}}})
    live.judge(live.get("blueprint", "small"), "healthy", "Healthy", "provisioned")
    demo = live.judge(until(live, "app", "demo", ready, "Ready"), "healthy", "Healthy", "running: provisioned")
    until(live, "app", "other", ready, "Ready")
    live.judge(live.get("actionrun", "demo-create"), "healthy", "Healthy", "Succeeded: provisioned")
    live.judge(until(live, "app", "ghost", stalled, "Stalled"), "degraded_blueprintNotFound", "Degraded",
               f"spec.blueprint: no Blueprint 'nowhere' in namespace {namespace} ...")
    live.judge(until(live, "lifecycle", "flip", ready, "Ready"), "healthy", "Healthy", "provisioned")
    live.judge(until(live, "serviceentity", "counter", ready, "Ready"), "healthy", "Healthy", "provisioned")
    live.judge(live.get("clusterlifecycle", "simple"), "healthy", "Healthy", "provisioned")
    live.judge(until(live, "configcomponent", "web", ready, "Ready"), "healthy", "Healthy", "provisioned")
    live.judge(until(live, "configvalues", "conf-root", ready, "Ready"), "healthy", "Healthy", "provisioned")
    good = live.judge(until(live, "serviceinstance", "good", lambda o: ready(o) and state_is("up")(o), "up"),
                      "healthy", "Healthy", "up: provisioned")
    live.judge(until(live, "serviceinstance", "bad", stalled, "rejected"), "degraded_rejected", "Degraded",
               'state "rejected": validation failed: spec.attributes.size: expected int, got string (ways out: '
               'delete -> gone)')

    # --- ServiceInstance: request a state --------------------------------------------------------------------
    offered = argocd.discover(good)
    assert offered["request-state"]["disabled"] is False, offered
    with pytest.raises(argocd.LuaFailure, match=r"no state request to gone from state up \(states requestable "
                       r"here: down\)"):
        argocd.run_action(good, "request-state", {"target": "gone"})
    live.send(good, argocd.run_action(good, "request-state", {"target": "down", "message": "from Argo CD"}))
    down = until(live, "serviceinstance", "good", lambda o: ready(o) and state_is("down")(o), "down")
    assert down["status"]["log"][-1]["trigger"] == "api_set_state", down["status"]["log"]
    live.judge(down, "healthy_down", "Healthy", "down: provisioned")

    # --- App: run an action that fails ----------------------------------------------------------------------
    assert argocd.discover(demo)["run-action"]["disabled"] is False
    failing = live.send(demo, argocd.run_action(demo, "run-action", {"action": "fail"}, clock=CLOCK))[0]
    run = until(live, "actionrun", failing, state_is("Failed"), "Failed")
    live.judge(run, "degraded_failed", "Degraded", "boom: script exited with code 3 ...")
    assert argocd.discover(run)["abort"]["disabled"] is True  # nothing left to abort
    live.judge(until(live, "app", "demo", lambda o: not (o["status"].get("lock")), "unlocked"),
               "degraded_lastActionFailed", "Degraded",
               f"The last action failed: fail (ActionRun demo-fail-{CLOCK}): script exited with code 3 ...")

    # --- one run slot: a running run, a queued run, an app waiting to launch; abort ---------------------------
    operator.stop()
    bounded = OperatorProcess(operator.cluster, store=operator.store, log_path=tmp_path / "bounded.log",
                              extra_args=("--max-concurrent-runs", "1"))
    bounded.start()
    try:
        demo = live.get("app", "demo")
        slow = live.send(demo, argocd.run_action(demo, "run-action", {"action": "slow"}, clock=CLOCK))[0]
        running = live.judge(until(live, "actionrun", slow, state_is("Running"), "Running"), "progressing_running",
                             "Progressing", "Running...: in phase Running")
        live.judge(until(live, "app", "demo", lambda o: o["status"].get("lock"), "locked"),
                   "progressing_actionRunning", "Progressing", f"Running action slow (ActionRun {slow})")
        assert argocd.discover(live.get("app", "demo"))["run-action"]["disabled"] is True  # one run at a time
        other = live.get("app", "other")
        nap = live.send(other, argocd.run_action(other, "run-action", {"action": "nap"}, clock=CLOCK))[0]
        assert nap == f"other-nap-{CLOCK}"
        live.judge(until(live, "actionrun", nap, state_is("Queued"), "Queued"), "progressing_queued", "Progressing",
                   "Queued: 1 runs in progress (this operator runs at most 1 at once), 0 queued before this one")
        apply(kubectl, app("late", namespace, "small"))
        live.judge(until(live, "app", "late", reconciling, "reconciling"), "progressing_reconciling",
                   "Progressing", "running the create action: ActionRun late-create")
        assert argocd.discover(running)["abort"]["disabled"] is False
        live.send(running, argocd.run_action(running, "abort"))
        live.judge(until(live, "actionrun", slow, settled("Aborted"), "Aborted"), "degraded_aborted", "Degraded",
                   "aborted: 0 of 1 steps succeeded")
    finally:
        bounded.stop()
        operator.start()

    # --- graphs: execute a graph type, abort its run ----------------------------------------------------------
    apply(kubectl, graph("r1-argocd", graphs_namespace, [shell("wait", ["controller"], "sleep 60")], release="r1",
                         type="argocd"))
    dg = live.judge(until(live, "deploymentgraph", "r1-argocd", ready, "Ready", namespace=graphs_namespace),
                    "healthy", "Healthy", "provisioned")
    live.judge(live.get("environment", "env", graphs_namespace), "healthy", "Healthy", "provisioned")
    assert argocd.discover(dg)["execute"]["params"] == [{"name": "environment"}]
    with pytest.raises(argocd.LuaFailure, match="parameter environment"):
        argocd.run_action(dg, "execute")
    executed = live.send(dg, argocd.run_action(dg, "execute", {"environment": "env"}, clock=CLOCK))[0]
    graph_run = until(live, "graphrun", executed, state_is("Running"), "Running", namespace=graphs_namespace)
    assert graph_run["spec"]["graphs"] == [{"type": "argocd"}]
    live.judge(graph_run, "progressing_running", "Progressing", "Running (0/1 done): in phase Running")
    live.send(graph_run, argocd.run_action(graph_run, "abort"))
    live.judge(until(live, "graphrun", executed, settled("Aborted"), "Aborted", namespace=graphs_namespace),
               "degraded_aborted", "Degraded", "aborted: 0 of 1 steps succeeded")
    apply(kubectl, {"apiVersion": API, "kind": "GraphRun",
                    "metadata": {"name": "argocd-plan", "namespace": graphs_namespace},
                    "spec": {"environment": "env", "graphs": [{"type": "argocd"}], "dryRun": True}})
    live.judge(until(live, "graphrun", "argocd-plan", lambda o: settled("Succeeded")(o) and ready(o), "Succeeded",
                     namespace=graphs_namespace), "healthy", "Healthy", "Succeeded: provisioned")

    # --- a stopped App is Suspended --------------------------------------------------------------------------
    other = until(live, "app", "other", lambda o: ready(o) and not o["status"].get("lock"), "free")
    live.send(other, argocd.run_action(other, "run-action", {"action": "stop"}, clock=CLOCK))
    live.judge(until(live, "app", "other", lambda o: state_is("stopped")(o) and not o["status"].get("lock"),
                     "stopped"), "suspended_stopped", "Suspended",
               "Stopped (its stop action succeeded): run its start action to resume it")
    live.write_tests()


def test_the_chart_renders_the_customizations_only_when_asked(binaries: Binaries, tmp_path: Path) -> None:
    """`argocd.enabled` renders every kind's health.lua and actions as argocd-cm keys, byte for byte the files
    the tests run; off by default."""
    import subprocess

    def template(*args: str) -> list[dict[str, Any]]:
        done = subprocess.run([str(binaries.helm), "template", "stead", str(argocd.ROOT / "charts" / "stead"),
                               "--kube-version", KUBERNETES_VERSION, *args],
                              env={"HOME": str(tmp_path), "HELM_CACHE_HOME": str(tmp_path / "c"),
                                   "HELM_CONFIG_HOME": str(tmp_path / "f"), "HELM_DATA_HOME": str(tmp_path / "d")},
                              capture_output=True, text=True, timeout=120, check=True)
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    assert not [o for o in template() if "resource.customizations.health.stead.dev_App" in (o.get("data") or {})]
    maps = [o for o in template("--set", "argocd.enabled=true", "--set", "argocd.namespace=argocd",
                                "--set", "argocd.configMapName=argocd-cm") if o["kind"] == "ConfigMap"
            and o["metadata"]["name"] == "argocd-cm"]
    assert len(maps) == 1 and maps[0]["metadata"]["namespace"] == "argocd"
    assert maps[0]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "argocd"  # Argo CD reads only its own
    data = maps[0]["data"]
    for kind in argocd.kinds():
        assert data[f"resource.customizations.health.stead.dev_{kind}"] == argocd.script(kind, "health.lua")
    assert {key.rsplit("_", 1)[1] for key in data if ".actions." in key} == set(argocd.ACTIONS)
    for kind, names in argocd.ACTIONS.items():
        actions = yaml.safe_load(data[f"resource.customizations.actions.stead.dev_{kind}"])
        assert actions["discovery.lua"] == argocd.script(kind, "actions", "discovery.lua")
        assert {d["name"]: d["action.lua"] for d in actions["definitions"]} == {
            name: argocd.script(kind, "actions", name, "action.lua") for name in names}
