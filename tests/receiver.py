"""A loopback HTTP receiver that records what it is sent and answers as told: well, with a 500, late,
never, with an endless body or one that drips. The notifications' tests point subscriptions at it.

Every misbehaviour is bounded (a loop with a count, a wait with a timeout, released by `close`), so a
test that fails never leaves a thread spinning.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

Answer = Literal["ok", "500", "hang", "slow", "huge", "drip"]
"""ok: 200 at once; 500: a server error; hang: read the request, never answer; slow: answer after
`Receiver.slow_seconds`; huge: 200 with an endless body (up to 64 MiB); drip: 200 with a body of one byte
every 0.1 s (up to 60 s)."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    host: str = "127.0.0.1"
    answers: list[Answer] = field(default_factory=list)
    """The answers to the first requests, in order; then `then`."""
    then: Answer = "ok"
    slow_seconds: float = 2.0
    received: list[Received] = field(default_factory=list)
    huge_sent: int = 0
    """Bytes of the endless bodies the receiver managed to send."""
    released: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                      body))
                    answer = receiver.answers.pop(0) if receiver.answers else receiver.then
                with contextlib.suppress(OSError):
                    receiver.answer(self, answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, handler: BaseHTTPRequestHandler, answer: Answer) -> None:
        if answer == "hang":
            self.released.wait(60)
            return
        if answer == "slow":
            self.released.wait(self.slow_seconds)
        if answer == "500":
            handler.send_response(500)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        handler.send_response(200)
        if answer in ("huge", "drip"):
            handler.end_headers()  # no length: the body ends when the connection does
            chunk, pause, count = (b"x" * 65536, 0.0, 1024) if answer == "huge" else (b"x", 0.1, 600)
            for _ in range(count):
                if self.released.is_set():
                    return
                handler.wfile.write(chunk)
                self.huge_sent += len(chunk)
                if pause:
                    time.sleep(pause)
            return
        handler.send_header("Content-Length", "2")
        handler.end_headers()
        handler.wfile.write(b"ok")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}/events"

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def receiving(host: str = "127.0.0.1", answers: list[Answer] | None = None, then: Answer = "ok",
              slow_seconds: float = 2.0) -> Iterator[Receiver]:
    receiver = Receiver(host, list(answers or []), then, slow_seconds)
    try:
        yield receiver
    finally:
        receiver.close()
