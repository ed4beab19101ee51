"""Consistent hashing with bounded loads (`BoundedRing`): the bound holds for every member, every
replica computes the same owners, and a change of members moves about the ideal share.

Property-style: member sets, key sets and epsilons are drawn from a seeded `random.Random`, so a
failure names its case and reruns the same."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from operators.runtime.core.ring import DEFAULT_EPSILON, BoundedRing, Ring, balance_of, moved_fraction
from operators.runtime.shard.ring import bucket_keys

SEED = 20261128
BUCKETS = bucket_keys()


def _cases(n: int) -> list[tuple[list[str], list[str], float]]:
    rng = random.Random(SEED)
    cases = []
    for _ in range(n):
        members = [f"stead-{rng.randrange(10_000)}" for _ in range(rng.randint(1, 12))]
        keys = [f"p-{rng.getrandbits(40):x}" for _ in range(rng.randint(1, 3000))]
        cases.append((members, keys, rng.choice([0.01, 0.05, 0.25, 1.0])))
    return cases


@pytest.mark.parametrize(("members", "keys", "epsilon"), _cases(40))
def test_no_member_holds_more_than_one_plus_epsilon_of_the_mean(members: list[str], keys: list[str],
                                                                epsilon: float) -> None:
    ring = BoundedRing(members, keys, epsilon, vnodes=64)
    counts = Counter(ring.owner(k) for k in keys)
    assert set(counts) <= set(members)
    bound = math.ceil((1 + epsilon) * len(set(keys)) / len(set(members)))
    assert ring.capacity == bound
    assert max(counts.values()) <= bound, (counts, bound)


def test_weighted_keys_exceed_the_bound_by_less_than_the_heaviest() -> None:
    rng = random.Random(SEED)
    for _ in range(20):
        members = [f"r{i}" for i in range(rng.randint(2, 6))]
        weights = {key: rng.randint(0, 6) for key in BUCKETS[:1000]}
        ring = BoundedRing(members, weights, 0.05, vnodes=64, weights=weights)
        load = Counter[str]()
        for key, weight in weights.items():
            owner = ring.owner(key)
            assert owner is not None
            load[owner] += weight
        assert max(load.values()) <= ring.capacity + max(weights.values()) - 1


def test_every_replica_computes_the_same_owners_whatever_the_order_it_learnt_them_in() -> None:
    rng = random.Random(SEED)
    members = [f"stead-{i}" for i in range(5)]
    keys = BUCKETS[:2000]
    reference = BoundedRing(members, keys, 0.05).owners(keys)
    for _ in range(5):
        shuffled_members, shuffled_keys = members[:], keys + keys[:100]  # repeats count once
        rng.shuffle(shuffled_members)
        rng.shuffle(shuffled_keys)
        assert BoundedRing(shuffled_members, shuffled_keys, 0.05).owners(keys) == reference


def test_another_process_with_another_hash_seed_computes_the_same_owners() -> None:
    """What each replica runs: its own process, where Python's `hash()` of a string differs."""
    script = ("from operators.runtime.core.ring import BoundedRing\n"
              f"keys = [f'bucket-{{b}}' for b in range({len(BUCKETS)})]\n"
              "ring = BoundedRing(['stead-0', 'stead-1', 'stead-2'], reversed(keys), 0.05)\n"
              "print(','.join(str(ring.owner(k)) for k in keys))\n")
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    here = BoundedRing(["stead-2", "stead-0", "stead-1"], BUCKETS, 0.05)
    assert out.strip().split(",") == [str(here.owner(k)) for k in BUCKETS]


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 2), (3, 4), (10, 11)])
def test_a_change_of_members_moves_about_the_ideal_share_and_the_bound_is_tighter_than_the_ring(
        before: int, after: int) -> None:
    """Over Stead's 4,096 buckets at the default epsilon: within 1.2x of the ideal 1/N of the larger
    set (the bench's target for the plain ring), and the busiest member within the bound where
    the plain ring is not."""
    old = BoundedRing([f"stead-{i}" for i in range(before)], BUCKETS)
    new = BoundedRing([f"stead-{i}" for i in range(after)], BUCKETS)
    ideal = 1 / max(before, after)
    assert moved_fraction(old, new, BUCKETS) <= 1.2 * ideal
    assert balance_of(new, BUCKETS).max_over_mean <= 1 + DEFAULT_EPSILON + after / len(BUCKETS)


def test_the_plain_ring_exceeds_the_bound_the_bounded_ring_keeps() -> None:
    """The cases above would pass with a plain ring's owners only if it were as balanced already."""
    members = [f"stead-{i}" for i in range(3)]
    assert balance_of(Ring(members), BUCKETS).max_over_mean > 1 + DEFAULT_EPSILON + 3 / len(BUCKETS)
    assert balance_of(BoundedRing(members, BUCKETS), BUCKETS).max_over_mean <= 1 + DEFAULT_EPSILON + 3 / len(BUCKETS)


def test_edges_no_members_unknown_keys_and_a_bad_epsilon() -> None:
    assert BoundedRing([], BUCKETS).owner(BUCKETS[0]) is None
    ring = BoundedRing(["a", "b"], BUCKETS[:10])
    assert ring.owner("project-x") == ring.ring.owner("project-x")  # outside the key set: the plain ring
    with pytest.raises(ValueError, match="epsilon must be above 0"):
        BoundedRing(["a"], BUCKETS, 0)
