"""Line endings of request heads, checked on the bytes the TLS relay passes to granian.

RFC 9112 (2.2) lets a server take a bare LF for the end of a request line or header line, and
granian's parser (httparse, under hyper) does, with no setting to refuse it. A proxy in front of
Stead that frames the same bytes otherwise (splitting heads only on CRLF) would then see one
request where granian sees two: the opening for request smuggling. So Stead refuses a head with a
bare LF (issue 25, finding 13), which the RFC equally allows.

The head never reaches Python in granian, so the check is made where the bytes still pass through
Python: the relay that terminates TLS in front of granian (every TLS connection goes through it).
`HeadGuard` follows one connection's stream of requests with the framing granian applies to
what it accepts: a head, then a body of Content-Length bytes (granian takes no other framing:
Transfer-Encoding is refused and ends the connection). Bodies are skipped by count, never scanned,
so the check costs one `bytes.find` per line of head. Where granian will refuse the request anyway
(a head beyond `max_head`, Transfer-Encoding, several or malformed Content-Lengths), the guard
stops checking and lets granian answer and close: it never has to agree with granian on a
framing granian does not accept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BARE_LF = "a line of the request head ends in a bare LF: request and header lines end in CRLF (RFC 9112, 2.2)"
"""Why a head is refused (the answer's body)."""


@dataclass
class HeadGuard:
    """One connection's request stream, fed as it arrives (`feed`); see the module."""

    max_head: int
    _head: bytearray = field(default_factory=bytearray, init=False, repr=False)
    _body_left: int = field(default=0, init=False)
    _off: bool = field(default=False, init=False)

    def feed(self, data: bytes) -> str | None:
        """Follow `data`, the next bytes of the stream; why the stream is refused, or None.

        Per head, a few scans in C (`find`, `count`) whatever its number of lines, so that a client
        pipelining tiny requests costs little Python per request; a head arriving in many pieces
        is appended, never copied again, and only its last 3 bytes are looked at again (for an end
        of head across two pieces).
        """
        pos, end = 0, len(data)
        lower = b""  # the chunk lower-cased, made once when a head is first looked at
        announced = -1  # where, at or after pos, a head may announce a body (-1: nowhere; recomputed once passed)
        while pos < end and not self._off:
            if self._body_left:
                taken = min(self._body_left, end - pos)
                self._body_left -= taken
                pos += taken
                continue
            head = self._head
            if not head and announced < pos:  # found once per chunk, again only once pos has passed it
                lower = lower or data.lower()
                announced = _announcement(lower, pos)
            if not head and announced < 0:  # no head from here on announces a body: all of it is heads
                rest = data[pos:]
                if rest.count(b"\n") != rest.count(b"\r\n"):
                    return BARE_LF
                last = rest.rfind(b"\r\n\r\n")
                self._take(rest if last < 0 else rest[last + 4:])  # the head still arriving, if any
                return None
            tail = bytes(head[-3:])
            stop = (tail + data[pos:pos + 3]).find(b"\r\n\r\n") if tail else -1
            if stop >= 0:  # the end of the head straddles the pieces
                piece_end = pos + stop + 4 - len(tail)
            else:
                found = data.find(b"\r\n\r\n", pos)
                piece_end = end if found < 0 else found + 4
            piece = data[pos:piece_end]
            # every LF in the piece follows a CR (the first may follow the head's last byte)
            joined = 1 if piece[:1] == b"\n" and tail[-1:] == b"\r" else 0
            if piece.count(b"\n") - piece.count(b"\r\n") - joined:
                return BARE_LF
            pos = piece_end
            if not head:
                if piece == b"\r\n":  # an empty line before the request line: allowed, ignored
                    continue
                if piece.endswith(b"\r\n\r\n"):  # a whole head in one piece: nothing to keep
                    self._framed(piece)
                    continue
            self._take(piece)
            if self._off or not self._head.endswith(b"\r\n\r\n"):
                return None
            self._framed(bytes(self._head))
            self._head.clear()
        return None

    def _take(self, part: bytes) -> None:
        self._head += part
        if len(self._head) > self.max_head:  # granian answers 431 and closes
            self._off = True
            self._head.clear()

    def _framed(self, head: bytes) -> None:
        """A whole head: how long its body is, as granian will read it."""
        lower = head.lower()
        if b"\ntransfer-encoding" in lower:
            self._off = True  # granian refuses it (411) and closes
            return
        at = lower.find(b"\ncontent-length")
        if at < 0:
            return
        lengths = {line.partition(b":")[2].strip() for line in lower[at + 1:].split(b"\r\n")
                   if line.partition(b":")[0].strip() == b"content-length"}
        if len(lengths) != 1 or not (length := lengths.pop()).isdigit():
            self._off = True  # granian refuses it (400)
            return
        self._body_left = int(length)


def _announcement(lower: bytes, pos: int) -> int:
    """Where, from `pos` on, the lower-cased chunk names a body (Content-Length or Transfer-Encoding), or -1.
    None there: everything from `pos` on is heads, checked whole in two scans however many requests a
    client pipelined into it."""
    found = [at for at in (lower.find(b"content-length", pos), lower.find(b"transfer-encoding", pos)) if at >= 0]
    return min(found) if found else -1
