"""The console's forms in a real browser, against the test run's API server and operator, as a user who may not
read CRDs: an App launched from the form generated from its kind's schema, its create run followed to Succeeded;
a refusal that came from the API server itself (its schema's own words) shown next to the field it names, with
nothing created; the YAML and the kubectl and stead commands beside the form, following what is typed; the App edited
from its form; an action called from its form (an ActionRun of the App). The two other action forms: graph types
executed on an Environment of real sshd nodes (tests/e2e/test_graphs.py's), the GraphRun followed to Succeeded;
a ServiceInstance's state requested, offered only the states its lifecycle allows now, and its diagram then lit
at the state reached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from operators.graphs.objects import type_of
from operators.lsm.builtin import BUILTINS
from tests.e2e.conftest import Kubectl
from tests.e2e.console import ConsoleProcess, OpenConsole, console_user, screenshot
from tests.e2e.test_apps import apply, blueprint, run_state, small_spec
from tests.e2e.test_console_lifecycle import lit
from tests.e2e.test_graphs import environment, graph, shell  # noqa: F401  (environment: its fixture)
from tests.e2e.test_services import entity, greeter_spec, in_state, instance
from tests.polling import wait_until
from tests.sshd import ssh_nodes  # noqa: F401  (the module's sshd nodes, for `environment`)

pytestmark = pytest.mark.e2e


def offered(page: Any, path: str) -> list[str]:
    """The values the form suggests at a field (its datalist), in order."""
    found: list[str] = page.get_by_test_id(f"input-{path}").evaluate(
        "e => e.list ? [...e.list.options].map(o => o.value) : []")
    return found


def test_app_launched_from_the_form_with_the_api_servers_refusals_at_their_fields(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    # the namespace is t-test-app-...: the session's operator runs its scripts on this host (tests/e2e/test_apps.py)
    apply(kubectl, blueprint("small", namespace, small_spec()))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/small")
    page = console_page(console_user(kubectl, namespace), f"#/ns/{namespace}/new/apps")
    field = lambda path: page.get_by_test_id(f"input-{path}")  # noqa: E731
    field("metadata.name").fill("web")

    # Refused by the API server's schema (the form checks nothing itself): each problem at its field, nothing made.
    field("spec.lockTtlSeconds").fill("0")
    page.get_by_test_id("form-submit").click()
    ttl = page.get_by_test_id("error-spec.lockTtlSeconds")
    ttl.wait_for()
    assert "spec.lockTtlSeconds in body should be greater than or equal to 1" in ttl.inner_text()
    assert page.get_by_test_id("error-spec.blueprint").inner_text() == "Required value"
    assert "dry run" in page.get_by_test_id("form-status").inner_text()
    assert kubectl("get", "app", "web", "-n", namespace, check=False).returncode != 0
    screenshot(page, "forms", tmp_path)

    # The YAML and the commands beside the form follow what is typed.
    field("spec.lockTtlSeconds").fill("")
    field("spec.blueprint").fill("small")
    page.get_by_test_id("add-spec.inputs").click()
    page.get_by_test_id("key-spec.inputs[0]").fill("who")
    page.locator('[data-test="field-spec.inputs"] .form-entry [data-test^="input-"]').fill("forms")
    stead = page.get_by_test_id("form-stead")
    wait_until(lambda: stead.inner_text() == f"stead app launch web --blueprint small --input who=forms -n {namespace}",
               10, "the stead command beside the form")
    shown = page.get_by_test_id("form-yaml").inner_text()
    assert "blueprint: small" in shown and "who: forms" in shown and "lockTtlSeconds" not in shown
    assert page.get_by_test_id("form-kubectl").inner_text().startswith("kubectl apply -f - <<'EOF'\napiVersion:")
    assert page.get_by_test_id("error-spec.lockTtlSeconds").inner_text() == ""  # changed since: its error went
    assert page.get_by_test_id("error-spec.blueprint").inner_text() == ""

    page.get_by_test_id("form-submit").click()
    page.get_by_test_id("form-done").wait_for()
    assert page.get_by_test_id("error-spec.lockTtlSeconds").inner_text() == ""
    made = json.loads(kubectl("get", "app", "web", "-n", namespace, "-o", "json").stdout)
    assert made["spec"] == {"blueprint": "small", "inputs": {"who": "forms"}}

    # Its create run (made by the operator once it sees the App), followed on its page until it succeeds.
    wait_until(lambda: kubectl("get", "actionrun", "web-create", "-n", namespace, check=False).returncode == 0, 60,
               "the operator made the App's create run")
    page.goto(console.url + f"#/ns/{namespace}/actionruns/web-create")
    state = page.get_by_test_id("state")
    wait_until(lambda: state.count() and state.inner_text() == "Succeeded", 60, "the create run Succeeded on its page")

    # Edited from its form: a merge patch at the version seen (the finalizer Stead holds stays).
    page.goto(console.url + f"#/ns/{namespace}/apps/web/edit")
    field("spec.softDelete").select_option("true")
    assert field("metadata.name").is_disabled()
    page.get_by_test_id("form-submit").click()
    page.get_by_test_id("form-done").wait_for()
    edited = json.loads(kubectl("get", "app", "web", "-n", namespace, "-o", "json").stdout)
    assert edited["spec"] == {"blueprint": "small", "inputs": {"who": "forms"}, "softDelete": True}
    assert edited["metadata"]["finalizers"] == made["metadata"]["finalizers"]

    # An action called from its form, reached from the App's page: the App fixed, its actions suggested.
    page.goto(console.url + f"#/ns/{namespace}/apps/web")
    page.get_by_test_id("do-run").click()
    field("spec.action").wait_for()
    assert field("spec.app").input_value() == "web" and field("spec.app").is_disabled()
    field("spec.action").fill("greet")
    wait_until(lambda: page.get_by_test_id("form-stead").inner_text() == f"stead app run web greet -n {namespace}",
               10, "the run's stead command")
    screenshot(page, "forms-run", tmp_path)
    page.get_by_test_id("form-submit").click()
    page.get_by_test_id("form-done").wait_for()
    name = page.get_by_test_id("form-done").inner_text().split("actionrun/", 1)[1].rstrip(": ")
    assert name.startswith("web-greet-")
    assert run_state(kubectl, namespace, name, "Succeeded", "Failed")["state"] == "Succeeded"


def test_graph_types_executed_from_the_environments_form_on_two_of_its_nodes(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl,
        environment: tuple[str, Path]) -> None:  # noqa: F811
    namespace, _ = environment
    apply(kubectl, graph("r1-forms", namespace, [shell("hello", ["*"], "echo hello from $(hostname)")],
                         release="r1", type="forms"))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "deploymentgraph/r1-forms")
    graphs = json.loads(kubectl("get", "deploymentgraphs", "-n", namespace, "-o", "json").stdout)["items"]
    # its own account: the namespace is the module's, shared with test_console_runs in one session
    token = console_user(kubectl, namespace, account="console-forms")
    page = console_page(token, f"#/ns/{namespace}/environments/env/do/execute")
    field = lambda path: page.get_by_test_id(f"input-{path}")  # noqa: E731
    field("spec.graphs[0].type").wait_for()
    assert field("spec.environment").input_value() == "env" and field("spec.environment").is_disabled()

    # offered: the environment's graph types (every graph of the namespace is its release r1's or its own), and
    # its nodes in each item of a graph's nodes
    types = offered(page, "spec.graphs[0].type")
    assert types == sorted({type_of(g) for g in graphs}) and "forms" in types
    page.get_by_test_id("add-spec.graphs[0].nodes").click()
    page.get_by_test_id("add-spec.graphs[0].nodes").click()
    assert offered(page, "spec.graphs[0].nodes[1]") == ["ctl", "cmp-1", "cmp-2"]
    field("spec.graphs[0].nodes[0]").fill("ctl")
    field("spec.graphs[0].nodes[1]").fill("cmp-1")

    # a type the schema refuses: the API server's words at the field, nothing created
    runs_before = kubectl("get", "graphruns", "-n", namespace, "-o", "name").stdout.split()
    field("spec.graphs[0].type").fill("no such")
    page.get_by_test_id("form-submit").click()
    refused = page.get_by_test_id("error-spec.graphs[0].type")
    refused.wait_for()
    wait_until(lambda: refused.inner_text() != "", 10, "the refusal at spec.graphs[0].type")
    assert "spec.graphs[0].type in body should match" in refused.inner_text()
    assert "dry run" in page.get_by_test_id("form-status").inner_text()
    assert kubectl("get", "graphruns", "-n", namespace, "-o", "name").stdout.split() == runs_before

    # the commands and YAML beside it follow what is typed
    field("spec.graphs[0].type").fill("forms")
    stead = page.get_by_test_id("form-stead")
    wait_until(lambda: stead.inner_text() == f"stead graph execute -e env -t forms -N ctl cmp-1 -n {namespace}",
               10, "the stead command beside the form")
    shown = page.get_by_test_id("form-yaml").inner_text()
    assert "kind: GraphRun" in shown and "generateName: env-" in shown and "type: forms" in shown
    assert page.get_by_test_id("form-kubectl").inner_text().startswith("kubectl create -f - <<'EOF'\napiVersion:")

    page.get_by_test_id("form-submit").click()
    page.get_by_test_id("form-done").wait_for()
    name = page.get_by_test_id("form-done").inner_text().split("graphrun/", 1)[1].rstrip(": ")
    made = json.loads(kubectl("get", "graphrun", name, "-n", namespace, "-o", "json").stdout)
    assert made["spec"]["graphs"] == [{"type": "forms", "nodes": ["ctl", "cmp-1"]}]

    # followed on its page until it succeeds, run on those two nodes only (the third's task skipped)
    page.get_by_test_id("form-open").click()
    state = page.get_by_test_id("state")
    wait_until(lambda: state.count() and state.inner_text() == "Succeeded", 60, "the GraphRun Succeeded on its page")
    status = json.loads(kubectl("get", "graphrun", name, "-n", namespace, "-o", "json").stdout)["status"]
    assert {n["name"]: [t["state"] for t in n["tasks"]] for n in status["nodes"]} == {
        "ctl": ["success"], "cmp-1": ["success"], "cmp-2": ["skipped"]}


def test_a_state_requested_from_the_instances_form_among_the_states_allowed_now_is_lit(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, namespace: str) -> None:
    # the `service` lifecycle with its design gate switched off: the instance waits in acknowledged, where only
    # state requests lead on; designed deploys nothing, so no App runs
    apply(kubectl, blueprint("greeter", namespace, greeter_spec()))
    apply(kubectl, entity("greeter", namespace, {"builtin": "service"},
                          config={"auto_designed": False, "auto_creating": False}))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "40s", "blueprint/greeter",
            "serviceentity/greeter")
    apply(kubectl, instance("db-1", namespace, who="one"))
    status = in_state(kubectl, namespace, "db-1", "acknowledged")
    page = console_page(console_user(kubectl, namespace), f"#/ns/{namespace}/serviceinstances/db-1/do/set-state")
    field = lambda path: page.get_by_test_id(f"input-{path}")  # noqa: E731
    field("spec.stateRequest.target").wait_for()

    # offered: the targets of the lifecycle's state-request transfers out of acknowledged, and nothing else
    allowed = [t.target for t in BUILTINS["service"].transfers if t.source == "acknowledged" and t.api_set_state]
    assert allowed == ["designed", "acknowledged"]
    assert offered(page, "spec.stateRequest.target") == allowed
    assert field("spec.stateRequest.currentVersion").input_value() == str(status["version"])
    assert field("spec.stateRequest.currentVersion").is_disabled() and field("metadata.name").is_disabled()

    field("spec.stateRequest.target").fill("designed")
    stead = page.get_by_test_id("form-stead")
    wait_until(lambda: stead.inner_text() == f"stead service set-state db-1 designed -n {namespace}", 10,
               "the stead command beside the form")
    request = {"stateRequest": {"target": "designed", "currentVersion": status["version"]}}
    patch = json.dumps({"spec": request}, separators=(",", ":"))
    assert page.get_by_test_id("form-kubectl").inner_text() == (
        f"kubectl patch serviceinstance db-1 -n {namespace} --type merge -p '{patch}'")
    page.get_by_test_id("form-submit").click()
    page.get_by_test_id("form-done").wait_for()
    assert page.get_by_test_id("form-done").inner_text().startswith("Requested on serviceinstance/db-1")
    recorded = json.loads(kubectl("get", "serviceinstance", "db-1", "-n", namespace, "-o", "json").stdout)
    assert recorded["spec"]["stateRequest"] == request["stateRequest"]

    # the instance's diagram, from the form's link: the state reached is lit
    page.get_by_test_id("form-open").click()
    page.wait_for_selector('.lc-state.lit[data-test="state-designed"]', timeout=30_000)
    assert lit(page) == "state-designed"
    reached = in_state(kubectl, namespace, "db-1", "designed")
    assert reached["version"] == status["version"] + 1 and reached["log"][-1]["trigger"] == "api_set_state"
