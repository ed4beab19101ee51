"""Every Stead kind captured live at each phase it has, for the tests that judge health as GitOps tools do.

kstatus (Flux's health, tests/e2e/test_kstatus.py) and Argo CD's Lua health checks judge the same
objects: `phase_objects` (session-scoped: the walk runs once however many modules use it; import it
as `from tests.e2e.phases import phase_objects  # noqa: F401`) returns them by (kind, phase).

The phases, each captured as `kubectl get -o json` saw it at that moment:
- `Ready`: Ready at its generation (a run: `Succeeded`);
- `Stalled`: a permanent failure (a missing blueprint, environment, lifecycle; a dependency cycle;
  an instance's update rejected by validation); a run: `Failed`, `Aborted`; an App: `Failed` (its
  create action failed). `ActionFailed`: an App after one of its actions failed (state error);
- `Running`, `Queued`, `Waiting`, `Launching`, `Reconciling`: work in progress. An App `Waiting` for its
  Blueprint to be Active. The walk runs an operator bounded to ONE run at a time, so a slow run holding
  it makes the next runs wait visibly (an App's create run `Queued`, the App `Launching`, a GraphRun
  `Pending`, a ServiceInstance `creating`);
- `Unobserved`: the object as the API server returned it from the PATCH that changed its spec
  (metadata.generation one past status.observedGeneration): no operator can have seen it yet, with
  no pause and no race.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ROOT, Kubectl, OperatorProcess, wait_until
from tests.e2e.test_apps import action_run, app, apply, blueprint, small_spec
from tests.e2e.test_blueprint import simple_spec
from tests.e2e.test_graphs import graph, graph_run, shell, ssh_environment
from tests.e2e.test_services import entity, greeter_spec, instance
from tests.sshd import SshNodes, available, ssh_nodes_in

API = "stead.dev/v1alpha1"
KINDS = ("Environment", "Blueprint", "App", "ActionRun", "ConfigComponent", "ConfigValues", "Lifecycle",
         "ClusterLifecycle", "ServiceEntity", "ServiceInstance", "DeploymentGraph", "GraphRun")
Captured = dict[tuple[str, str], dict[str, Any]]


def status_of(obj: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = obj.get("status") or {}
    return found


def settled(obj: dict[str, Any], type_: str) -> bool:
    """The condition `type_` is True at the object's present generation (its own observedGeneration; the
    walk leaves status.observedGeneration to the judges, so that a kind not setting it fails there)."""
    generation = obj["metadata"].get("generation")
    return any(c.get("type") == type_ and c.get("status") == "True" and c.get("observedGeneration") == generation
               for c in status_of(obj).get("conditions") or [])


class Walk:
    """Captures objects of one namespace (and, for ClusterLifecycle, of the cluster) by (kind, phase)."""

    def __init__(self, kubectl: Kubectl, namespace: str) -> None:
        self.kubectl, self.namespace = kubectl, namespace
        self.captured: Captured = {}

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        scope = [] if kind == "ClusterLifecycle" else ["-n", self.namespace]
        found = self.kubectl("get", kind.lower(), name, *scope, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def when(self, kind: str, name: str, phase: str, test: Any, seconds: float = 60) -> dict[str, Any]:
        """Poll the object until `test(obj)` holds, and capture it as (kind, phase)."""
        last: list[dict[str, Any] | None] = [None]

        def reached() -> dict[str, Any] | None:
            obj = last[0] = self.get(kind, name)
            return obj if obj is not None and test(obj) else None
        try:
            obj: dict[str, Any] = wait_until(reached, seconds, f"{kind} {name} {phase}", interval=0.1)
        except AssertionError as error:
            raise AssertionError(f"{error}; its status: {json.dumps(status_of(last[0] or {}))[:3000]}") from None
        self.captured[(kind, phase)] = obj
        return obj

    def ready(self, kind: str, name: str, seconds: float = 60) -> dict[str, Any]:
        return self.when(kind, name, "Ready", lambda o: settled(o, "Ready"), seconds)

    def stalled(self, kind: str, name: str, phase: str = "Stalled", seconds: float = 60) -> dict[str, Any]:
        return self.when(kind, name, phase, lambda o: settled(o, "Stalled"), seconds)

    def state(self, kind: str, name: str, phase: str, *states: str, seconds: float = 60) -> dict[str, Any]:
        """A run in one of `states`; an ended one once the operator concluded it (its conditions say so at
        its generation: the run's own `state` is written first, while it ends)."""
        def reached(obj: dict[str, Any]) -> bool:
            if status_of(obj).get("state") not in states:
                return False
            return phase in ("Running", "Queued") or settled(obj, "Ready") or settled(obj, "Stalled")
        return self.when(kind, name, phase, reached, seconds)

    def unobserved(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Change the spec; capture the PATCH's response: the new generation, the status of the old one."""
        scope = [] if kind == "ClusterLifecycle" else ["-n", self.namespace]
        response = self.kubectl("patch", kind.lower(), name, *scope, "--type", "merge", "-p",
                                json.dumps({"spec": spec}), "-o", "json")
        obj: dict[str, Any] = json.loads(response.stdout)
        self.captured[(kind, "Unobserved")] = obj
        return obj


def walk_phases(kubectl: Kubectl, namespace: str, ssh_nodes: SshNodes, cluster_lifecycle: str) -> Captured:
    """Bring one object of each kind through its phases (the operator must run at most one run at once)."""
    w = Walk(kubectl, namespace)
    ns = namespace

    # --- what becomes Ready or Stalled without any run ---------------------------------------------
    for example in ("config-environment.yaml", "config-component.yaml", "config-values.yaml",
                    "service-lifecycle-simple.yaml"):
        kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / example))
    apply(kubectl, {"apiVersion": API, "kind": "ConfigValues", "metadata": {"name": "lost", "namespace": ns},
                    "spec": {"environment": "nowhere", "resource": "astute", "level": {}, "data": {"debug": True}}})
    lifecycle = yaml.safe_load((ROOT / "examples" / "service-lifecycle-simple.yaml").read_text())
    apply(kubectl, {"apiVersion": API, "kind": "ClusterLifecycle", "metadata": {"name": cluster_lifecycle},
                    "spec": lifecycle["spec"]})
    apply(kubectl, blueprint("small", ns, small_spec()))
    apply(kubectl, blueprint("cyclic", ns, simple_spec([{"name": "S1", "dependsOn": ["S2"]},
                                                         {"name": "S2", "dependsOn": ["S1"]}])))
    apply(kubectl, blueprint("greeter", ns, greeter_spec()))
    apply(kubectl, entity("greeter", ns))
    apply(kubectl, entity("orphan", ns, {"name": "no-such-lifecycle"}))
    apply(kubectl, app("ghost", ns, "no-such-blueprint"))
    apply(kubectl, {**blueprint("draft", ns, small_spec()), "spec": {**small_spec(), "active": False}})
    apply(kubectl, app("early", ns, "draft"))
    ssh_environment(kubectl, ssh_nodes, ns)
    marker = f"sleep 60.{uuid.uuid4().int % 10**6:06d}"  # its own command line, to tell it from others'
    apply(kubectl, graph("r1-ok", ns, [shell("fine", ["controller"], "true")], release="r1", type="ok"))
    apply(kubectl, graph("r1-boom", ns, [shell("boom", ["controller"], "exit 3")], release="r1", type="boom"))
    apply(kubectl, graph("r1-slow", ns, [shell("wait", ["controller"], marker)], release="r1", type="slow"))
    apply(kubectl, graph_run("lost", ns, {"type": "ok"}, environment="nowhere"))

    w.ready("Environment", "env-1")
    w.ready("ConfigComponent", "fuel")
    w.ready("ConfigValues", "astute")
    w.stalled("ConfigValues", "lost")
    w.ready("Lifecycle", "my-simple")
    w.ready("ClusterLifecycle", cluster_lifecycle)
    w.ready("Blueprint", "small")
    w.stalled("Blueprint", "cyclic")
    w.ready("ServiceEntity", "greeter")
    w.stalled("ServiceEntity", "orphan")
    w.stalled("App", "ghost")
    w.when("App", "early", "Waiting", lambda o: settled(o, "Reconciling"))  # for its blueprint to be Active
    w.ready("DeploymentGraph", "r1-ok")
    w.stalled("GraphRun", "lost")

    # --- runs that end ----------------------------------------------------------------------------
    apply(kubectl, app("demo", ns, "small", inputs={"who": "stead"}))
    w.ready("App", "demo")
    failing = small_spec()
    failing["services"][0]["actions"][0]["tasks"][0]["script"] = "echo about to fail; exit 3"
    apply(kubectl, blueprint("failing", ns, failing))
    w.ready("Blueprint", "failing")
    apply(kubectl, app("broken", ns, "failing"))
    w.stalled("App", "broken", "Failed")  # its create action failed
    apply(kubectl, action_run("greet-1", ns, "demo", "greet"))
    w.state("ActionRun", "greet-1", "Ready", "Succeeded")
    apply(kubectl, graph_run("ok", ns, {"type": "ok"}))
    w.state("GraphRun", "ok", "Ready", "Succeeded")
    apply(kubectl, graph_run("boom", ns, {"type": "boom"}))
    w.state("GraphRun", "boom", "Failed", "Failed")
    apply(kubectl, instance("db-1", ns, who="one"))
    up = w.when("ServiceInstance", "db-1", "Ready",
                lambda o: status_of(o).get("state") == "up" and settled(o, "Ready"))
    version = status_of(up)["version"]
    kubectl("patch", "serviceinstance", "db-1", "-n", ns, "--type", "merge", "-p",
            json.dumps({"spec": {"attributes": {"who": "Bad1"}, "currentVersion": version}}))
    rejected = w.when("ServiceInstance", "db-1", "Stalled",
                      lambda o: status_of(o).get("state") == "update_rejected" and settled(o, "Stalled"))

    # --- work in progress: one slow run holds the only run slot, the next ones wait -------------------
    apply(kubectl, action_run("slow-1", ns, "demo", "slow"))
    w.state("ActionRun", "slow-1", "Running", "Running")
    apply(kubectl, app("second", ns, "small"))
    apply(kubectl, graph_run("slow", ns, {"type": "slow"}))
    apply(kubectl, instance("db-2", ns, who="two"))

    def create_run_of(app_name: str) -> str:
        def named() -> str | None:
            runs = json.loads(kubectl("get", "actionruns", "-n", ns, "-o", "json").stdout)["items"]
            return next((r["metadata"]["name"] for r in runs if r["spec"]["app"] == app_name), None)
        found: str = wait_until(named, 30, f"the create run of App {app_name}", interval=0.1)
        return found

    w.state("ActionRun", create_run_of("second"), "Queued", "Queued")
    w.when("App", "second", "Launching", lambda o: bool(status_of(o).get("conditions")))
    w.when("GraphRun", "slow", "Queued",  # Pending, with why: waiting for the run slot
           lambda o: status_of(o).get("state") == "Pending" and bool(status_of(o).get("reason")))
    w.when("ServiceInstance", "db-2", "Reconciling", lambda o: status_of(o).get("state") == "creating")
    w.unobserved("ActionRun", "slow-1", {"abort": True})
    w.state("ActionRun", "slow-1", "Aborted", "Aborted")
    w.state("GraphRun", "slow", "Running", "Running", seconds=90)
    w.unobserved("GraphRun", "slow", {"abort": True})
    w.state("GraphRun", "slow", "Aborted", "Aborted")
    kubectl("wait", "--for=condition=Ready", "-n", ns, "--timeout", "60s", "app/second")

    # --- a run that fails -------------------------------------------------------------------------
    apply(kubectl, action_run("fail-1", ns, "demo", "fail"))
    w.state("ActionRun", "fail-1", "Failed", "Failed")
    # the failure is the run's (Failed); the App stays Ready (its spec is realized), its state says error
    w.when("App", "demo", "ActionFailed", lambda o: status_of(o).get("state") == "error")

    # --- a spec change nobody has observed yet, for every kind --------------------------------------
    w.unobserved("Environment", "env-1", {"components": ["fuel", "more"]})
    w.unobserved("Blueprint", "small", {"description": "changed"})
    w.unobserved("App", "second", {"inputs": {"who": "changed"}})
    w.unobserved("ConfigComponent", "fuel", {"description": "changed"})
    w.unobserved("ConfigValues", "astute", {"historyLimit": 7})
    w.unobserved("Lifecycle", "my-simple", {"description": "changed"})
    w.unobserved("ClusterLifecycle", cluster_lifecycle, {"description": "changed"})
    w.unobserved("ServiceEntity", "greeter", {"description": "changed"})
    w.unobserved("ServiceInstance", "db-1", {"stateRequest": {"target": "up",
                                                              "currentVersion": status_of(rejected)["version"]}})
    w.unobserved("DeploymentGraph", "r1-ok", {"tasks": [shell("fine", ["controller"], "true; true")]})
    return w.captured


