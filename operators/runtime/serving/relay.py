"""TLS in front of granian, for an API whose clients may authenticate with certificates.

Why this exists: granian (2.8) can verify client certificates (`ssl_client_verify`), but tells
the application nothing about them: its RSGI scope has no peer certificate (and neither do
uvicorn 0.54 nor hypercorn 0.18). An API that maps a certificate to a user, as Kubernetes does
(user = Subject CN, groups = Subject O), must terminate TLS itself. The relay does that and
nothing more: granian still frames HTTP behind it, so its bounds (header size, header timeout,
body size, concurrency) hold for the relayed connections as for any other.

How a handler learns who is there: for each client connection the relay, once the handshake is
done, opens one connection to granian, which listens without TLS on a loopback port of its own.
Before it forwards a byte, it records under that connection's local address (what granian
reports as the request's client, `ip:port`) the client's real address and what its certificate
says; the record goes the moment the relay ends that connection. A connection that the relay did
not make (a local process connecting to granian's port) has no record: no certificate identity,
and its requests can still carry a token. Two live TCP connections to granian never share a
source address, and the record of a closed one is gone before its port can be reused.

Refused certificates: a certificate from another CA ends the handshake, and one of the right CA
that is expired or not valid yet is recorded as refused, with the reason (`ClientCa`, in
`operators.runtime.serving.clientca`, decides both).

Bounds of the relay itself: at most `max_connections` client connections (more are closed at
once); the TLS handshake within `handshake_timeout`; a connection with no byte either way for
`idle_timeout` is closed; each direction stops reading while the other side's write buffer is
full, so a client that never reads its answers holds one buffer, not a growing queue. TLS is
done over memory buffers (`ssl.MemoryBIO`): a connection costs tens of kilobytes, not the
quarter megabyte of the event loop's own TLS layer. When granian ends a connection, the relay
sends the rest, ends its side and stops reading, and closes the connection a moment later
(`linger`): a client still sending (a huge header) then gets granian's answer (431) rather than
a reset that would discard it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from operators.runtime.serving.clientca import ClientCa, PeerCertificate
from operators.runtime.serving.framing import HeadGuard
from operators.runtime.serving.upstream import GranianSocket

log = logging.getLogger(__name__)


class Peer(NamedTuple):
    """A relayed connection as a handler sees it: the client's real address, and its certificate
    (None when it presented none)."""

    address: str
    certificate: PeerCertificate | None


class _Connection(asyncio.Protocol):
    """One client connection: TLS done here over memory buffers (`ssl.MemoryBIO`), not by the event
    loop's TLS layer, whose buffers cost a quarter of a megabyte per connection (asyncio's and
    uvloop's alike), and whose handshake and shutdown this relay must bound itself anyway."""

    __slots__ = ("client", "draining", "guard", "handshake_timer", "incoming", "last", "outgoing", "peer", "relay",
                 "tls", "upstream", "upstream_key")

    def __init__(self, relay: TlsRelay) -> None:
        self.relay = relay
        self.guard = HeadGuard(relay.max_head)
        self.client: asyncio.Transport | None = None
        self.upstream: GranianSocket | None = None
        self.upstream_key = ""
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls: ssl.SSLObject | None = None
        self.handshake_timer: asyncio.TimerHandle | None = None
        self.draining = -1  # >= 0: granian is done with the connection, which lingers a moment
        self.last = 0.0
        self.peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # uvloop's transports do not derive from asyncio's
        self.client = tcp
        self.relay._accepted(self, tcp)

    def data_received(self, data: bytes) -> None:
        relay = self.relay
        self.last = relay.clock()
        if self.draining >= 0:
            return  # finished: what the client still sends is dropped
        tls = self.tls
        if tls is None:
            return
        self.incoming.write(data)
        if self.handshake_timer is not None:
            try:
                tls.do_handshake()
            except ssl.SSLWantReadError:
                self.flush()
                return
            except (ssl.SSLError, ValueError) as error:
                log.debug("TLS relay: handshake with %s failed: %s", self.peer, error)
                self.flush()  # the alert saying why
                relay._end(self)
                return
            self.handshake_timer.cancel()
            self.handshake_timer = None
            self.flush()
            relay._handshaken(self)
            return
        self.pump()

    def pump(self) -> None:
        """Decrypt what has arrived and pass it on to granian (once connected to it)."""
        tls, incoming = self.tls, self.incoming
        if tls is None:
            return
        while (upstream := self.upstream) is not None and self.draining < 0:  # granian may end it meanwhile
            try:
                chunk = tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLError as error:
                log.debug("TLS relay: TLS error from %s: %s", self.peer, error)
                self.relay._end(self, abort=True)
                return
            if not chunk:  # the client's close_notify: it sends no more
                self.relay._end(self)
                return
            refused = self.guard.feed(chunk)
            if refused is not None:
                self.relay._refuse(self, refused)
                return
            upstream.write(chunk)
            if not incoming.pending and not tls.pending():
                break  # nothing left to decrypt: spares the exception another read would raise
        if self.outgoing.pending:
            self.flush()  # reading may have produced TLS messages (TLS 1.3 key updates)

    def send(self, data: bytes) -> None:
        """Encrypt an answer from granian and send it to the client."""
        if self.tls is None or self.draining >= 0:
            return
        try:
            self.tls.write(data)
        except ssl.SSLError as error:
            log.debug("TLS relay: cannot write to %s: %s", self.peer, error)
            self.relay._end(self, abort=True)
            return
        self.flush()

    def flush(self) -> None:
        out = self.outgoing.read()
        if out and self.client is not None and not self.client.is_closing():
            self.client.write(out)

    def finish(self) -> None:
        """Granian is done with the connection: say so in TLS (close_notify), end the sending side,
        stop reading, and keep the connection a moment (`TlsRelay.linger`) before closing it:
        closing a socket with unread data resets the connection at once, and a client still
        sending (a huge header) would lose the answer it has not read yet (granian's 431)."""
        client = self.client
        if self.tls is not None and self.handshake_timer is None:
            with contextlib.suppress(ssl.SSLError, ValueError):
                self.tls.unwrap()
            self.flush()
        if client is None or client.is_closing():
            return
        self.draining = 0
        if client.can_write_eof():
            client.write_eof()
        client.pause_reading()

    def eof_received(self) -> bool:
        self.relay._end(self)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.client = None
        self.relay._end(self)

    def touch(self) -> None:
        self.last = self.relay.clock()

    def upstream_finished(self) -> None:
        self.relay._finished(self)

    def pause_writing(self) -> None:  # the client does not read: stop reading granian's answers
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and not self.upstream.is_closing():
            self.upstream.resume_reading()


