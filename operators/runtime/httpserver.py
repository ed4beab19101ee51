"""A small HTTP/1.1 server for the APIs Stead serves itself, on asyncio with llhttp's parser.

Why not aiohttp's server: the configuration API answers most requests from memory, and there
aiohttp's request machinery (request and response objects, multidicts, routing, middlewares)
cost about three quarters of the CPU time of a request. Over TLS on uvloop, a bare aiohttp
handler returning a constant cost ~47 us of CPU per request, the same answer from this server
~15 us. The parsing, where the care of an HTTP server lies, is llhttp's (Node.js's parser, through
`httptools`): it rejects malformed requests, and a Content-Length beside a Transfer-Encoding.
What is left here is framing, limits and the order of answers:

- HTTP/1.1 keep-alive and pipelining (requests are handled one at a time per connection and
  answered in order), HTTP/1.0, `Connection: close`;
- request bodies by Content-Length or chunked, up to `max_body` bytes (413 beyond it, before
  the body is read when the length is announced), and `Expect: 100-continue`;
- the request line and headers up to `max_head` bytes (431 beyond); a request must arrive whole
  within `request_timeout` seconds of its first byte (408), and an idle connection is closed
  after `keepalive_timeout` seconds;
- a HEAD request is handled as the handler says and answered without the body;
- a handler's exception is logged and answered 500, saying nothing more to the client;
- `stop()` stops listening, closes idle connections at once and lets requests being handled
  finish, up to a grace period.

Each request runs in a task of its own, so a handler may use anything asyncio offers (timeouts
need a current task). Errors the server answers itself (400, 408, 413, 431, 500) get their body
from `errors`, so an API can keep one error format.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import http
import logging
import ssl
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httptools

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Request:
    """One request as the handler sees it. Header names are lower case; a repeated header's
    values are joined with ", " (RFC 9110, 5.3)."""

    method: str
    target: str  # path and query as sent (percent-encoded)
    path: str  # percent-decoded
    query: str  # as sent, without the "?"
    headers: Mapping[str, str]
    body: bytes = b""
    peer: str = ""  # the client's address (rate limits are per peer)


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] | None = None


Handler = Callable[[Request], Coroutine[Any, Any, Response]]
ErrorResponder = Callable[[int, str], Response]


def plain_error(status: int, message: str) -> Response:
    return Response(status, message.encode() + b"\n", "text/plain; charset=utf-8")


class _Refused(Exception):
    """Raised in a parser callback: answer `status` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_REASONS = {status.value: status.phrase for status in http.HTTPStatus}


