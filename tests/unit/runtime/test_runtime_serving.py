"""The HTTP server of Stead's APIs (granian, embedded) against clients that misbehave on purpose.

The server runs in a process of its own so that its memory can be read (`/proc/<pid>/status`)
while raw sockets on loopback attack it, each attack in a bounded loop; after each one, a
well-behaved client must still be answered.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[3]
MiB = 1 << 20

SERVER = """
import asyncio, json, sys
from operators.runtime.serving.http import HttpServer, Response

async def handler(request):
    seen = {"method": request.method, "path": request.path, "query": request.query,
            "authorization": request.headers.get("authorization"), "body": len(request.body)}
    return Response(200, json.dumps(seen).encode())

async def main():
    server = HttpServer(handler, max_body=64 << 10, header_timeout=1.0, concurrency=64)
    await server.start("127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class Served:
    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process, self.port = process, port

    def rss(self) -> int:
        """Resident memory of the server process, in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def get(self, path: str = "/ok") -> dict[str, object]:
        """A well-behaved client: one request, the whole answer."""
        with self.connect() as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
            answer = _read_all(sock)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        return dict(json.loads(body))


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def served() -> Iterator[Served]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    try:
        yield Served(process, port)
    finally:
        process.kill()
        process.wait(10)


def test_a_64_mib_header_is_refused_early_and_costs_no_memory(served: Served) -> None:
    before = served.rss()
    sent = 0
    with served.connect() as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: ")
        try:
            for _ in range(1024):  # 64 MiB in 64 KiB writes, unless the server stops reading
                sock.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass
    assert sent < 16 * MiB, "the server kept reading a header of many megabytes"
    assert served.rss() - before < 16 * MiB
    assert served.get()["path"] == "/ok"


def test_a_body_over_the_limit_is_refused_whether_announced_or_in_tiny_chunks(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2097152\r\n\r\n")
        assert _read_all(sock).startswith(b"HTTP/1.1 413")
    before = served.rss()
    with served.connect() as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"2\r\nab\r\n" * 4096
        try:
            for _ in range(12):  # 96 KiB of body in 2-byte chunks, over the 64 KiB limit
                sock.sendall(chunk)
        except OSError:
            pass
        sock.settimeout(10)
        answer = sock.recv(65536)  # answered as soon as the limit was passed
    assert answer.startswith(b"HTTP/1.1 413")
    assert served.rss() - before < 16 * MiB
    assert served.get()["body"] == 0


def test_pipelined_requests_from_a_client_that_never_reads_hold_no_memory(served: Served) -> None:
    before = served.rss()
    with served.connect() as sock:
        sock.setblocking(False)
        request = b"GET /pipelined HTTP/1.1\r\nHost: t\r\n\r\n"
        sent = 0
        deadline = time.monotonic() + 5
        while sent < 100_000 and time.monotonic() < deadline:  # until the server stops reading
            try:
                sock.send(request * 100)
                sent += 100
            except BlockingIOError:
                time.sleep(0.01)
        assert served.get()["path"] == "/ok"
        assert served.rss() - before < 16 * MiB
    assert served.get()["path"] == "/ok"


def test_many_idle_and_slow_connections_are_closed_and_others_still_served(served: Served) -> None:
    before = served.rss()
    idle = [served.connect() for _ in range(500)]
    slow = served.connect()
    slow.sendall(b"GET / HTTP/1.1\r\n")
    try:
        assert served.get()["path"] == "/ok"
        # a client that sends nothing, or its headers a byte at a time, is cut after the header timeout
        for sock in (*idle[:20], slow):
            sock.settimeout(10)
            for _ in range(30):
                try:
                    sock.sendall(b"X")
                except OSError:
                    break
                time.sleep(0.1)
        closed = wait_until(lambda: all(_closed(s) for s in (*idle[:20], slow)) or None, 10, "slow clients cut")
        assert closed
        assert served.rss() - before < 32 * MiB
    finally:
        for sock in (*idle, slow):
            sock.close()
    assert served.get()["path"] == "/ok"


def _closed(sock: socket.socket) -> bool:
    try:
        sock.settimeout(0.05)
        data = sock.recv(65536)
    except TimeoutError:
        return False
    except OSError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 4")


def test_trailers_never_become_headers_and_smuggling_codings_are_refused(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(b"POST /t HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     b"2\r\nab\r\n0\r\nAuthorization: Bearer smuggled\r\n\r\n")
        answer = _read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and json.loads(body)["authorization"] is None
    with served.connect() as sock:
        sock.sendall(b"POST /t HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity, chunked\r\nConnection: close\r\n"
                     b"\r\n2\r\nab\r\n0\r\n\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400") or answer == b""


def test_the_path_is_decoded_and_the_query_kept_as_sent(served: Served) -> None:
    seen = served.get("/a%3Fb/c?x=1&y=%2F")
    assert seen["path"] == "/a?b/c" and seen["query"] == "x=1&y=%2F"
