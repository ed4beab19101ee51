"""bench/soak.py's pure parts: the seeded schedule and the invariants' checks, without a cluster."""

from __future__ import annotations

import itertools

from bench.soak import (
    CLAIM_PREFIX,
    KINDS,
    OPERATOR_NAMESPACE,
    Write,
    lost_events,
    outside_claims,
    rss_slope,
    schedule,
    step_overlaps,
)


def test_the_schedule_is_reproducible_covers_every_kind_and_leaves_the_end_quiet() -> None:
    faults = schedule(7, KINDS, 900, 25, 3)
    assert faults == schedule(7, KINDS, 900, 25, 3)
    assert faults != schedule(8, KINDS, 900, 25, 3)
    assert {f.kind for f in faults[:len(KINDS)]} == set(KINDS)  # every kind once per round
    assert all(a.at + a.hold <= b.at for a, b in itertools.pairwise(faults))
    assert faults[-1].at + faults[-1].hold <= 900 - 25


def test_a_step_started_again_before_its_end_is_an_overlap_one_after_its_end_or_stop_is_not() -> None:
    assert step_overlaps(["start k 1", "end k 1", "start k 2", "stopped k 2", "start k 3", "end k 3"]) == []
    assert step_overlaps(["start k 1", "start j 9", "start k 2", "end k 1"]) == ["k: 2 started while ['1'] ran"]
    assert step_overlaps(["start k", "start k 1"]) == []  # a line cut by a kill is no record


def claim(at: float, replica: str, project: str, verb: str = "update") -> Write:
    return Write(at, replica, verb, "leases", "", OPERATOR_NAMESPACE, CLAIM_PREFIX + project)


def status(at: float, replica: str, project: str) -> Write:
    return Write(at, replica, "patch", "apps", "status", project, "a0")


def test_writes_are_checked_against_the_claim_held_then() -> None:
    writes = [claim(1, "r1", "p"), status(2, "r1", "p"),
              claim(3, "r2", "p"), status(4, "r2", "p"),  # a takeover (r1 paused)
              status(5, "r1", "p"),  # r1 woke and wrote: the violation
              claim(6, "r2", "p"), claim(7, "r1", "p"), status(8, "r1", "p"),  # release, acquire
              claim(9, "r1", "p"), status(10, "r1", "p"),  # r1 restarted: acquired again
              claim(11, "r1", "p", "delete"), status(12, "r1", "p"), status(13, "r2", "q")]
    assert outside_claims(writes, {"p"}) == [status(5, "r1", "p"), status(12, "r1", "p")]


def test_events_and_rss() -> None:
    assert lost_events(4, 4) == 0 and lost_events(4, 6) == 0 and lost_events(5, 3) == 2
    assert rss_slope([(0, 100), (1800, 100), (3600, 100)]) == 0
    assert abs(rss_slope([(0, 100), (1800, 110), (3600, 120)]) - 20) < 1e-9
