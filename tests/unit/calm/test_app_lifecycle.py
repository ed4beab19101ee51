"""The App's create step and its cleanup (the delete action), against a fake API server."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from operators.calm.app import CREATE_RUNNING, KIND, create_failure, delete, delete_run_name
from operators.runtime.core.kinds import FINALIZER
from operators.runtime.core.pipeline import Observed, PermanentError, StepContext, TemporaryError, compose_status, run
from operators.runtime.kube.client import ApiError
from tests.unit.fakeapi import FakeApi

SNAPSHOT = {"name": "bp", "uid": "u-bp", "generation": 1, "spec": {}, "compiledState": None}


@dataclass
class Events:
    recorded: list[tuple[Observed, str, str, str]] = field(default_factory=list)

    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None:
        self.recorded.append((obj, type_, reason, message))


@dataclass
class FakeServices:
    kube: FakeApi
    events: Events = field(default_factory=Events)


RUNS = "/apis/stead.dev/v1alpha1/namespaces/ns/actionruns"
APPS = "/apis/stead.dev/v1alpha1/namespaces/ns/apps"


def app(status: dict[str, Any], generation: int = 1, **spec: Any) -> Observed:
    return Observed(kind="App", namespace="ns", name="shop", uid="u-shop", generation=generation, labels={},
                    spec={"blueprint": "bp", **spec}, status=status, deleting=True, finalizers=(FINALIZER,))


def ctx(obj: Observed, kube: FakeApi) -> StepContext:
    return StepContext(obj=obj, facts={}, services=FakeServices(kube))


def test_the_app_kind_holds_the_cleanup_finalizer() -> None:
    assert KIND.cleanup is delete and KIND.mutates
    assert delete_run_name("shop", 3) == "shop-delete-3"
    assert len(delete_run_name("x" * 253, 12)) == 253


def test_nothing_to_run_lets_the_app_go_at_once(kube: FakeApi) -> None:
    for obj in (app({}), app({"snapshot": SNAPSHOT, "state": "deleted"}),
                app({"snapshot": SNAPSHOT, "state": "error"}, softDelete=True)):
        assert asyncio.run(delete(ctx(obj, kube))) == {}
    assert kube.calls == []


def test_the_delete_run_is_started_once_then_followed_to_its_end(kube: FakeApi) -> None:
    obj = app({"snapshot": SNAPSHOT, "state": "running"}, generation=2)
    with pytest.raises(TemporaryError) as first:
        asyncio.run(delete(ctx(obj, kube)))
    assert first.value.reason == "DeleteRunning" and first.value.delay == 1.0
    body = kube.objects[f"{RUNS}/shop-delete-2"]
    assert body["spec"] == {"app": "shop", "action": "delete"}
    assert "ownerReferences" not in body["metadata"]  # the record outlives the app
    assert body["metadata"]["labels"]["stead.dev/app-uid"] == "u-shop"
    with pytest.raises(TemporaryError) as again:
        asyncio.run(delete(ctx(obj, kube)))
    assert again.value.message == first.value.message  # same status: no write
    assert [c for c in kube.calls if c[0] == "POST"] == [("POST", RUNS)]
    body["status"] = {"state": "Succeeded"}
    assert asyncio.run(delete(ctx(obj, kube))) == {}


def test_a_failed_delete_run_keeps_the_app_with_the_task_and_reason(kube: FakeApi) -> None:
    obj = app({"snapshot": SNAPSHOT, "state": "deleting"}, generation=2)
    kube.add(f"{RUNS}/shop-delete-2", {
        "metadata": {"labels": {"stead.dev/app-uid": "u-shop"}}, "spec": {"app": "shop", "action": "delete"},
        "status": {"state": "Failed", "failedTask": "S/drop@tier-0", "reason": "script exited with code 4"}})
    kube.add(f"{APPS}/shop", {"status": {"snapshot": SNAPSHOT, "state": "error", "phase": "Provisioned"}})
    with pytest.raises(PermanentError) as failed:
        asyncio.run(delete(ctx(obj, kube)))
    assert failed.value.reason == "DeleteFailed"
    assert failed.value.message.startswith("delete run shop-delete-2 failed: S/drop@tier-0: script exited with code 4")
    assert failed.value.facts["state"] == "error" and "phase" not in failed.value.facts


def test_a_run_holding_the_lock_is_waited_for_unless_it_is_gone(kube: FakeApi) -> None:
    lock = {"lockedBy": "greet-1", "since": "2999-01-01T00:00:00Z", "ttlSeconds": 3600}
    obj = app({"snapshot": SNAPSHOT, "state": "running", "lock": lock})
    kube.add(f"{RUNS}/greet-1", {"spec": {"app": "shop", "action": "greet"}})
    with pytest.raises(TemporaryError) as waiting:
        asyncio.run(delete(ctx(obj, kube)))
    assert waiting.value.reason == "WaitingForRun" and "greet-1" in waiting.value.message
    del kube.objects[f"{RUNS}/greet-1"]
    with pytest.raises(TemporaryError) as running:
        asyncio.run(delete(ctx(obj, kube)))
    assert running.value.reason == "DeleteRunning"


def test_a_leftover_delete_run_of_an_earlier_app_is_replaced(kube: FakeApi) -> None:
    kube.add(f"{RUNS}/shop-delete-1", {"metadata": {"labels": {"stead.dev/app-uid": "old"}},
                                       "spec": {"app": "shop", "action": "delete"}, "status": {"state": "Failed"}})
    with pytest.raises(TemporaryError):
        asyncio.run(delete(ctx(app({"snapshot": SNAPSHOT, "state": "running"}), kube)))
    assert ("DELETE", f"{RUNS}/shop-delete-1") in kube.calls
    kube.add(f"{RUNS}/shop-delete-1", {"metadata": {}, "spec": {"app": "shop", "action": "greet"}})
    with pytest.raises(PermanentError) as conflict:
        asyncio.run(delete(ctx(app({"snapshot": SNAPSHOT, "state": "running"}), kube)))
    assert conflict.value.reason == "DeleteRunConflict"


def test_a_terminating_namespace_lets_the_app_go_and_says_so_on_the_namespace(kube: FakeApi) -> None:
    """Issue 27: the skipped delete action was a log line only. The namespace takes no Event any more:
    a Warning Event on the Namespace (kept in `default`) says which App went without it."""
    kube.fail_with(ApiError(403, "unable to create new content in namespace ns because it is being terminated"),
                   "POST", RUNS)
    kube.add("/api/v1/namespaces/ns", {"metadata": {"name": "ns", "uid": "u-ns"}})
    step = ctx(app({"snapshot": SNAPSHOT, "state": "running"}), kube)
    assert asyncio.run(delete(step)) == {}
    ((about, type_, reason, message),) = step.services.events.recorded
    assert (about.kind, about.namespace, about.name, about.uid) == ("Namespace", "", "ns", "u-ns")
    assert (type_, reason) == ("Warning", "AppDeleteActionSkipped")
    assert message.startswith("app shop: its delete action was not run, as namespace ns is being deleted")
    kube.fail_with(ApiError(403, "forbidden by RBAC"), "POST", RUNS)
    with pytest.raises(TemporaryError):
        asyncio.run(delete(ctx(app({"snapshot": SNAPSHOT, "state": "running"}), kube)))


def test_create_waits_without_writing_after_the_first_write(kube: FakeApi) -> None:
    """The first pass writes the snapshot and lock; later passes compose the very same status: no PATCH."""
    status = {"snapshot": SNAPSHOT, "state": "provisioning", "lock": {"lockedBy": "shop-create"}}
    obj = Observed(kind="App", namespace="ns", name="shop", uid="u-shop", generation=1, labels={},
                   spec={"blueprint": "bp"}, status={})
    first = asyncio.run(run(KIND.pipeline, obj, "Launched", services=FakeServices(kube)))
    assert isinstance(first.error, TemporaryError) and first.error.delay == 0.1  # nothing posted before the write
    assert kube.calls == []
    written = compose_status(obj, first, "2026-01-01T00:00:00Z")
    obj = Observed(kind="App", namespace="ns", name="shop", uid="u-shop", generation=1, labels={},
                   spec={"blueprint": "bp"}, status={**written, **status})
    second = asyncio.run(run(KIND.pipeline, obj, "Launched", services=FakeServices(kube)))
    assert isinstance(second.error, TemporaryError) and second.error.reason == CREATE_RUNNING
    assert kube.objects[f"{RUNS}/shop-create"]["metadata"]["ownerReferences"][0]["uid"] == "u-shop"
    again = compose_status(obj, second, "2026-01-01T00:00:09Z")
    assert again == obj.status


CREATE_FAILURE = {"run": "shop-create", "action": "create", "task": "S/hello@tier-0",
                  "reason": "script exited with code 3", "at": "2026-01-01T00:00:05Z"}


def test_a_create_failure_recorded_by_the_run_is_named_until_an_action_succeeds() -> None:
    assert create_failure({"state": "error", "failure": CREATE_FAILURE}, "shop-create") == (
        "create run shop-create failed: S/hello@tier-0: script exited with code 3")
    # a later action failed instead (the App was created), or one succeeded since: not a create failure
    later = {**CREATE_FAILURE, "run": "fail-1", "action": "fail"}
    assert create_failure({"state": "error", "failure": later}, "shop-create") is None
    assert create_failure({"state": "running", "failure": None}, "shop-create") is None


def test_an_app_whose_create_run_recorded_its_failure_first_stalls_not_ready(kube: FakeApi) -> None:
    """The run writes state error and the failure into the App before the App's step sees the run end:
    the App is Stalled CreateFailed (Flux: Failed), not Provisioned and Ready."""
    obj = Observed(kind="App", namespace="ns", name="shop", uid="u-shop", generation=1, labels={},
                   spec={"blueprint": "bp"},
                   status={"snapshot": SNAPSHOT, "state": "error", "failure": CREATE_FAILURE})
    outcome = asyncio.run(run(KIND.pipeline, obj, "Launched", services=FakeServices(kube)))
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "CreateFailed"
    status = compose_status(obj, outcome, "2026-01-01T00:00:09Z")
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Stalled"]["status"]) == ("False", "True")
    assert conditions["Stalled"]["message"] == (
        "create run shop-create failed: S/hello@tier-0: script exited with code 3")
    assert status["state"] == "error" and status["failure"] == CREATE_FAILURE
    assert not [call for call in kube.calls if call[0] == "POST"]  # no second create run
