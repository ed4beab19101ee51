"""The stream's topics, checked before anything is asked of the API server, and a stream's ending."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from operators.console.stream import object_topic, parse_topics, run_topic, serve_stream
from operators.console.web import ConsoleCall, ConsoleError, TopicSource
from operators.runtime import ApiError


async def _nothing(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                   ) -> AsyncIterator[tuple[str, Any]]:
    if False:
        yield "", None


SOURCES: dict[str, TopicSource] = {"object": _nothing}


@pytest.mark.parametrize(("given", "named"), [
    (None, "missing"), ("{", "not JSON"), ("[]", "non-empty"), ('["x"]', "topics[0]: must be an object"),
    ('[{"id": "a b", "kind": "object"}]', "topics[0].id"), ('[{"id": "a", "kind": "secrets"}]', "topics[0].kind"),
    ('[{"id": "a", "kind": "object", "position": 5}]', "topics[0].position"),
    ('[{"id": "a", "kind": "object"}, {"id": "a", "kind": "object"}]', "unique"),
    (json.dumps([{"id": f"t{i}", "kind": "object"} for i in range(33)]), "at most 32"),
])
def test_bad_topics_are_refused_naming_what_is_wrong(given: str | None, named: str) -> None:
    with pytest.raises(ConsoleError) as refused:
        parse_topics(given, SOURCES, 32)
    assert refused.value.status == 400 and named in refused.value.message


def test_a_topics_parameters_and_position_are_kept() -> None:
    [topic] = parse_topics('[{"id": "t1", "kind": "object", "name": "x", "position": "42"}]', SOURCES, 32)
    assert (topic.id, topic.kind, dict(topic.params), topic.position) == ("t1", "object", {"name": "x"}, "42")


def _call() -> ConsoleCall:
    return ConsoleCall(kube=None, stead=None, user="u")  # type: ignore[arg-type]


def test_a_topic_restarts_from_its_last_position_after_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str | None] = []

    async def flaky(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                    ) -> AsyncIterator[tuple[str, Any]]:
        asked.append(position)
        if len(asked) == 1:
            yield "7", {"n": 1}
            raise OSError("the API server went away")
        yield "8", {"n": 2}

    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    monkeypatch.setattr("operators.console.stream.RETRY_FIRST", 0.0)
    [topic] = parse_topics('[{"id": "t", "kind": "object"}]', {"object": flaky}, 4)
    asyncio.run(run_topic(_call(), topic, flaky, send))
    assert asked == [None, "7"]
    events = [chunk.decode().split("\n")[0] for chunk in sent]
    assert events == ["event: data", "event: retry", "event: data", "event: end"]


def test_a_refused_token_ends_the_stream_as_unauthorized() -> None:
    async def refused(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                      ) -> AsyncIterator[tuple[str, Any]]:
        raise ApiError(401, "Unauthorized")
        yield "", None

    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    async def good() -> bool:
        return True

    topics = parse_topics('[{"id": "t", "kind": "object"}]', {"object": refused}, 4)
    why = asyncio.run(serve_stream(_call(), topics, {"object": refused}, send, good, 60.0, 3600.0))
    assert why == "unauthorized" and sent[-1].startswith(b"event: unauthorized")


async def _forever(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                   ) -> AsyncIterator[tuple[str, Any]]:
    await asyncio.Event().wait()
    yield "", None


def test_a_stream_ends_when_its_session_does() -> None:
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    async def good() -> bool:
        return True

    topics = parse_topics('[{"id": "t", "kind": "object"}]', {"object": _forever}, 4)
    why = asyncio.run(serve_stream(_call(), topics, {"object": _forever}, send, good, 60.0, 0.01))
    assert why == "expired" and sent[-1].startswith(b"event: unauthorized")


def test_a_stream_whose_topics_all_ended_closes_and_says_so() -> None:
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    async def good() -> bool:
        return True

    topics = parse_topics('[{"id": "t", "kind": "object"}]', SOURCES, 4)
    why = asyncio.run(serve_stream(_call(), topics, SOURCES, send, good, 60.0, 3600.0))
    assert why == "ended" and sent[-2].startswith(b"event: end") and sent[-1].startswith(b"event: close")


class _Kube:
    """The two calls the object topic makes of the API server: a GET (404: not created yet), a LIST by name, and a
    watch that sees the object created."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, params: Mapping[str, str] | None = None) -> Any:
        self.asked.append((method, path, params))
        if path.endswith("/lab"):
            raise ApiError(404, 'environments.stead.io "lab" not found')
        return {"metadata": {"resourceVersion": "5"}, "items": []}

    async def lines(self, path: str, query: Mapping[str, str], seconds: float) -> AsyncIterator[str]:
        self.asked.append(("WATCH", path, dict(query)))
        yield json.dumps({"type": "ADDED", "object": {"metadata": {"name": "lab", "resourceVersion": "6"}}})


def test_the_object_topic_follows_a_name_until_its_object_is_created() -> None:
    kube = _Kube()
    source = object_topic(frozenset({"environments"}), frozenset())
    call = ConsoleCall(kube=kube, stead=None, user="u")  # type: ignore[arg-type]

    async def first_two() -> list[tuple[str, Any]]:
        got = []
        async for item in source(call, {"plural": "environments", "namespace": "ns", "name": "lab"}, None):
            got.append(item)
            if len(got) == 2:
                break
        return got

    absent, created = asyncio.run(first_two())
    assert absent == ("5", {"absent": True})
    assert created == ("6", {"metadata": {"name": "lab", "resourceVersion": "6"}})
    watched = kube.asked[-1]
    assert watched[0] == "WATCH" and watched[2]["resourceVersion"] == "5"
    assert watched[2]["fieldSelector"] == "metadata.name=lab"
