"""The HTTP/1.1 server of Stead's own APIs, over real loopback sockets (raw bytes, so that framing,
ordering and limits are what is checked)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvloop

from operators.runtime.certs import make_ca, make_leaf
from operators.runtime.httpserver import HttpServer, Request, Response

Reply = tuple[int, dict[str, str], bytes]


def parse_replies(data: bytes) -> list[Reply]:
    """Responses in `data`, in order (Content-Length framing; none on 1xx, 204, 304)."""
    replies: list[Reply] = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        length = 0 if status < 200 or status in (204, 304) else int(headers["content-length"])
        replies.append((status, headers, data[:length]))
        data = data[length:]
    return replies


async def echo(request: Request) -> Response:
    """Says back what it was asked."""
    seen = f"{request.method} {request.path} ?{request.query} {request.target} {len(request.body)}"
    return Response(200, seen.encode() + b"|" + request.body, "text/plain",
                    {"X-Seen-Header": request.headers.get("x-test", "")})


@contextlib.asynccontextmanager
async def serving(handler: Callable[[Request], Any] = echo, **settings: Any) -> AsyncIterator[HttpServer]:
    server = HttpServer(handler, **settings)
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.stop(grace=1.0)


async def exchange(port: int, *chunks: bytes, pause: float = 0.0) -> bytes:
    """Send `chunks` (with `pause` seconds between them), then read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
        if pause:
            await asyncio.sleep(pause)
    data = await asyncio.wait_for(reader.read(-1), 10)
    writer.close()
    return data


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


GET = b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n"
CLOSE = b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def test_keep_alive_answers_in_order_with_decoded_path_query_and_joined_headers() -> None:
    async def scenario() -> None:
        async with serving() as server:
            data = await exchange(
                server.port,
                b"GET /a%20b/c?x=1&y=%2F HTTP/1.1\r\nHost: t\r\nX-Test: one\r\nx-test: two\r\n\r\n",
                CLOSE)
        (status, headers, body), last = parse_replies(data)
        assert status == 200 and body == b"GET /a b/c ?x=1&y=%2F /a%20b/c?x=1&y=%2F 0|"
        assert headers["x-seen-header"] == "one, two" and headers["content-type"] == "text/plain"
        assert "connection" not in headers and "date" in headers
        assert last[0] == 200 and last[1]["connection"] == "close" and last[2].startswith(b"GET /last ")

    run(scenario)


def test_pipelined_requests_are_answered_in_order_even_when_the_first_is_slow() -> None:
    released = asyncio.Event()

    async def handler(request: Request) -> Response:
        if request.path == "/slow":
            await released.wait()
        return Response(200, request.path.encode())

    async def scenario() -> None:
        async with serving(handler) as server:
            asyncio.get_running_loop().call_later(0.2, released.set)
            data = await exchange(server.port, GET % b"/slow" + GET % b"/fast" + GET % b"/fast2" + CLOSE)
        assert [body for _, _, body in parse_replies(data)] == [b"/slow", b"/fast", b"/fast2", b"/last"]

    run(scenario)


def test_many_pipelined_requests_pause_reading_and_are_all_answered() -> None:
    async def scenario() -> None:
        async with serving(max_pipelined=4) as server:
            data = await exchange(server.port, b"".join(GET % f"/{i}".encode() for i in range(200)) + CLOSE)
        replies = parse_replies(data)
        assert len(replies) == 201
        assert [body.split()[1] for _, _, body in replies[:200]] == [f"/{i}".encode() for i in range(200)]

    run(scenario)


def test_bodies_by_length_and_chunked_and_the_limit_refused_before_reading() -> None:
    async def scenario() -> None:
        async with serving(max_body=10) as server:
            data = await exchange(
                server.port,
                b"PUT /l HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
                b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                b"PUT /big HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n")  # no body sent: refused at once
            chunked = await exchange(
                server.port,
                b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nabcdefgh\r\n8\r\nabcdefgh\r\n")
        (s1, _, b1), (s2, _, b2), (s3, h3, b3) = parse_replies(data)
        assert (s1, b1) == (200, b"PUT /l ? /l 5|hello") and (s2, b2) == (200, b"POST /c ? /c 5|abcde")
        assert s3 == 413 and h3["connection"] == "close" and b"exceeds 10 bytes" in b3
        assert parse_replies(chunked)[0][0] == 413

    run(scenario)


def test_expect_100_continue_gets_the_interim_answer_before_the_body() -> None:
    async def scenario() -> None:
        async with serving() as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"PUT /e HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
            assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"ok" + CLOSE)
            data = await asyncio.wait_for(reader.read(-1), 5)
            writer.close()
        assert parse_replies(data)[0][2] == b"PUT /e ? /e 2|ok"

    run(scenario)


