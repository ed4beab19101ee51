"""One stream per page: Server-Sent Events multiplexing every topic the page follows.

Browsers give an origin six HTTP/1.1 connections; a page that held one stream per object would starve its
own requests, and seven tabs would starve each other. So a page (in fact every tab of the origin: the
browser side keeps one stream in a SharedWorker, `static/js/streamworker.js`) asks for ONE stream naming
all its topics: `GET /console/api/stream?topics=[{"id", "kind", ...params, "position"}]`. Each topic is
served by a `TopicSource` (`operators.console.web`) as the user; every event carries its topic and position
(a resourceVersion, a byte offset), so a reconnect resumes each topic where the page left it.

What a misbehaving or stale client cannot do:
- hold more than `max_streams_per_session` streams of one session, or name more than `max_topics` topics;
- keep streaming after its token stopped being good: the token is asked about every
  `session_check_seconds` (a SelfSubjectReview) and at the session's expiry the stream ends with an
  `unauthorized` event, which the page takes as "sign in again", not "reconnect";
- be cut by a proxy for idleness: a comment line goes out every `HEARTBEAT` seconds.
A topic whose source fails for a reason other than the user's rights (the API server away) is restarted
from its last position after a growing pause; a 403 or 404, or parameters it refuses, end that topic with an
`error` event. A stream whose every topic has ended closes with a `close` event, which tells the page not to
reconnect for the same topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from operators.console.web import ConsoleCall, ConsoleError, TopicSource
from operators.runtime import ApiError, core_path, custom_path, object_name_ok

log = logging.getLogger(__name__)

HEARTBEAT = 15.0
WATCH_SECONDS = 240
"""How long one WATCH lasts before it is asked again (the API server's `timeoutSeconds`)."""
RETRY_FIRST, RETRY_MAX = 1.0, 30.0
TOPIC_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True)
class Topic:
    id: str
    kind: str
    params: Mapping[str, Any]
    position: str | None


def parse_topics(text: str | None, sources: Mapping[str, TopicSource], max_topics: int) -> list[Topic]:
    """The topics a stream request names, checked (400 naming what is wrong)."""
    if not text:
        raise ConsoleError(400, "query parameter topics: missing (a JSON list of {id, kind, ...})")
    try:
        given = json.loads(text)
    except ValueError:
        raise ConsoleError(400, "query parameter topics: not JSON") from None
    if not isinstance(given, list) or not given:
        raise ConsoleError(400, "query parameter topics: must be a non-empty list")
    if len(given) > max_topics:
        raise ConsoleError(400, f"query parameter topics: {len(given)} topics, at most {max_topics} per stream")
    topics: list[Topic] = []
    for index, item in enumerate(given):
        where = f"topics[{index}]"
        if not isinstance(item, dict):
            raise ConsoleError(400, f"{where}: must be an object")
        topic_id, kind, position = item.get("id"), item.get("kind"), item.get("position")
        if not isinstance(topic_id, str) or not TOPIC_ID.match(topic_id):
            raise ConsoleError(400, f"{where}.id: 1-64 letters, digits and _.:-")
        if kind not in sources:
            raise ConsoleError(400, f"{where}.kind: {str(kind)[:40]!r} is not one of {', '.join(sorted(sources))}")
        if position is not None and (not isinstance(position, str) or len(position) > 64):
            raise ConsoleError(400, f"{where}.position: a string of at most 64 characters, or null")
        params = {key: value for key, value in item.items() if key not in ("id", "kind", "position")}
        topics.append(Topic(topic_id, str(kind), params, position))
    if len({topic.id for topic in topics}) != len(topics):
        raise ConsoleError(400, "topics: ids must be unique")
    return topics


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


Send = Callable[[bytes], Awaitable[None]]


class Unauthorized(Exception):
    """The API server no longer takes the session's token."""


async def run_topic(call: ConsoleCall, topic: Topic, source: TopicSource, send: Send) -> None:
    """Serve one topic until it ends (an `end` or `error` event) or the stream closes; restart it from its last
    position, after a growing pause, when it fails for a reason other than the user's rights."""
    position, pause = topic.position, RETRY_FIRST
    while True:
        try:
            async for at, data in source(call, topic.params, position):
                position = at
                await send(sse("data", {"topic": topic.id, "position": position, "data": data}))
                pause = RETRY_FIRST
            await send(sse("end", {"topic": topic.id, "position": position}))
            return
        except ApiError as error:
            if error.status == 401:
                raise Unauthorized() from None
            if error.status in (403, 404, 400, 422):
                await send(sse("error", {"topic": topic.id, "status": error.status, "message": error.message}))
                return
            reason = f"{error.status}: {error.message}"
        except ConsoleError as error:
            await send(sse("error", {"topic": topic.id, "status": error.status, "message": error.message}))
            return
        except (OSError, TimeoutError) as error:  # ApiUnreachable is an OSError too
            reason = str(error) or type(error).__name__
        await send(sse("retry", {"topic": topic.id, "position": position, "in": pause, "reason": reason[:300]}))
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY_MAX)


