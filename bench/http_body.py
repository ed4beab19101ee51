"""What a request body costs the HTTP server of Stead's APIs (`operators.runtime.serving.http`) before and
after authentication, in CPU seconds of the server process (from /proc), the figure issue 25 (finding 3)
gave: a body sent in 2-byte chunks cost ~9 CPU-seconds per MiB, before authentication.

The server runs in a process of its own with a handler that returns the body's size and a gate that lets
through only `Authorization: Bearer ok` (what the configuration API does with its authentication). Three
clients, on loopback, one after the other:

- ``anonymous``: 50 requests announcing a 60,000-byte body, without credentials, head only, each on a
  connection of its own: CPU per request (the body is never read);
- ``chunked``: an authenticated body of `--kib` KiB in 2-byte chunks (`Transfer-Encoding: chunked`): CPU
  per MiB (refused at once, unread, where chunked bodies are refused);
- ``tiny-writes``: an authenticated body of `--kib` KiB with a Content-Length, written 2 bytes at a time
  (TCP_NODELAY): CPU per MiB.

`--source DIR` serves from another checkout (e.g. an export of an earlier commit) to compare in one run:

    git archive <commit> operators pipelines | tar -x -C /tmp/old
    .venv/bin/python bench/http_body.py --source /tmp/old --source .
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SERVER = """
import asyncio, sys
from operators.runtime.serving.http import HttpServer, Response

async def handler(request):
    return Response(200, str(len(request.body)).encode())

async def gate(request):
    return None if request.headers.get("authorization") == "Bearer ok" else Response(401, b"who are you?")

async def main():
    try:
        server = HttpServer(handler, max_body=4 << 20, gate=gate)
    except TypeError:  # a server without a gate (before issue 25)
        server = HttpServer(handler, max_body=4 << 20)
    await server.start("127.0.0.1", 0)
    print(server.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


ANONYMOUS = 50


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def answer(sock: socket.socket) -> bytes:
    sock.settimeout(120)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def anonymous(port: int, count: int = ANONYMOUS) -> bytes:
    last = b""
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: b\r\nContent-Length: 60000\r\n\r\n")
            sock.settimeout(2)
            try:
                last = sock.recv(65536)
            except TimeoutError:
                last = b"(no answer within 2 s: the server waits for the body)"
    return last


def chunked(port: int, kib: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer ok\r\nTransfer-Encoding: chunked\r\n"
                     b"Connection: close\r\n\r\n")
        block = b"2\r\nab\r\n" * 4096
        try:
            for _ in range(kib * 1024 // 8192):
                sock.sendall(block)
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # refused and closed
        return answer(sock)


def tiny_writes(port: int, kib: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(f"POST / HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer ok\r\nContent-Length: {kib * 1024}\r\n"
                     "Connection: close\r\n\r\n".encode())
        for _ in range(kib * 512):
            sock.sendall(b"ab")
        return answer(sock)


def measure(source: Path, kib: int) -> None:
    server = subprocess.Popen([sys.executable, "-c", SERVER], cwd=source, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(source)})
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        for name, run, per in (("anonymous", lambda: anonymous(port), "per request"),
                               ("chunked", lambda: chunked(port, kib), "per MiB"),
                               ("tiny-writes", lambda: tiny_writes(port, kib), "per MiB")):
            before, started = cpu_seconds(server.pid), time.monotonic()
            got = run()
            used, wall = cpu_seconds(server.pid) - before, time.monotonic() - started
            scale = 1 / ANONYMOUS if name == "anonymous" else 1024 / kib
            status = got.split(b"\r\n", 1)[0].decode(errors="replace")
            print(f"  {name:12} server CPU {used * scale * 1000:9.1f} ms {per:12} (wall {wall:5.1f} s)  {status}")
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, action="append", help="a checkout to serve from (repeatable)")
    parser.add_argument("--kib", type=int, default=256, help="body size of the chunked and tiny-writes clients")
    args = parser.parse_args()
    for source in args.source or [ROOT]:
        print(f"{source.resolve()}:")
        measure(source.resolve(), args.kib)


if __name__ == "__main__":
    main()
