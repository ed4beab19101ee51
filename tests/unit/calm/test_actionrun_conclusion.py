"""A concluded run is not concluded twice: the outcome on disk wins over a stale object body; where a run
leaves its App; the phase of a run that failed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from operators.calm.actionrun import (
    KIND,
    ActionRunSpec,
    _finished_again,
    _release,
    app_state_fields,
    deleting_refusal,
    end_time,
    read_conclusion,
    state_after_success,
    state_during,
    write_conclusion,
)
from operators.runtime.core.pipeline import Observed, PermanentError, StepContext, compose_status, run
from operators.runtime.kube.api import ApiError, custom_path
from pipelines.control import run_paths
from tests.unit.fakeapi import FakeApi


def test_the_conclusion_is_kept_on_disk_and_repeated_as_is(tmp_path: Path) -> None:
    paths = run_paths(tmp_path, "uid-1")
    assert read_conclusion(paths) is None
    result = {"state": "Failed", "failedTask": "boom", "reason": "the app's lock expired after 3s"}
    write_conclusion(paths, result)
    assert read_conclusion(paths) == result
    obj = Observed(kind="ActionRun", namespace="ns", name="r", uid="uid-1", generation=1, labels={}, spec={},
                   status={"state": "Running"})
    with pytest.raises(PermanentError) as again:
        _finished_again(StepContext(obj=obj, facts={}), {"state": "Running", **result})
    assert again.value.reason == "RunFailed" and again.value.message == "boom: the app's lock expired after 3s"
    assert _finished_again(StepContext(obj=obj, facts={}), {"state": "Succeeded"}) == {"state": "Succeeded"}


def test_only_the_delete_run_may_start_on_an_app_being_deleted() -> None:
    live = {"metadata": {"name": "shop", "generation": 1}}
    deleting = {"metadata": {"name": "shop", "generation": 2, "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert deleting_refusal(live, "greet-1", "greet") is None
    assert deleting_refusal(deleting, "shop-delete-2", "delete") is None
    assert deleting_refusal(deleting, "greet-1", "greet") == "app shop is being deleted: only its delete run may start"
    assert deleting_refusal(deleting, "shop-delete-1", "delete") is not None


def test_the_end_time_is_the_runners_not_when_the_operator_noticed() -> None:
    assert end_time({"finishedAt": "2026-11-24T22:20:54.318Z"}, {}) == "2026-11-24T22:20:54Z"
    assert end_time({}, {"finishedAt": "2026-11-24T23:20:54.000+01:00"}) == "2026-11-24T22:20:54Z"
    assert end_time({}, {}).endswith("Z")  # a run that never started: now


def test_a_run_that_failed_at_init_shows_phase_failed(kube: FakeApi) -> None:
    """A run whose app does not exist ends at once: PHASE `Failed` (it showed `Running` or the phase it
    stopped in, as if the run went on)."""
    obj = Observed(kind="ActionRun", namespace="ns", name="r", uid="uid-1", generation=1, labels={},
                   spec={"app": "nope", "action": "greet"}, status={})
    outcome = asyncio.run(run(KIND.pipeline, obj, "Init", services=SimpleNamespace(kube=kube)))
    status = compose_status(obj, outcome, "2026-01-01T00:00:00Z")
    assert (status["phase"], status["state"]) == ("Failed", "Failed")
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Ready", "False", "AppNotFound"), ("Reconciling", "False", "AppNotFound"), ("Stalled", "True", "AppNotFound")]


def _after(*actions: tuple[str, bool], start: str = "running") -> str:
    """The App's state after these actions, each succeeding or failing, as the runs write it: the lock
    sets the state an action runs in, and its run finds the App so and records where it ended."""
    status: dict[str, Any] = {"state": start, "restingState": start}
    for action, succeeded in actions:
        status["state"] = state_during(action, status)
        status.update(app_state_fields(action, status, succeeded))
    return str(status["state"])


def test_an_action_that_succeeds_after_a_failed_one_leads_where_it_leads_and_error_is_gone() -> None:
    """An App whose update failed kept `error` after later updates succeeded. A success leads where its
    action leads (stop: stopped; an update: where the app rests, which only a successful start, stop...
    changes), whatever failed before."""
    update, start, stop, restart = "update", "start", "stop", "restart"
    assert _after((update, False)) == "error"
    assert _after((update, False), (update, True)) == "running"
    assert _after((update, False), (update, False), (update, True)) == "running"
    assert _after((update, False), (stop, True)) == "stopped"
    assert _after((update, True), start="stopped") == "stopped"  # an update neither starts nor stops
    assert _after((update, False), (update, True), start="stopped") == "stopped"
    # a start that failed did not start the app: a later update leaves it stopped, not running
    assert _after((start, False), start="stopped") == "error"
    assert _after((start, False), (update, True), start="stopped") == "stopped"
    assert _after((start, False), (stop, True), start="stopped") == "stopped"
    assert _after((start, False), (start, True), start="stopped") == "running"
    assert _after((stop, False), (update, True)) == "running"
    assert _after((restart, False), ("scale-report", True)) == "running"
    assert _after((stop, True), (restart, False), (restart, True)) == "running"
    # an App from before restingState: where its state says it rests, else running
    assert state_after_success(update, {"state": "stopped"}) == "stopped"
    assert state_after_success(update, {"state": "error"}) == "running"


def test_a_run_whose_app_cannot_be_unlocked_is_tried_again_not_concluded_with_the_app_locked(
        kube: FakeApi) -> None:
    """Found by bench/soak.py: a replica whose claim lapsed mid-step got 403 from the shard guard on the
    App's unlock, which was swallowed; the conclusion was written, the retry (on the project's next holder)
    took it from disk and never unlocked: the App stayed `lockedBy` a finished run and its ServiceInstance
    waited for it for ever. Now only a 404 (the app gone) is passed over; anything else fails the step,
    which is tried again before the conclusion is written."""
    app_path = custom_path("apps", "ns", "shop")
    kube.add(app_path, {"spec": {}, "status": {"lock": {"lockedBy": "shop-create"}, "currentRun": "shop-create"}})
    obj = Observed(kind="ActionRun", namespace="ns", name="shop-create", uid="uid-1", generation=1, labels={},
                   spec={"app": "shop", "action": "create"}, status={"state": "Running"})
    ctx = StepContext(obj=obj, facts={}, services=SimpleNamespace(kube=kube))  # type: ignore[arg-type]
    spec = ActionRunSpec(app="shop", action="create")
    kube.fail_with(ApiError(403, "not written: project ns is not this replica's"), "PATCH", "/apps/shop/status")
    with pytest.raises(ApiError):
        asyncio.run(_release(ctx, spec, {"lastRun": "shop-create"}))
    assert kube.objects[app_path]["status"]["lock"] == {"lockedBy": "shop-create"}
    kube.fail_with(None, "PATCH", "/apps/shop/status")
    asyncio.run(_release(ctx, spec, {"lastRun": "shop-create"}))  # the retry unlocks it
    status = kube.objects[app_path]["status"]
    assert "lock" not in status and "currentRun" not in status and status["lastRun"] == "shop-create"
    kube.fail_with(ApiError(404, "gone"), "PATCH", "/apps/shop/status")
    asyncio.run(_release(ctx, spec, {}))  # an app deleted meanwhile: nothing to unlock
