"""The console's lifecycle view in a real browser (issue 29): a ServiceInstance walked up -> update -> rollback
in its state diagram, as a user of the namespace with `edit` rights, the lit state checked at each step and
the transfers not allowed now checked absent.

The instance follows the built-in `simple` lifecycle and deploys the greeter Blueprint of
tests/e2e/test_services.py (its `update` action fails for who=boom): the update the user sends from the page
fails, the page offers the rollback (and no update), the user asks for it and the instance is up again. The
namespace is a `t-test-app-*` one: the session's operator runs its scripts on this host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Kubectl, OperatorProcess
from tests.e2e.console import ConsoleProcess, OpenConsole, console_user, screenshot
from tests.e2e.test_apps import apply
from tests.e2e.test_services import catalog, in_state, instance
from tests.polling import wait_until

pytestmark = pytest.mark.e2e

STATE_DEADLINE = 90_000
"""Milliseconds a lit state may take to follow the instance (an App's deployment runs in between)."""


def lit(page: Any) -> str:
    """The data-test of the lit state (the current one): exactly one is lit."""
    states = page.locator(".lc-state.lit")
    assert states.count() == 1
    return str(states.get_attribute("data-test"))


def offered(page: Any) -> list[str]:
    buttons = page.locator('[data-test="actions"] button[data-test^="action-"]')
    return [str(buttons.nth(i).get_attribute("data-test")) for i in range(buttons.count())]


def test_app_service_walked_up_update_rollback_in_the_diagram(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str, console: ConsoleProcess,
        console_page: OpenConsole, tmp_path: Path) -> None:
    catalog(kubectl, namespace)
    apply(kubectl, instance("db-1", namespace, who="one"))
    in_state(kubectl, namespace, "db-1", "up")
    page = console_page(console_user(kubectl, namespace), f"#/ns/{namespace}/serviceinstances/db-1")

    # up: lit, reached at version 4; an update and a delete are offered, no state request leaves up
    page.wait_for_selector('.lc-state.lit[data-test="state-up"]', timeout=STATE_DEADLINE)
    assert page.locator('[data-test="current-state"]').text_content() == "up"
    assert offered(page) == ["action-update", "action-delete"]
    assert page.locator('[data-test="state-up"] .lc-versions').text_content() == "v4"

    # update who=boom from the page: validated, promoted, its deployment fails -> update_failed
    page.click('[data-test="action-update"]')
    page.fill('[data-test="field-who"]', "boom")
    page.click('[data-test="update-submit"]')
    page.wait_for_selector('.lc-state.lit[data-test="state-update_failed"]', timeout=STATE_DEADLINE)
    assert lit(page) == "state-update_failed"
    assert offered(page) == ["action-set-state-rollback", "action-delete"]  # no update from here
    who = page.locator('[data-test="diff-who"] td')
    assert [who.nth(i).text_content() for i in range(3)] == ["\u2014", "boom", "one"]  # no candidate set
    assert page.locator('[data-test="edge-update_inprogress-update_failed"]').get_attribute("class") == (
        "lc-edge error taken")
    assert page.locator('[data-test="step-v8"]').count() == 1

    # set-state rollback from the page: the previous values are deployed again -> up at version 10
    page.click('[data-test="action-set-state-rollback"]')
    page.wait_for_selector('.lc-state.lit[data-test="state-up"]', timeout=STATE_DEADLINE)
    assert lit(page) == "state-up"
    assert page.locator('[data-test="state-up"] .lc-versions').text_content() == "v4 v10"
    assert [who.nth(i).text_content() for i in range(3)] == ["boom", "one", "\u2014"]
    assert offered(page) == ["action-update", "action-delete"]
    status = in_state(kubectl, namespace, "db-1", "up", version_above=9)
    assert status["activeAttributes"]["who"] == "one" and status["version"] == 10
    # the transfers that ran an action are the App's runs, each a link to its run view: the failed update's too
    app = status["app"]
    wait_until(lambda: page.locator('[data-test="run-transfers"] a').count() >= 3, 30, "the transfer runs listed")
    runs = [page.locator('[data-test="run-transfers"] a').nth(i).text_content()
            for i in range(page.locator('[data-test="run-transfers"] a').count())]
    assert all(run.startswith(app) for run in runs) and f"{app}-create" in runs
    screenshot(page, "serviceinstance", tmp_path)