@pytest.fixture(scope="session")
def phase_objects(kubectl: Kubectl, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory) -> Captured:
    """The walk, once per session, with the session's operator replaced meanwhile by one bounded to a single
    run at a time (runs wait visibly behind a slow one), and restarted afterwards."""
    why = available()
    if why is not None:
        pytest.skip(why)
    # t-test-app*: a namespace the session's operator trusts to run an App's scripts on its host
    namespace = f"t-test-app-phases-{uuid.uuid4().hex[:6]}"
    cluster_lifecycle = namespace  # cluster-scoped: named after the namespace, deleted with it
    kubectl("create", "namespace", namespace)
    work = tmp_path_factory.mktemp("phases")
    operator.stop()
    bounded = OperatorProcess(operator.cluster, store=operator.store, log_path=work / "bounded.log",
                              extra_args=("--max-concurrent-runs", "1"))
    try:
        with contextlib.ExitStack() as stack:
            stack.callback(operator.start)
            stack.callback(bounded.stop)
            bounded.start()
            nodes = stack.enter_context(ssh_nodes_in(work / "sshd"))
            started = time.monotonic()
            captured = walk_phases(kubectl, namespace, nodes, cluster_lifecycle)
            print(f"\nphase walk: {len(captured)} objects captured in {time.monotonic() - started:.0f} s")
            return captured
    finally:
        kubectl("delete", "clusterlifecycle", cluster_lifecycle, "--wait=false", check=False)
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
