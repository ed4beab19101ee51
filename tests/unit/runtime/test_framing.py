"""`HeadGuard`: bare LFs in request heads, found however the stream is cut into pieces."""

from __future__ import annotations

import random

import pytest

from operators.runtime.serving.framing import BARE_LF, HeadGuard

GOOD = (b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n" * 20
        + b"\r\nPOST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\nx\ny\n\r\nz\n"  # a body's LFs are its own
        + b"GET /c HTTP/1.1\r\nHost: t\r\n\r\n" * 20)
BAD = (
    b"GET /a HTTP/1.1\nHost: t\r\n\r\n",  # the request line
    b"GET /a HTTP/1.1\r\nHost: t\nX: 1\r\n\r\n",  # a header
    b"GET /a HTTP/1.1\r\nHost: t\r\n\n",  # the end of the head
    b"POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\na\nbGET /c HTTP/1.1\nHost: t\r\n\r\n",  # after a body
    b"GET /a HTTP/1.1\r\n\r\n" * 30 + b"GET /b HTTP/1.1\r\nHost: t\n\r\n",  # far into a pipeline
)


def pieces(data: bytes, rng: random.Random, most: int) -> list[bytes]:
    cut, at = [], 0
    while at < len(data):
        size = rng.randint(1, most)
        cut.append(data[at:at + size])
        at += size
    return cut


@pytest.mark.parametrize("most", [1, 3, 17, 4096])
def test_well_formed_streams_pass_and_bare_lfs_are_refused_however_cut(most: int) -> None:
    rng = random.Random(most)
    for _ in range(50):  # bounded: 50 cuttings of each stream
        guard = HeadGuard(max_head=64 * 1024)
        assert all(guard.feed(piece) is None for piece in pieces(GOOD, rng, most))
        for bad in BAD:
            guard = HeadGuard(max_head=64 * 1024)
            answers = [guard.feed(p) for p in pieces(bad, rng, most)]
            assert BARE_LF in answers, (most, bad)


def test_what_granian_refuses_itself_is_left_to_granian() -> None:
    for head in (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: 1\r\n"
                 b"Content-Length: 2\r\n\r\n", b"GET / HTTP/1.1\r\nX: " + b"y" * 70_000):
        guard = HeadGuard(max_head=64 * 1024)
        assert guard.feed(head) is None
        assert guard.feed(b"\n\n\nGET / HTTP/1.1\nHost: t\n\n") is None  # granian answers and closes
