"""The relay's connection to granian: a plain non-blocking socket, never losing granian's last answer.

Why a module of its own: this is the one place where the relay (`operators.runtime.serving.relay`)
does not use an event loop transport, for a reason of its own (below), and it needs nothing of
TLS or of certificates: only a client connection to pass granian's bytes to (`Downstream`).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Protocol

READ_BUFFER = 256 * 1024
"""What is read from granian at a time."""


class Downstream(Protocol):
    """The client connection a `GranianSocket` relays for: where granian's bytes go, and whom to tell."""

    client: asyncio.Transport | None
    """The client's transport (None once it is gone): not read while granian is not reading."""

    def touch(self) -> None:
        """A byte went by: the connection is not idle."""
        ...

    def send(self, data: bytes) -> None:
        """Pass granian's bytes on to the client."""
        ...

    def upstream_finished(self) -> None:
        """Granian ended the connection, after everything it sent was passed on."""
        ...


class GranianSocket:
    """The relay's connection to granian: a non-blocking socket of its own, not an event loop transport.

    When granian ends a connection while the relay still writes to it (a client still sending a
    header granian refused), a transport's failed write closes the socket at once, and granian's
    last answer (the 431), already received, is lost unread. Here the socket stays open until
    what granian sent is read and passed on.
    """

    __slots__ = ("buffer", "closed", "connection", "fd", "loop", "reading", "sock", "throttled")

    HIGH = 256 * 1024  # bytes waiting for granian beyond which the client is not read
    LOW = 64 * 1024

    def __init__(self, sock: socket.socket, connection: Downstream, loop: asyncio.AbstractEventLoop) -> None:
        self.sock, self.connection, self.loop = sock, connection, loop
        self.fd = sock.fileno()
        self.buffer = bytearray()
        self.closed = False
        self.throttled = False
        self.reading = True
        loop.add_reader(self.fd, self._readable)

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if not self.buffer:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._lost()
                return
            if sent == len(data):
                return
            data = data[sent:]
            self.loop.add_writer(self.fd, self._writable)
        self.buffer += data
        client = self.connection.client
        if len(self.buffer) > self.HIGH and not self.throttled and client is not None:
            self.throttled = True  # granian does not read (busy, or done with the request): nor does the relay
            client.pause_reading()

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.buffer)
        except BlockingIOError:
            return
        except OSError:
            self._lost()
            return
        del self.buffer[:sent]
        if not self.buffer:
            self.loop.remove_writer(self.fd)
        client = self.connection.client
        if self.throttled and len(self.buffer) <= self.LOW and client is not None and not client.is_closing():
            self.throttled = False
            client.resume_reading()

    def _readable(self) -> None:
        try:
            data = self.sock.recv(READ_BUFFER)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._lost()
            return
        self.connection.touch()
        self.connection.send(data)

    def _lost(self) -> None:
        """Granian ended the connection (or it broke): pass on what it sent before, then finish."""
        if self.closed:
            return
        for _ in range(64):  # what is queued: at most a few answers (bounded all the same)
            try:
                data = self.sock.recv(READ_BUFFER)
            except OSError:
                break
            if not data:
                break
            self.connection.send(data)
        self.close()
        self.connection.upstream_finished()

    def pause_reading(self) -> None:
        if self.reading and not self.closed:
            self.reading = False
            self.loop.remove_reader(self.fd)

    def resume_reading(self) -> None:
        if not self.reading and not self.closed:
            self.reading = True
            self.loop.add_reader(self.fd, self._readable)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self.sock.close()

    abort = close