READ_SIZE = 16384
"""Plaintext read at a time: one TLS record's worth."""



@dataclass
class TlsRelay:
    """Terminates TLS on `host:port` and relays each connection to granian on `upstream` (see the module)."""

    upstream: tuple[str, int]
    context: ssl.SSLContext
    client_ca: ClientCa | None = None
    max_connections: int = 1024
    handshake_timeout: float = 10.0
    idle_timeout: float = 120.0
    linger: float = 10.0
    """After granian's last answer: how long the connection stays open, unread, before it is closed."""
    max_head: int = 64 * 1024
    """granian's bound on a request head: beyond it the relay leaves the head to granian (431)."""
    _server: asyncio.Server | None = field(default=None, init=False, repr=False)
    _connections: set[_Connection] = field(default_factory=set, init=False, repr=False)
    _peers: dict[str, Peer] = field(default_factory=dict, init=False, repr=False)
    _sweeper: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    refused_over_limit: int = field(default=0, init=False)

    clock: Callable[[], float] = field(default=time.monotonic, init=False, repr=False)
    """The event loop's clock, once started."""

    def now(self) -> float:
        return self.clock()

    async def start(self, host: str, port: int) -> int:
        """Listen (several processes may share the port: SO_REUSEPORT); returns the port."""
        loop = self._loop = asyncio.get_running_loop()
        self.clock = loop.time
        self._server = await loop.create_server(lambda: _Connection(self), host, port, reuse_port=True,
                                                backlog=1024)
        self._sweeper = asyncio.create_task(self._sweep(), name=f"relay-idle-{host}:{port}")
        return int(self._server.sockets[0].getsockname()[1])

    def peer(self, client: str) -> Peer | None:
        """The relayed connection granian reports as `client` (`ip:port`); None when the relay did not make it."""
        return self._peers.get(client)

    @property
    def connections(self) -> int:
        """Client connections open now (handshaking, relaying or finishing)."""
        return len(self._connections)

    def _accepted(self, connection: _Connection, transport: asyncio.Transport) -> None:
        if len(self._connections) >= self.max_connections:
            self.refused_over_limit += 1
            if self.refused_over_limit in (1, 10, 100) or self.refused_over_limit % 1000 == 0:
                log.warning("TLS relay: %d connections open, the most allowed; closing new ones (%d so far)",
                            len(self._connections), self.refused_over_limit)
            connection.client = None
            transport.abort()
            return
        self._connections.add(connection)
        connection.last = self.now()
        peer = transport.get_extra_info("peername")
        connection.peer = str(peer[0]) if peer else ""
        connection.tls = self.context.wrap_bio(connection.incoming, connection.outgoing, server_side=True)
        assert self._loop is not None
        connection.handshake_timer = self._loop.call_later(self.handshake_timeout, self._end, connection, True)

    def _handshaken(self, connection: _Connection) -> None:
        """The handshake is done: what the certificate says, then the connection to granian."""
        assert connection.client is not None and connection.tls is not None
        connection.client.pause_reading()  # until granian's connection is there and recorded
        certificate = self._certificate(connection.tls)
        task = asyncio.create_task(self._connect(connection, certificate))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self, connection: _Connection, certificate: PeerCertificate | None) -> None:
        loop = self._loop
        assert loop is not None
        sock = socket.socket(socket.AF_INET6 if ":" in self.upstream[0] else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, self.upstream)
        except OSError as error:
            sock.close()
            log.warning("TLS relay: cannot reach the HTTP server on %s:%d: %s", *self.upstream, error)
            self._end(connection, abort=True)
            return
        except BaseException:
            sock.close()
            raise
        if connection not in self._connections:  # the client left meanwhile
            sock.close()
            return
        local = sock.getsockname()
        connection.upstream_key = f"{local[0]}:{local[1]}"
        self._peers[connection.upstream_key] = Peer(connection.peer, certificate)  # before any byte is relayed
        connection.upstream = GranianSocket(sock, connection, loop)
        connection.last = self.now()
        connection.pump()  # what came with the end of the handshake
        if connection.client is not None and not connection.client.is_closing():
            connection.client.resume_reading()

    def _certificate(self, tls: ssl.SSLObject) -> PeerCertificate | None:
        der = tls.getpeercert(binary_form=True)
        if not der:
            return None
        if self.client_ca is None:  # cannot happen with a context of ClientCa.context
            return PeerCertificate("", (), "client certificates are not accepted here")
        try:
            return self.client_ca.check(der)
        except ValueError as error:
            return PeerCertificate("", (), f"the client certificate cannot be read: {error}")

    def _finished(self, connection: _Connection) -> None:
        """Granian closed its side: forget the record, send what is left, and close (after lingering)."""
        self._forget(connection)
        upstream, connection.upstream = connection.upstream, None
        if upstream is not None and not upstream.is_closing():
            upstream.close()
        if connection in self._connections and connection.draining < 0:
            connection.finish()
            assert self._loop is not None
            self._loop.call_later(self.linger, self._drained, connection)

    def _refuse(self, connection: _Connection, why: str) -> None:
        """A request granian must not see (`HeadGuard`): the connection to granian goes at once, with
        whatever it had not answered, and the client gets a 400 saying why, then the connection ends
        as after granian's last answer."""
        upstream, connection.upstream = connection.upstream, None
        if upstream is not None and not upstream.is_closing():
            upstream.abort()
        body = why.encode() + b"\n"
        connection.send(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        self._finished(connection)

    def _drained(self, connection: _Connection) -> None:
        """The lingering moment is over: close, once the client has been sent everything (until then
        the idle bound applies)."""
        client = connection.client
        if client is not None and not client.is_closing() and client.get_write_buffer_size() > 0:
            assert self._loop is not None
            self._loop.call_later(self.linger, self._drained, connection)
            return
        self._end(connection, abort=True)

    def _forget(self, connection: _Connection) -> None:
        if connection.upstream_key:
            self._peers.pop(connection.upstream_key, None)
            connection.upstream_key = ""

    def _end(self, connection: _Connection, abort: bool = False) -> None:
        """Forget the record first, then close both sides (idempotent); `abort`: at once, without
        writing what is buffered."""
        self._forget(connection)
        self._connections.discard(connection)
        if connection.handshake_timer is not None:
            connection.handshake_timer.cancel()
            connection.handshake_timer = None
        upstream, client = connection.upstream, connection.client
        connection.upstream = None
        if upstream is not None and not upstream.is_closing():
            upstream.abort() if abort else upstream.close()
        if client is not None:
            if abort:
                client.abort()
            elif not client.is_closing():
                if connection.tls is not None and connection.handshake_timer is None and connection.draining < 0:
                    with contextlib.suppress(ssl.SSLError, ValueError):
                        connection.tls.unwrap()  # close_notify
                    connection.flush()
                client.close()  # writes what is buffered (the answer), then closes

    async def _sweep(self) -> None:
        """Close connections idle for `idle_timeout` (a check every quarter of it)."""
        every = max(0.05, self.idle_timeout / 4)
        while True:
            await asyncio.sleep(every)  # a periodic check, not a synchronisation
            cutoff = self.now() - self.idle_timeout
            for connection in [c for c in self._connections if c.last < cutoff]:
                log.debug("TLS relay: closing a connection from %s idle for %g s", connection.peer,
                          self.idle_timeout)
                self._end(connection, abort=True)

    def close(self) -> None:
        """Stop listening; the connections open go on."""
        if self._server is not None:
            self._server.close()
            self._server = None

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        self.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for connection in list(self._connections):
            self._end(connection, abort=True)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
