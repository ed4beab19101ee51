"""The console's run view in a real browser (docs/console.md, "Runs"), against the session's operator: an App's
create run followed live until it succeeds, a failing task's output (with an XSS payload shown as text and
never run), and a GraphRun's timeline and DAG drawn, on the real sshd nodes of tests/e2e/test_graphs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Page

from tests.e2e.conftest import Kubectl, wait_until
from tests.e2e.console import ConsoleProcess, OpenConsole, console_user, screenshot
from tests.e2e.test_apps import action_run, app, apply, blueprint, run_state
from tests.e2e.test_graphs import environment, finished, graph, graph_run, shell  # noqa: F401  (its fixture)
from tests.sshd import ssh_nodes  # noqa: F401  (the module's sshd nodes, for `environment`)

XSS = "<img src=x onerror=window.__xss=1>"
SCRIPT = "<script>window.__xss=2</script>"


def run_page(page: Page, console: ConsoleProcess, namespace: str, plural: str, name: str) -> None:
    page.goto(f"{console.url}#/ns/{namespace}/{plural}/{name}")
    page.get_by_test_id("run-view").wait_for()


def state_of(page: Page) -> str:
    return str(page.locator('[data-test="run-state"]').first.text_content(timeout=5000) or "")


def run_state_now(kubectl: Kubectl, namespace: str, name: str) -> str:
    """The ActionRun's state as the API server has it now (not as the page shows it)."""
    return str(kubectl("get", "actionrun", name, "-n", namespace, "-o", "jsonpath={.status.state}").stdout).strip()


def spec() -> dict[str, Any]:
    """A create action long enough to be watched running, and an action whose task prints markup and fails."""
    return {
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [
            {"name": "create", "tasks": [
                {"name": "prepare", "type": "exec", "script": "echo preparing"},
                {"name": "install", "type": "exec", "script": "echo installing; sleep 8; echo installed"}],
             "edges": [{"from": "prepare", "to": "install"}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
        "actions": [{"name": "break", "tasks": [
            {"name": "boom", "type": "exec", "script": f"echo 'about to fail {XSS}'; echo '{SCRIPT}'; exit 3"}]}],
    }


def test_app_create_run_is_followed_live_and_a_failing_tasks_output_is_shown_as_text(
        kubectl: Kubectl, namespace: str, console_page: OpenConsole, console: ConsoleProcess) -> None:
    page = console_page(console_user(kubectl, namespace))
    apply(kubectl, blueprint("runs", namespace, spec()))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/runs")
    apply(kubectl, app("web", namespace, "runs"))
    wait_until(lambda: kubectl("get", "actionrun", "web-create", "-n", namespace, check=False).returncode == 0,
               20, "the App's create run")
    run_page(page, console, namespace, "actionruns", "web-create")
    seen: list[str] = [state_of(page)]
    # a service's tasks are named service/task, per replica; its output streams while it runs: the first line
    # is on the page while the run is still Running (the status gets a task's output only when it ends)
    install = 'task-S/install@tier-0'
    state = page.locator(f'[data-test="{install}"] [data-test="task-state-S/install@tier-0"]')
    wait_until(lambda: state.text_content(timeout=5000) == "running", 40, "the install task to run")
    page.locator(f'[data-test="{install}"]').click()
    output = page.locator('[data-test="output-S/install@tier-0"]')
    wait_until(lambda: "installing" in (output.text_content() or ""), 10, "the first line, streamed", interval=0.1)
    assert run_state_now(kubectl, namespace, "web-create") == "Running"
    assert "installed" not in (output.text_content() or "")

    def succeeded() -> bool:
        seen.append(state_of(page))
        return seen[-1] == "Succeeded"

    wait_until(succeeded, 60, "the page to show the create run Succeeded", interval=0.2)
    assert any(s in ("Pending", "Running") for s in seen), seen  # followed live, not loaded once at the end
    assert state.text_content() == "success"
    wait_until(lambda: "installed" in (output.text_content() or ""), 10, "the last line, in the same pane")
    assert (output.text_content() or "").count("installing") == 1  # appended, never repeated
    screenshot(page, "actionrun")

    apply(kubectl, action_run("web-break", namespace, "web", "break"))
    run_state(kubectl, namespace, "web-break", "Failed")
    run_page(page, console, namespace, "actionruns", "web-break")
    # an application-level task (no replica); a failure opens its output by itself
    output = page.locator('[data-test="output-boom@(application)"]')
    wait_until(lambda: "about to fail" in (output.text_content() or ""), 20, "the failing task's output")
    assert page.locator('[data-test="run-failed-task"]').text_content() == "boom"
    shown = output.text_content() or ""
    assert XSS in shown and SCRIPT in shown  # the markup as the task printed it, as text
    assert output.locator("img, script").count() == 0
    assert page.evaluate("window.__xss === undefined")


def test_a_graph_runs_timeline_dag_and_streamed_output_are_drawn(
        kubectl: Kubectl, environment: tuple[str, Path], console_page: OpenConsole,  # noqa: F811
        console: ConsoleProcess) -> None:
    namespace, _ = environment
    apply(kubectl, graph("r1-console", namespace, [
        shell("base", ["*"], "echo base on $(hostname)"),
        shell("db", ["controller"], "echo db; sleep 1", requires=["base"]),
        shell("talk", ["compute"], "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.5; done",
              requires=["base"], **{"crossDepends": [{"name": "db", "role": ["controller"]}]}),
    ], release="r1", type="console"))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "deploymentgraph/r1-console")
    page = console_page(console_user(kubectl, namespace))
    apply(kubectl, graph_run("console-run", namespace, {"type": "console"}))
    run_page(page, console, namespace, "graphruns", "console-run")
    talk = page.locator('[data-test="task-talk@cmp-1"]')
    talk.wait_for(timeout=30000)
    talk.click()  # opened while it runs (or before): the output streams in
    output = page.locator('[data-test="output-talk@cmp-1"]')
    wait_until(lambda: "line-6" in (output.text_content() or ""), 60, "talk's output to stream to its end")
    status = finished(kubectl, namespace, "console-run")
    assert status["state"] == "Succeeded", status
    text = output.text_content() or ""
    assert [f"line-{i}" for i in range(1, 7)] == [line for line in text.split() if line.startswith("line-")]
    wait_until(lambda: state_of(page) == "Succeeded", 20, "the page to show the run Succeeded")
    rows = page.locator('[data-test="timeline-row"]')
    assert {rows.nth(i).get_attribute("data-row") for i in range(rows.count())} >= {"cmp-1", "cmp-2", "ctl"}
    assert page.locator('[data-test="timeline-row"][data-row="ctl"] [data-test="timeline-bar"]').count() == 2
    dag = page.locator('[data-test="run-dag"]')
    dag.wait_for(timeout=10000)
    tasks = {dag.locator('[data-test="dag-node"]').nth(i).get_attribute("data-task")
             for i in range(dag.locator('[data-test="dag-node"]').count())}
    assert {"base", "db", "talk"} <= tasks
    assert dag.locator(".edge").count() >= 3  # base->db, base->talk, db->talk
    screenshot(page, "graphrun")