async def serve_stream(call: ConsoleCall, topics: list[Topic], sources: Mapping[str, TopicSource], send: Send,
                       still_good: Callable[[], Awaitable[bool]], check_every: float, expires_in: float) -> str:
    """Serve `topics` until the client goes, the session ends or its token is refused; returns why it ended
    ("unauthorized", "expired")."""
    lock = asyncio.Lock()

    async def locked(data: bytes) -> None:
        async with lock:  # one event at a time on the wire
            await send(data)

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT)
            await locked(b": ping\n\n")

    async def checks() -> None:
        while True:
            await asyncio.sleep(check_every)
            if not await still_good():
                raise Unauthorized()

    await locked(sse("open", {"topics": [topic.id for topic in topics]}))
    tasks = [asyncio.ensure_future(run_topic(call, topic, sources[topic.kind], locked)) for topic in topics]
    watchers = [asyncio.ensure_future(heartbeat()), asyncio.ensure_future(checks())]
    expiry = asyncio.ensure_future(asyncio.sleep(min(max(expires_in, 0.0), 1e9)))
    everything = [*tasks, *watchers, expiry]
    try:
        pending = set(everything)
        while True:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is expiry:
                    await locked(sse("unauthorized", {"reason": "the session expired: sign in again"}))
                    return "expired"
                error = task.exception()
                if isinstance(error, Unauthorized):
                    await locked(sse("unauthorized", {"reason": "the API server no longer accepts this "
                                                                "session's token: sign in again"}))
                    return "unauthorized"
                if error is not None:
                    raise error
            if all(task.done() for task in tasks):  # every topic ended or was refused: nothing left to follow
                await locked(sse("close", {"reason": "every topic of this stream has ended"}))
                return "ended"
    finally:
        for task in everything:
            task.cancel()
        for task in everything:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


# --- the built-in topics: an object, a kind's objects in a namespace, an object's Events ------------------


def _name(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not object_name_ok(value):
        raise ConsoleError(400, f"topic parameter {key}: {str(value)[:64]!r} is not a Kubernetes name")
    return value


def _plural(params: Mapping[str, Any], plurals: frozenset[str]) -> str:
    plural = params.get("plural")
    if plural not in plurals:
        raise ConsoleError(400, f"topic parameter plural: {str(plural)[:40]!r} is not one of Stead's kinds")
    return str(plural)


async def watch(call: ConsoleCall, path: str, params: dict[str, str], since: str
                ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Watch events from `since` on, as the user, for as long as the API server keeps answering; (rv, event)."""
    while True:
        query = {**params, "watch": "1", "resourceVersion": since, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(WATCH_SECONDS)}
        async for line in call.kube.lines(path, query, WATCH_SECONDS + 30):
            event = json.loads(line)
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                raise ApiError(int(obj.get("code") or 500), str(obj.get("message") or "watch error"))
            since = str((obj.get("metadata") or {}).get("resourceVersion") or since)
            if event.get("type") != "BOOKMARK":
                yield since, event


def object_topic(plurals: frozenset[str], cluster_scoped: frozenset[str]
                 ) -> TopicSource:
    async def source(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                     ) -> AsyncIterator[tuple[str, Any]]:
        plural, name = _plural(params, plurals), _name(params, "name")
        namespace = None if plural in cluster_scoped else _name(params, "namespace")
        collection = custom_path(plural, namespace)
        by_name = {"fieldSelector": f"metadata.name={name}"}

        async def current() -> tuple[str, Any]:
            """The object, or {"absent": True} at the collection's version when it does not exist (yet): a page
            opened on a name a form has just sent follows it until the operator or the user creates it."""
            try:
                obj = await call.kube.request("GET", custom_path(plural, namespace, name))
                return str(obj["metadata"]["resourceVersion"]), obj
            except ApiError as error:
                if error.status != 404:
                    raise
            listed = await call.kube.request("GET", collection, params=by_name)
            return str(listed["metadata"]["resourceVersion"]), {"absent": True}

        if position is None:
            position, first = await current()
            yield position, first
        while True:
            try:
                async for at, event in watch(call, collection, by_name, position):
                    position = at
                    yield position, (event["object"] if event["type"] != "DELETED" else {"deleted": True})
            except ApiError as error:
                if error.status != 410:
                    raise
                position, first = await current()  # too old: start again
                yield position, first
    return source


async def _listed(call: ConsoleCall, path: str, params: dict[str, str]) -> tuple[str, Any]:
    listed = await call.kube.request("GET", path, params=params or None)
    return str(listed["metadata"]["resourceVersion"]), {"type": "LIST", "items": listed.get("items") or []}


def _collection_topic(path_of: Callable[[Mapping[str, Any]], tuple[str, dict[str, str]]]) -> TopicSource:
    async def source(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                     ) -> AsyncIterator[tuple[str, Any]]:
        path, query = path_of(params)
        if position is None:
            position, data = await _listed(call, path, query)
            yield position, data
        while True:
            try:
                async for at, event in watch(call, path, query, position):
                    position = at
                    yield position, {"type": event["type"], "object": event["object"]}
            except ApiError as error:
                if error.status != 410:
                    raise
                position, data = await _listed(call, path, query)
                yield position, data
    return source


def list_topic(plurals: frozenset[str]) -> TopicSource:
    """The objects of one of Stead's kinds in a namespace: a LIST, then its changes."""
    return _collection_topic(lambda params: (custom_path(_plural(params, plurals), _name(params, "namespace")), {}))


UID = re.compile(r"^[0-9a-f-]{36}$")


def _events_path(params: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    uid = params.get("uid")
    if not isinstance(uid, str) or not UID.match(uid):
        raise ConsoleError(400, "topic parameter uid: an object's metadata.uid")
    return core_path("events", _name(params, "namespace")), {"fieldSelector": f"involvedObject.uid={uid}"}


events_topic: TopicSource = _collection_topic(_events_path)
"""An object's Events (by its uid): a LIST, then new and changed ones."""
