"""Serving Stead's own HTTP APIs (the configuration API, and the next ones) on granian.

Stead does not frame HTTP itself: granian (a maintained server, HTTP/1.1 in Rust on hyper) reads
the request line, headers and body, and enforces what a misbehaving client could otherwise use to
exhaust the operator's memory. It runs embedded, in the operator's own event loop (its Rust
runtime on a thread of its own), so a handler calls the operator's services directly, through
granian's own interface (RSGI; see `_rsgi` for why not ASGI).

Chosen by measurement (`bench/config_lookup.py` runs both): granian served 1.65x uvicorn's
requests per second with bare handlers on the same two cores, and of the two it alone refused a
64 MiB header early (431 after reading under 1 MiB; uvicorn with httptools read all of it, grew
65 MiB and answered 200).

What is bounded, and where:

- request line and headers: `max_head` bytes (granian's HTTP/1 buffer; 431 and the connection
  closed beyond it), and they must arrive within `header_timeout` seconds (slow clients, slow-loris);
- bodies: only with a Content-Length of at most `max_body` bytes (413 at once beyond), and only once
  the `gate` (the API's authentication) let the head through: an anonymous client never makes the
  process read a body. granian then reads the body whole, in Rust (one Python call per body, not
  per chunk: a body in 2-byte writes cost ~9 CPU-seconds per MiB when Python took it chunk by
  chunk). A body cut short (the client closes before Content-Length bytes) is no request: the
  handler never sees it;
- requests in progress: at most `concurrency` at a time (granian's backpressure; the others wait
  in the kernel's accept queue, unread, costing no memory here);
- pipelined requests from a client that never reads its answers: one is answered at a time per
  connection, and writing waits for the client, so at most one answer is held per connection;
- `Transfer-Encoding` is refused (411, and the connection closed): no chunked bodies, whose size
  is unknown until they end, and no smuggling through `identity, chunked` or through a
  Content-Length sent with it (granian drops the Content-Length then; RFC 9112 6.3 allows the
  refusal). A refusal made before the body is read always closes the connection after the answer,
  so the unread body is never taken for the next request.

- a bare LF as line ending (instead of CRLF) in the request line and headers is refused (400, and
  the connection closed). granian's parser (httparse, under hyper) accepts it and has no setting to
  refuse it, and the head never reaches Python in granian: the TLS relay, which every TLS
  connection passes through, checks the heads on their way (`operators.runtime.serving.framing`).
  A server started without TLS (tests, a development setting) has no relay and no such check.

`Request` and `Response` are what a handler sees: plain values, no framework types.

With TLS, TLS is terminated by `operators.runtime.serving.relay` in this process, and granian listens
without TLS on a loopback port of its own: granian does not tell the application which certificate
a client presented (`start(client_ca=...)`), the relay does (see there), and the relay sees the
request heads as bytes, which granian never shows (the bare LF above). That port is
bound by this process and handed to granian (`_HeldSocketServer`), never chosen and released first:
another local user cannot take it and receive the requests the relay decrypts.
Every bound above holds behind the relay, which adds its own (connections, handshake, idleness).
A request then carries the client's real address and, when it presented one, what its verified
certificate says (`Request.certificate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from granian._granian import RSGIProtocolClosed, SocketHolder
from granian.constants import HTTPModes, Interfaces
from granian.http import HTTP1Settings
from granian.server.embed import Server

from operators.runtime.serving.clientca import ClientCa, PeerCertificate, server_context
from operators.runtime.serving.relay import TlsRelay

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Request:
    """One request as the handler sees it. Header names are lower case; a repeated header's
    values are joined with ", " (RFC 9110, 5.3)."""

    method: str
    path: str  # percent-decoded
    query: str  # as sent, without the "?"
    headers: Mapping[str, str]
    body: bytes = b""
    peer: str = ""  # the client's address (rate limits are per peer)
    certificate: PeerCertificate | None = None  # the client's verified certificate, when it presented one


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] | None = None


Handler = Callable[[Request], Coroutine[Any, Any, Response]]
Gate = Callable[[Request], Coroutine[Any, Any, Response | None]]
ErrorResponder = Callable[[int, str], Response]


def plain_error(status: int, message: str) -> Response:
    return Response(status, message.encode() + b"\n", "text/plain; charset=utf-8")


def listener(host: str, port: int, backlog: int = 1024, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on `host:port` (0: a port the kernel chooses), bound and kept from the
    start, so that no other process can take the address between a choice and a bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


class _HeldSocketServer(Server):
    """granian's embedded server on a socket this process bound already (`listener`), instead of one
    granian binds from an address.

    granian binds by number, so a port had to be chosen (probed and released) before it bound it: in
    between, any local user could bind that port on loopback and receive what the TLS relay forwards,
    decrypted, bearer tokens included. granian's worker takes a `SocketHolder` of a file descriptor
    (what its multiprocess server hands its workers); this overrides the one method that makes it.
    granian closes the descriptor it is given when it stops, so it gets a duplicate and the socket
    stays this process's until `HttpServer.stop`. Should a granian release rename that method, granian
    would bind the address itself and fail (the port is taken, by this process, without SO_REUSEPORT
    behind the relay): closed, not open."""

    def __init__(self, *args: Any, sock: socket.socket, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held = sock

    def _init_shared_socket(self) -> None:
        self._ssp = None
        # granian's stub lacks the constructor its Rust class has (fd, is_uds, backlog)
        self._shd = SocketHolder(os.dup(self._held.fileno()), False, self.backlog)  # type: ignore[call-arg,assignment]


@dataclass
class HttpServer:
    """Serves `handler` on one address; see the module's docstring for what it guarantees."""

    handler: Handler
    errors: ErrorResponder = plain_error
    gate: Gate | None = None
    """Called with a request whose body is announced but not read yet (its `body` empty): an answer
    refuses it before a byte of the body is read (and the connection closes after it); None lets it
    through, and `handler` gets it with its body. The APIs authenticate there, so an anonymous
    client cannot make the process read a body."""
    max_head: int = 64 * 1024
    max_body: int = 1 << 20
    header_timeout: float = 10.0
    concurrency: int = 256
    max_connections: int = 1024
    """With TLS: client connections the TLS relay keeps open at most (more are closed at once)."""
    handshake_timeout: float = 10.0
    idle_timeout: float = 120.0
    """With TLS: a connection with no byte either way for this long is closed by the relay."""
    observe: Callable[[str, int, float], None] | None = None
    """Called once per answered request with (method, status, seconds from its arrival to its
    answer), e.g. `Metrics.request_observer`; never for a connection closed before an answer."""
    _server: Server | None = field(default=None, init=False, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _port: int = field(default=0, init=False, repr=False)
    _relay: TlsRelay | None = field(default=None, init=False, repr=False)
    _tls: tuple[Path, Path] | None = field(default=None, init=False, repr=False)
    _socket: socket.socket | None = field(default=None, init=False, repr=False)
    _inner: tuple[str, int] = field(default=("", 0), init=False, repr=False)

    async def start(self, host: str, port: int, tls: tuple[Path, Path] | None = None,
                    ready_within: float = 10.0, client_ca: ClientCa | None = None) -> None:
        """Listen on `host:port` (0: a free port), with TLS from (certificate, key) files; with
        `client_ca`, also asking clients for a certificate (through the relay: see the module).

        Several processes may listen on the same port (SO_REUSEPORT, set on the socket bound here
        and by the relay): the kernel spreads connections between them. The socket granian serves is
        bound here and held until `stop` (see `_HeldSocketServer`): no port is chosen, released and
        bound again.
        """
        if client_ca is not None and tls is None:
            raise ValueError("client certificates need TLS: give the server's certificate and key")
        self._tls = tls
        relayed = tls is not None
        inner_host = "127.0.0.1" if relayed else host
        # Bound here and kept (see `_HeldSocketServer`); behind the relay, on a port of this process alone.
        self._socket = listener(inner_host, 0 if relayed else port, backlog=1024, reuse_port=not relayed)
        try:
            await self._serve(ready_within)
        except BaseException:
            await self.stop(grace=1)
            raise
        if tls is not None:
            self._relay = TlsRelay(
                (self._inner[0], self._inner[1]), self._context(tls, client_ca), client_ca,
                max_connections=self.max_connections, handshake_timeout=self.handshake_timeout,
                idle_timeout=self.idle_timeout, max_head=self.max_head)
            try:
                self._port = await self._relay.start(host, port)
            except BaseException:
                await self.stop(grace=1)
                raise

    async def _serve(self, ready_within: float) -> None:
        """granian on the socket bound in `start`, without TLS (the relay terminates it)."""
        assert self._socket is not None
        inner_host, inner_port = self._socket.getsockname()[:2]
        self._inner = (str(inner_host), int(inner_port))
        self._server = _HeldSocketServer(
            self._rsgi, sock=self._socket, address=inner_host, port=inner_port, interface=Interfaces.RSGI,
            http=HTTPModes.http1,
            websockets=False, backlog=1024, backpressure=self.concurrency, runtime_threads=1,
            http1_settings=HTTP1Settings(header_read_timeout=int(self.header_timeout * 1000), keep_alive=True,
                                         max_buffer_size=self.max_head, pipeline_flush=False),
            log_enabled=False,
        )
        self._port = inner_port
        self._task = asyncio.create_task(self._server.serve(), name=f"http-{inner_host}:{inner_port}")
        await self._listening(inner_host, inner_port, ready_within)

    async def _listening(self, host: str, port: int, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            assert self._task is not None
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise OSError(f"the HTTP server on {host}:{port} stopped while starting")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection(host, port)
                writer.close()
                return
            if time.monotonic() > deadline:
                raise OSError(f"the HTTP server on {host}:{port} did not listen within {within:g} s")
            await asyncio.sleep(0.01)  # a readiness poll with a deadline

    @property
    def port(self) -> int:
        """The port listened on (also after `start(port=0)`)."""
        assert self._server is not None, "not started"
        return self._port

    @property
    def relay(self) -> TlsRelay | None:
        """The TLS relay in front of granian (with TLS), else None."""
        return self._relay

    @staticmethod
    def _context(tls: tuple[Path, Path], client_ca: ClientCa | None) -> ssl.SSLContext:
        return server_context(*tls) if client_ca is None else client_ca.context(*tls)

    def reload(self) -> None:
        """Serve the certificate files anew: the relay makes a new TLS context for the connections
        to come (the ones open keep theirs)."""
        if self._relay is not None and self._tls is not None:
            self._relay.context = self._context(self._tls, self._relay.client_ca)

    def trust(self, client_ca: ClientCa) -> None:
        """Verify the client certificates of connections to come against `client_ca` (a renewed
        bundle); only for a server started with TLS."""
        if self._relay is None or self._tls is None:
            raise RuntimeError("the server was started without TLS")
        self._relay.context = client_ca.context(*self._tls)
        self._relay.client_ca = client_ca

    async def stop(self, grace: float = 10.0) -> None:
        """Stop listening and let requests being handled finish, up to `grace` seconds."""
        relay, self._relay = self._relay, None
        if relay is not None:
            relay.close()  # no new connections; those open get granian's answers until it stops
        if self._server is not None and self._task is not None:
            self._server.workers_kill_timeout = int(grace) or 1
            self._server.stop()  # type: ignore[no-untyped-call]  # granian is not typed
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._server = self._task = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if relay is not None:
            await relay.stop()

    # --- granian's native interface (RSGI) -----------------------------------------------------

    async def _rsgi(self, scope: Any, protocol: Any) -> None:
        """One request: granian's scope and protocol in, one answer out (`response_bytes`, which
        sets Content-Length and leaves the body out for HEAD).

        RSGI, not ASGI: an answer is one call instead of two awaited messages, and a request
        without a body is not asked for one; on this machine that is ~35% more requests per second
        per core (bench/config_lookup.py). RSGI gives the path decoded only, which is what routing
        needs.

        Everything is decided on the head before a byte of body is read: the framing (a body only
        with Content-Length, at most `max_body`), then the `gate` (the API's authentication). The
        body is then read whole by granian (`await protocol()`, in Rust: no Python step per chunk
        however small the client's writes), and a body cut short is no request at all.
        """
        if scope.proto != "http":
            return
        started = time.perf_counter()
        headers: dict[str, str] = {}
        for name, value in scope.headers.items():  # names arrive in lower case
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        method: str = scope.method
        if "transfer-encoding" in headers:
            # granian (hyper) drops a Content-Length sent with Transfer-Encoding: both arrive as this.
            self._refuse(protocol, method, started, 411, "Transfer-Encoding is not accepted: send the body "
                                                         "with a Content-Length")
            return
        announced = headers.get("content-length", "0")
        if not announced.isdigit():  # hyper refuses these itself; kept as a guard
            self._refuse(protocol, method, started, 400, "Content-Length is not a number")
            return
        length = int(announced)
        if length > self.max_body:
            self._refuse(protocol, method, started, 413, f"the request body is over {self.max_body} bytes")
            return
        client: str = scope.client
        relayed = self._relay.peer(client) if self._relay is not None else None
        if relayed is None:
            request = Request(method, scope.path, scope.query_string, headers, b"",
                              client.rpartition(":")[0].strip("[]"))
        else:
            request = Request(method, scope.path, scope.query_string, headers, b"", *relayed)
        if length:
            if self.gate is not None:
                try:
                    refusal = await self.gate(request)
                except Exception:
                    log.exception("%s %s: the gate failed", method, request.path)
                    refusal = self.errors(500, "internal error")
                if refusal is not None:  # the body is never read: the connection cannot be reused
                    self._refuse(protocol, method, started, refusal)
                    return
            try:
                body = await protocol()
            except RSGIProtocolClosed:
                return  # the client left before its body was whole: no request, no answer
            if len(body) != length:
                return
            request = replace(request, body=bytes(body))
        try:
            response = await self.handler(request)
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            response = self.errors(500, "internal error")
        self._reply(protocol, request.method, started, response)

    def _refuse(self, protocol: Any, method: str, started: float, status: int | Response, message: str = "") -> None:
        """Answer without reading the body, and close the connection after the answer: what is left of
        the body must never be read as the next request."""
        refusal = self.errors(status, message) if isinstance(status, int) else status
        headers = {**(refusal.headers or {}), "Connection": "close"}
        self._reply(protocol, method, started, Response(refusal.status, refusal.body, refusal.content_type, headers))

    def _reply(self, protocol: Any, method: str, started: float, response: Response) -> None:
        """Answer, then tell `observe` (whose failure must not fail serving)."""
        self._answer(protocol, response)
        if self.observe is not None:
            try:
                self.observe(method, response.status, time.perf_counter() - started)
            except Exception:
                log.exception("the request observer failed")

    @staticmethod
    def _answer(protocol: Any, response: Response) -> None:
        headers = [("content-type", response.content_type), *(response.headers or {}).items()]
        protocol.response_bytes(response.status, headers, response.body)
