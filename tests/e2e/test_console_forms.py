"""The console's forms in a real browser, against the test run's API server and operator, as a user who may not
read CRDs: an App launched from the form generated from its kind's schema, its create run followed to Succeeded;
a refusal that came from the API server itself (its schema's own words) shown next to the field it names, with
nothing created; the YAML and the kubectl and stead commands beside the form, following what is typed; the App edited
from its form; an action called from its form (an ActionRun of the App)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Kubectl
from tests.e2e.console import ConsoleProcess, OpenConsole, console_user, screenshot
from tests.e2e.test_apps import apply, blueprint, run_state, small_spec
from tests.polling import wait_until

pytestmark = pytest.mark.e2e


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

    # Its create run, followed on its page until it succeeds.
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