class _Clock:
    """The Date header, formatted once per second rather than per response."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def date(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second, self._value = now, email.utils.formatdate(now, usegmt=True).encode()
        return self._value


@dataclass
class HttpServer:
    """Serves `handler` on one address; see the module's docstring for what it guarantees."""

    handler: Handler
    errors: ErrorResponder = plain_error
    max_head: int = 64 * 1024
    max_body: int = 1 << 20
    request_timeout: float = 30.0
    keepalive_timeout: float = 75.0
    max_pipelined: int = 32  # complete requests waiting for their turn before reading pauses
    _server: asyncio.Server | None = field(default=None, init=False, repr=False)
    _connections: set[_Connection] = field(default_factory=set, init=False, repr=False)
    _clock: _Clock = field(default_factory=_Clock, init=False, repr=False)
    _all_closed: asyncio.Future[None] | None = field(default=None, init=False, repr=False)

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None,
                    reuse_port: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, ssl=ssl_context,
                                                reuse_port=reuse_port, backlog=512)

    @property
    def port(self) -> int:
        """The port listened on (useful after `start(port=0)`)."""
        assert self._server is not None and self._server.sockets, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace: float = 10.0) -> None:
        """Stop listening; close idle connections now and the others once their request is
        answered, aborting whatever is left after `grace` seconds."""
        if self._server is None:
            return
        self._server.close()
        self._all_closed = asyncio.get_running_loop().create_future()
        for connection in list(self._connections):
            connection.finish()
        if self._connections:
            try:
                await asyncio.wait_for(self._all_closed, grace)
            except TimeoutError:
                log.warning("%d connections still busy after %g s; aborting them", len(self._connections), grace)
                for connection in list(self._connections):
                    connection.abort()
        await self._server.wait_closed()
        self._server = None

    def _gone(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        if not self._connections and self._all_closed is not None and not self._all_closed.done():
            self._all_closed.set_result(None)

    def _encode(self, response: Response, close: bool, head_only: bool) -> bytes:
        """The bytes of a response: status line, headers, body."""
        status = response.status
        lines = [b"HTTP/1.1 %d %s\r\nDate: %s\r\n" % (status, _REASONS.get(status, "Unknown").encode(),
                                                       self._clock.date())]
        if status == 204 or status == 304:  # no content, and no Content-Length (RFC 9110, 8.6)
            head_only = True
        else:
            lines.append(b"Content-Type: %s\r\nContent-Length: %d\r\n" % (response.content_type.encode(),
                                                                            len(response.body)))
        if close:
            lines.append(b"Connection: close\r\n")
        if response.headers:
            for name, value in response.headers.items():
                if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
                    raise ValueError(f"header {name!r}: a line break in a header")
                lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        lines.append(b"\r\n")
        if not head_only:
            lines.append(response.body)
        return b"".join(lines)


@dataclass(slots=True)
class _Pending:
    """A request waiting for its turn, or a refusal to send in its place."""

    request: Request | None
    keep_alive: bool
    refusal: Response | None = None


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, runs them in order, writes the answers."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._queue: collections.deque[_Pending] = collections.deque()
        self._running: asyncio.Task[Response] | None = None
        self._running_request: _Pending | None = None
        self._closing = False  # no more requests are read; close once the queue is answered
        self._paused_reading = False
        self._paused_writing = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None  # when the timer acts; None: it has nothing to do
        self._receiving = False  # part of a request has arrived
        self._half_close = False  # plain TCP can stay open to answer after the client's EOF; TLS cannot
        self._peer = ""
        self._reset()

    def _reset(self) -> None:
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head_size = 0
        self._body: list[bytes] = []
        self._body_size = 0

    # --- transport callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is not a subclass
        self._half_close = transport.get_extra_info("sslcontext") is None
        peername = transport.get_extra_info("peername")
        self._peer = str(peername[0]) if isinstance(peername, tuple) and peername else ""
        self._server._connections.add(self)
        if self._server._all_closed is not None:  # accepted while stopping
            self.finish()
        self._idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._queue.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._server._gone(self)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__
            if isinstance(cause, _Refused):
                self._refuse(cause.status, cause.message)
            else:
                log.error("HTTP request parsing failed", exc_info=cause or error)
                self._refuse(500, "internal error")
        except httptools.HttpParserUpgrade:
            self._closing = True  # protocol switches are not served; answer what came before, then close
        except httptools.HttpParserError as error:
            self._refuse(400, f"malformed request: {error}")
        self._flow()
        self._advance()

    def eof_received(self) -> bool | None:
        self._closing = True  # the client sends no more; answer what it sent, then close
        self._advance()
        return self._half_close or None

    def pause_writing(self) -> None:
        self._paused_writing = True
        self._flow()

    def resume_writing(self) -> None:
        self._paused_writing = False
        self._flow()

    def _flow(self) -> None:
        """Stop reading while the client does not read its answers or sends too far ahead."""
        if self._transport is None:
            return
        pause = self._paused_writing or len(self._queue) >= self._server.max_pipelined
        if pause and not self._paused_reading:
            self._transport.pause_reading()
            self._paused_reading = True
        elif not pause and self._paused_reading and not self._closing:
            self._transport.resume_reading()
            self._paused_reading = False

    # --- parser callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._receiving = True
        if self._running is None and not self._queue:
            self._arm(self._server.request_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._grow_head(len(name) + len(value) + 4)
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        held = self._headers.get(key)
        self._headers[key] = text if held is None else f"{held}, {text}"

    def _grow_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self._server.max_head:
            raise _Refused(431, f"the request line and headers exceed {self._server.max_head} bytes")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._server.max_body:
            raise _Refused(413, f"the request body exceeds {self._server.max_body} bytes")
        if (self._headers.get("expect", "").lower() == "100-continue" and self._running is None
                and not self._queue and self._transport is not None and self._parser.get_http_version() == "1.1"):
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._server.max_body:
            raise _Refused(413, f"the request body exceeds {self._server.max_body} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._receiving = False
        try:
            target = self._url.decode("ascii")
        except UnicodeDecodeError:
            raise _Refused(400, "the request target is not ASCII (percent-encode it)") from None
        if target.startswith("/"):
            raw_path, _, query = target.partition("?")
        else:  # absolute form (a proxy's), or "*"
            url = httptools.parse_url(self._url)
            raw_path = (url.path or b"/").decode("ascii") if url.schema else target
            query = (url.query or b"").decode("ascii")
            target = raw_path + (f"?{query}" if query else "")
        path = urllib.parse.unquote(raw_path) if "%" in raw_path else raw_path
        request = Request(self._parser.get_method().decode("ascii"), target, path, query, self._headers,
                          b"".join(self._body), self._peer)
        self._queue.append(_Pending(request, self._parser.should_keep_alive()))
        self._reset()

    # --- answering ----------------------------------------------------------------------

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` after what is queued, and read nothing more."""
        self._closing = True
        self._receiving = False
        self._queue.append(_Pending(None, False, self._server.errors(status, message)))

    def _advance(self) -> None:
        """Start the next request, or write the next refusal, while nothing is running."""
        while self._running is None and self._queue and self._transport is not None:
            pending = self._queue.popleft()
            if pending.refusal is not None:
                self._write(pending.refusal, close=True, head_only=False)
                return
            assert pending.request is not None
            self._cancel_timer()
            self._running_request = pending
            self._running = self._loop.create_task(self._server.handler(pending.request))
            self._running.add_done_callback(self._answered)
        if self._running is None and self._transport is not None:
            if self._closing and not self._queue:
                self._transport.close()
            else:
                self._idle()
        self._flow()

    def _answered(self, task: asyncio.Task[Response]) -> None:
        pending, self._running, self._running_request = self._running_request, None, None
        assert pending is not None and pending.request is not None
        close = not pending.keep_alive
        if task.cancelled():
            response, close = self._server.errors(503, "the server is stopping"), True
        elif task.exception() is not None:
            log.error("%s %s failed", pending.request.method, pending.request.path, exc_info=task.exception())
            response = self._server.errors(500, "internal error")
        else:
            response = task.result()
        close = close or (self._closing and not self._queue)  # the last answer before closing says so
        try:
            self._write(response, close, head_only=pending.request.method == "HEAD")
        except Exception:  # not a Response, or a malformed header
            log.exception("%s %s: the handler's answer cannot be sent", pending.request.method,
                          pending.request.path)
            self._write(self._server.errors(500, "internal error"), close, head_only=False)
        if close:
            self._queue.clear()
        self._advance()

    def _write(self, response: Response, close: bool, head_only: bool) -> None:
        if self._transport is None:
            return
        self._transport.write(self._server._encode(response, close, head_only))
        if close:
            self._closing = True
            self._transport.close()

    # --- timeouts and shutdown ----------------------------------------------------------

    def _idle(self) -> None:
        if self._receiving:
            self._arm(self._server.request_timeout)
        else:
            self._arm(self._server.keepalive_timeout)

    def _arm(self, seconds: float) -> None:
        """Act at `seconds` from now. Moving a deadline is an assignment: the one timer handle is
        rescheduled only when it would fire too late (a timer per request cost a tenth of one)."""
        self._deadline = self._loop.time() + seconds
        if self._timer is not None and self._timer.when() > self._deadline:
            self._timer.cancel()
            self._timer = None
        if self._timer is None:
            self._timer = self._loop.call_at(self._deadline, self._timed_out)

    def _cancel_timer(self) -> None:
        self._deadline = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._deadline is None or self._running is not None or self._transport is None:
            return
        if self._loop.time() < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._timed_out)
            return
        if self._receiving:
            self._refuse(408, f"the request did not arrive within {self._server.request_timeout:g} s")
            self._advance()
        else:
            self._transport.close()

    def finish(self) -> None:
        """The server stops: close now when idle, else after the request being handled."""
        self._closing = True
        if self._running is None and not self._queue and self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._running is not None:
            self._running.cancel()
        if self._transport is not None:
            self._transport.abort()
