"""Fencing: a replica refuses to write once its own membership may have expired.

A lease says "nobody else acts for me until it expires"; it does not stop *me* from acting
after it expired. A process paused past its lease (SIGSTOP, a long GC, a VM freeze) wakes up
believing it still owns its projects while another replica has taken them over: client-go's
leader election has exactly this hole. So every write for an owned project first asks the
fence, which knows our deadline on *our* monotonic clock:

    deadline = (when the renewal that succeeded was *sent*) + leaseDurationSeconds - margin

Sent, not answered: the renewal's renewTime is the moment we sent it, and others count the
lease's life from there; the margin covers the request in flight after the check and the
clock-rate difference between machines. Others declare us dead no earlier than renewTime +
duration (they tolerate skew on top, see `membership.Liveness`), so our fence always closes
first.

The clock is `CLOCK_BOOTTIME` where the platform has it: monotonic, and unlike
`CLOCK_MONOTONIC` it keeps counting while a machine is suspended, which is a pause too.

A lapse ends the *term*: a renewal answered after the deadline, or sent after it, starts a
new incarnation of the member (`membership.MemberLease`), and claims taken under the old
incarnation are void for everybody, us included. Without that a paused replica could renew
its membership on waking up and carry on with claims that were taken over meanwhile.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

Clock = Callable[[], float]


def default_clock() -> float:
    """Seconds on a clock that never goes back and counts suspended time (Linux), else monotonic."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


class FenceExpired(Exception):
    """Our membership may have expired: whatever we were about to write must not be written."""


class Fence:
    """Our own lease deadline, on the local clock. Opened by renewals, never by anything else."""

    def __init__(self, clock: Clock = default_clock) -> None:
        self._clock = clock
        self._deadline = -math.inf
        self.incarnation: str | None = None
        """The membership incarnation the current term belongs to (None before the first renewal)."""

    @property
    def deadline(self) -> float:
        return self._deadline

    def remaining(self) -> float:
        """Seconds left before we must stop writing (negative once past)."""
        return self._deadline - self._clock()

    def valid(self, needed: float = 0.0) -> bool:
        return self.remaining() > needed

    def check(self, needed: float = 0.0) -> None:
        """Raise `FenceExpired` unless more than `needed` seconds remain; call it right before a
        write (with `needed` the write's own timeout where a late write would matter)."""
        left = self.remaining()
        if left <= needed:
            raise FenceExpired(
                f"membership lease of incarnation {self.incarnation} expired {-left:.3f}s ago"
                if left <= 0 else f"membership lease ends in {left:.3f}s, {needed:.3f}s needed")

    def extend(self, incarnation: str, sent_at: float, answered_at: float, duration: float, margin: float) -> bool:
        """Record a renewal of `incarnation` sent at `sent_at` and answered at `answered_at` (both
        on this fence's clock). Returns whether the fence is open afterwards.

        A renewal continues the current term only if it was answered before the old deadline:
        otherwise, for a while, others may have judged us dead and taken our claims, and this
        renewal cannot tell. The caller then renews again under a new incarnation. A renewal of
        a new incarnation always opens the fence (it has no claims yet that others could take).
        """
        continuing = incarnation == self.incarnation
        if continuing and answered_at >= self._deadline:
            self._deadline = -math.inf
            return False
        self.incarnation = incarnation
        self._deadline = sent_at + duration - margin
        return self._deadline > answered_at

    def close(self) -> None:
        """Stop writing now (before releasing the membership on shutdown)."""
        self._deadline = -math.inf
