"""The operator's log on normal events: an admission refusal is the user's answer (they read it from kubectl),
and a namespace being deleted takes no Events; neither is an INFO or WARNING line of the operator's log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from operators.runtime.core.pipeline import Observed
from operators.runtime.engine.events import EventRecorder
from operators.runtime.kopfwiring import _RefusalsAreNotErrors
from operators.runtime.kube.client import ApiError
from operators.runtime.serving.metrics import Metrics


def test_a_webhook_refusal_is_a_debug_line_kept_only_under_verbose(caplog: pytest.LogCaptureFixture) -> None:
    kopf, objects = logging.getLogger("kopf"), logging.getLogger("kopf.objects")
    refusal = _RefusalsAreNotErrors()
    objects.addFilter(refusal)
    level = kopf.level
    try:
        with caplog.at_level(logging.DEBUG):
            kopf.setLevel(logging.WARNING)  # as `stead operator` sets it without -v
            objects.error("Webhook 'validate-apps' failed permanently: spec.blueprint: required")
            objects.error("Webhook 'mutate-apps' failed permanently: spec: bad")
            objects.error("Handler 'x' failed permanently: boom")  # not a refusal: stays an error
            assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
                ("ERROR", "Handler 'x' failed permanently: boom")]
            caplog.clear()
            kopf.setLevel(logging.NOTSET)  # -v: kept, as DEBUG
            objects.error("Webhook 'validate-apps' failed permanently: spec.blueprint: required")
            assert [r.levelname for r in caplog.records] == ["DEBUG"]
    finally:
        objects.removeFilter(refusal)
        kopf.setLevel(level)


class _Refusing:
    def __init__(self, error: ApiError) -> None:
        self.error = error

    async def request(self, *_: Any, **__: Any) -> Any:
        raise self.error


TERMINATING = ApiError(403, 'events "e1.1" is forbidden: unable to create new content in namespace demo because it '
                            "is being terminated")


@pytest.mark.parametrize(("error", "level"), [
    (TERMINATING, logging.DEBUG),
    (ApiError(404, 'namespaces "demo" not found'), logging.DEBUG),
    (ApiError(500, "etcd is down"), logging.WARNING),  # a real problem still says so
])
def test_an_event_a_deleted_namespace_refuses_is_not_a_warning(error: ApiError, level: int,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    async def post_one() -> None:
        recorder = EventRecorder(_Refusing(error), Metrics(), "r1")  # type: ignore[arg-type]
        task = asyncio.create_task(recorder.run())
        recorder.record(Observed("App", "demo", "a1", "u", 1, {}, {}, {}), "Normal", "Deleted", "gone")
        await recorder.drain()
        task.cancel()

    with caplog.at_level(logging.DEBUG, logger="operators.runtime.engine.events"):
        asyncio.run(post_one())
    assert [r.levelno for r in caplog.records if r.name == "operators.runtime.engine.events"] == [level]


def test_an_event_about_a_namespace_is_posted_in_default_as_a_core_object() -> None:
    """The Event that says an App's delete action was skipped (its namespace being deleted takes no Event)."""
    posted: list[tuple[str, dict[str, Any]]] = []

    class Kube:
        async def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
            posted.append((path, body))
            return body

    async def post_one() -> None:
        recorder = EventRecorder(Kube(), Metrics(), "r1")  # type: ignore[arg-type]
        task = asyncio.create_task(recorder.run())
        recorder.record(Observed("Namespace", "", "team-x", "u-ns", 0, {}, {}, {}), "Warning",
                        "AppDeleteActionSkipped", "app shop: ...")
        await recorder.drain()
        task.cancel()

    asyncio.run(post_one())
    ((path, body),) = posted
    assert path == "/api/v1/namespaces/default/events"
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Namespace", "name": "team-x", "namespace": "",
                                      "uid": "u-ns"}
