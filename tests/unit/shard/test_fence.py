"""The fence: our own lease deadline on the local clock, checked before every write."""

from __future__ import annotations

import pytest

from operators.runtime.shard import Fence, FenceExpired, default_clock
from tests.unit.shard.conftest import FakeTime


def test_a_fence_never_renewed_is_closed(clock: FakeTime) -> None:
    fence = Fence(clock.mono)
    assert not fence.valid()
    with pytest.raises(FenceExpired):
        fence.check()


def test_the_deadline_counts_from_when_the_renewal_was_sent(clock: FakeTime) -> None:
    fence = Fence(clock.mono)
    sent = clock.mono()
    clock.advance(0.4)  # the answer took 0.4 s
    assert fence.extend("inc-1", sent, clock.mono(), duration=10, margin=2)
    assert fence.deadline == sent + 8
    assert fence.remaining() == pytest.approx(7.6)
    fence.check()


def test_a_process_paused_past_its_deadline_refuses_to_write_on_waking(clock: FakeTime) -> None:
    fence = Fence(clock.mono)
    fence.extend("inc-1", clock.mono(), clock.mono(), duration=10, margin=2)
    clock.advance(7.99)
    fence.check()
    clock.advance(0.02)  # e.g. SIGSTOP then SIGCONT: the monotonic clock kept counting
    with pytest.raises(FenceExpired, match="expired"):
        fence.check()


def test_check_can_ask_for_time_left_for_the_write_itself(clock: FakeTime) -> None:
    fence = Fence(clock.mono)
    fence.extend("inc-1", clock.mono(), clock.mono(), duration=10, margin=2)
    clock.advance(6)
    fence.check(needed=1.5)
    with pytest.raises(FenceExpired, match="needed"):
        fence.check(needed=2.5)


def test_a_renewal_answered_after_the_deadline_does_not_continue_the_term(clock: FakeTime) -> None:
    """Others may have judged us dead while the renewal was in flight: the term ends; only a
    new incarnation opens the fence again (its claims start from nothing)."""
    fence = Fence(clock.mono)
    fence.extend("inc-1", clock.mono(), clock.mono(), duration=10, margin=2)
    clock.advance(7)
    sent = clock.mono()
    clock.advance(1.5)  # answered past the deadline (8)
    assert not fence.extend("inc-1", sent, clock.mono(), duration=10, margin=2)
    assert not fence.valid()
    sent = clock.mono()
    assert fence.extend("inc-2", sent, clock.mono(), duration=10, margin=2)
    assert fence.incarnation == "inc-2"


def test_close_stops_writes_at_once(clock: FakeTime) -> None:
    fence = Fence(clock.mono)
    fence.extend("inc-1", clock.mono(), clock.mono(), duration=10, margin=2)
    fence.close()
    with pytest.raises(FenceExpired):
        fence.check()


def test_the_default_clock_never_goes_back() -> None:
    readings = [default_clock() for _ in range(1000)]
    assert readings == sorted(readings)