@pytest.mark.parametrize(("request_bytes", "status", "says"), [
    (b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"x" * 300 + b"\r\n\r\n", 431, b"exceed 256 bytes"),
    (b"GET /" + b"x" * 300 + b" HTTP/1.1\r\n\r\n", 431, b"exceed 256 bytes"),
    (b"NOT HTTP AT ALL\r\n\r\n", 400, b"malformed request"),
    (b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400, b"malformed request"),
    (b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n", 400, b"malformed request"),
])
def test_refusals_are_answered_through_the_error_responder_and_close(request_bytes: bytes, status: int,
                                                                     says: bytes) -> None:
    def errors(code: int, message: str) -> Response:
        return Response(code, f"custom {code}: {message}".encode(), "text/plain")

    async def scenario() -> None:
        async with serving(errors=errors, max_head=256) as server:
            data = await exchange(server.port, request_bytes)
        ((got, headers, body),) = parse_replies(data)
        assert got == status and headers["connection"] == "close"
        assert body.startswith(b"custom %d: " % status) and says in body

    run(scenario)


def test_http_1_0_head_no_content_and_absolute_form() -> None:
    async def handler(request: Request) -> Response:
        if request.path == "/none":
            return Response(204)
        return Response(200, b"body of " + request.path.encode())

    async def scenario() -> None:
        async with serving(handler) as server:
            old = await exchange(server.port, b"GET /old HTTP/1.0\r\n\r\n")
            head = await exchange(server.port, b"HEAD /h HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            data = await exchange(server.port, b"DELETE /none HTTP/1.1\r\nHost: t\r\n\r\n",
                                  b"GET http://t/abs?q=1 HTTP/1.1\r\nHost: t\r\n\r\n", CLOSE)
        ((status, headers, body),) = parse_replies(old)
        assert (status, body, headers["connection"]) == (200, b"body of /old", "close")
        # HEAD: the length the body would have had, and no body
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
        assert b"\r\nContent-Length: %d\r\n" % len(b"body of /h") in head
        none, absolute, _ = parse_replies(data)
        assert none[0] == 204 and "content-length" not in none[1]
        assert absolute[2] == b"body of /abs"

    run(scenario)


def test_a_failing_handler_is_a_500_that_says_nothing_and_the_connection_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    async def handler(request: Request) -> Response:
        if request.path == "/boom":
            raise RuntimeError("secret detail")
        return Response(200, b"fine")

    async def scenario() -> None:
        async with serving(handler) as server:
            data = await exchange(server.port, GET % b"/boom" + CLOSE)
        (status, _, body), (after, _, _) = parse_replies(data)
        assert status == 500 and b"secret" not in body and after == 200

    with caplog.at_level(logging.ERROR, "operators.runtime.httpserver"):
        run(scenario)
    assert "GET /boom failed" in caplog.text


def test_a_slow_request_is_408_and_an_idle_connection_is_closed() -> None:
    async def scenario() -> None:
        async with serving(request_timeout=0.3, keepalive_timeout=0.3) as server:
            slow = await exchange(server.port, b"GET / HTTP/1.1\r\nHost:", pause=0.0)
            loop = asyncio.get_running_loop()
            began = loop.time()
            idle = await exchange(server.port, GET % b"/one")
            waited = loop.time() - began
        assert parse_replies(slow)[0][0] == 408
        assert [status for status, _, _ in parse_replies(idle)] == [200] and waited >= 0.3

    run(scenario)


def test_stop_closes_idle_connections_lets_a_running_request_finish_and_refuses_new_ones() -> None:
    started, released = asyncio.Event(), asyncio.Event()

    async def handler(request: Request) -> Response:
        if request.path == "/busy":
            started.set()
            await released.wait()
        return Response(200, b"done " + request.path.encode())

    async def scenario() -> None:
        server = HttpServer(handler)
        await server.start("127.0.0.1", 0)
        port = server.port
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
        busy_writer.write(GET % b"/busy")
        await asyncio.wait_for(started.wait(), 5)
        stopping = asyncio.ensure_future(server.stop(grace=5))
        assert await asyncio.wait_for(idle_reader.read(-1), 5) == b""  # closed without an answer
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        released.set()
        ((status, headers, body),) = parse_replies(await asyncio.wait_for(busy_reader.read(-1), 5))
        assert (status, body, headers["connection"]) == (200, b"done /busy", "close")
        await asyncio.wait_for(stopping, 5)
        idle_writer.close()
        busy_writer.close()

    run(scenario)


def test_stop_aborts_a_request_still_running_after_the_grace_period() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(request: Request) -> Response:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    async def scenario() -> None:
        server = HttpServer(handler)
        await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(GET % b"/forever")
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(server.stop(grace=0.2), 5)
        await asyncio.wait_for(cancelled.wait(), 5)
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(reader.read(-1), 5) == b""
        writer.close()

    run(scenario)


def test_tls_on_uvloop(tmp_path: Path) -> None:
    ca = make_ca("test-ca")
    leaf = make_leaf(ca, "server", hosts=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_context = ssl.create_default_context(cadata=ca.cert_pem.decode())

    async def scenario() -> None:
        server = HttpServer(echo)
        await server.start("127.0.0.1", 0, server_context)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=client_context)
        writer.write(GET % b"/secure" + CLOSE)
        data = await asyncio.wait_for(reader.read(-1), 5)
        writer.close()
        await server.stop()
        assert [body.split()[1] for _, _, body in parse_replies(data)] == [b"/secure", b"/last"]

    uvloop.run(scenario())
