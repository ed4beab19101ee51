"""What checking request heads for bare LFs (issue 25, finding 13) costs the TLS relay, per MiB.

The relay in front of granian (`operators.runtime.serving.relay`) already decrypts every byte a client
sends; `HeadGuard` (`operators.runtime.serving.framing`) now also follows the requests in them. Printed,
for three streams of 16 KiB pieces (the relay reads one TLS record at a time): the guard's CPU per MiB,
beside the AES-GCM decryption of the same bytes through `ssl.MemoryBIO` (the relay's own per-byte work,
measured here in the same process), their ratio, and the guard's CPU per request (an API request costs
the operator about a millisecond: `bench/config_lookup.py`):

- ``pipelined-gets``: one client pipelining 37-byte GET heads (the worst case: a head per 37 bytes);
- ``browser-heads``: 600-byte heads, as browsers and kubectl send;
- ``bodies``: POSTs with 64 KiB bodies (a head per 64 KiB: the bodies are skipped by count).

    .venv/bin/python bench/head_guard.py [--mib 16]
"""

from __future__ import annotations

import argparse
import contextlib
import ssl
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from operators.runtime.serving.certs import make_ca, make_leaf
from operators.runtime.serving.framing import HeadGuard

PIECE = 16 * 1024


def streams(mib: int) -> dict[str, bytes]:
    size = mib << 20
    browser = (b"GET /api/v1/config/environments/prod/nodes/node-17/resources/astute/values?effective HTTP/1.1\r\n"
               b"Host: stead-config.stead-system.svc\r\nUser-Agent: kubectl/v1.34.4 (linux/amd64)\r\n"
               + b"Accept: application/json\r\nAuthorization: Bearer " + b"e" * 400 + b"\r\n\r\n")
    body = b"x" * (64 << 10)
    post = b"POST /api/v1/x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    return {name: (unit * (size // len(unit) + 1))[:size] for name, unit in (
        ("pipelined-gets", b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n"), ("browser-heads", browser), ("bodies", post))}


def guard_seconds(data: bytes) -> float:
    guard = HeadGuard(max_head=64 * 1024)
    start = time.process_time()
    for at in range(0, len(data), PIECE):
        assert guard.feed(data[at:at + PIECE]) is None
    return time.process_time() - start


def tls_seconds(data: bytes, work: Path) -> float:
    """Decrypt `data` as the relay does: a client SSLObject encrypts, the server's reads 16 KiB at a time."""
    leaf = make_leaf(make_ca("bench-ca"), "server", hosts=["127.0.0.1"])
    (work / "tls.crt").write_bytes(leaf.cert_pem)
    (work / "tls.key").write_bytes(leaf.key_pem)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(work / "tls.crt", work / "tls.key")
    client_ctx = ssl.create_default_context()
    client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):  # the handshake, in memory
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    records = []
    for at in range(0, len(data), PIECE):
        client.write(data[at:at + PIECE])
        records.append(c_out.read())
    start = time.process_time()
    for record in records:
        s_in.write(record)
        server.read(PIECE)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        print(f"{'stream':<16} {'guard ms/MiB':>13} {'TLS ms/MiB':>11} {'guard/TLS':>10} {'guard us/request':>17}")
        for name, data in streams(args.mib).items():
            guard = min(guard_seconds(data) for _ in range(3)) * 1000 / args.mib
            tls = min(tls_seconds(data, Path(work)) for _ in range(3)) * 1000 / args.mib
            heads = data.count(b" HTTP/1.1\r\n") / args.mib
            print(f"{name:<16} {guard:>13.2f} {tls:>11.2f} {guard / tls:>10.2f} {guard * 1000 / heads:>17.2f}")


if __name__ == "__main__":
    main()
