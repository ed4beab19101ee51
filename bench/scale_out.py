"""Scale-out: how Stead's replicas split projects (issue 17): the ring's simulation, and (`--live`)
1, 2 and 3 `stead operator --sharding leases` processes on one local control plane.

The live part, on fresh objects for each N: seconds until every Environment is Ready, operator CPU
per object (total and per replica, /proc), RSS and Environment events received per replica (the
`stead_events_seen_total` metric: ~all of them for every replica while the watches are Kopf's,
unfiltered), the claims each replica took and N / (max/mean), and with 3 replicas the adoption
time after kill -9 of one. The first part is a simulation of the ring
(`operators.runtime.shard.Ring`: xxh3_64, `--vnodes` virtual nodes per replica) at sizes these
machines cannot run:

- **balance**: projects per replica, as max/mean (1.0 is a perfect split) and N / (max/mean),
  the replicas' worth of parallelism the split allows (the busiest replica finishes last);
- **moved fraction** on scale-up (100 -> 101 and 3 -> 4 replicas) and scale-down (100 -> 99),
  against the ideal 1/N' (each move is a hand-over: drain, release, acquire, re-list), and the
  check that nothing moves between replicas that stay (a consistent ring's promise); and 2 -> 3
  over the very projects and replica ids of `tests/e2e/test_scale_out.py`'s live test, under the
  same definition (projects whose claim changed holder / projects), so the ring's figure and the
  live one can be compared;
- the same balance for 1, 2 and 3 replicas over 100 projects (the e2e tests' scale: with few
  projects per replica the noise of small numbers dominates, whatever the ring);
- what a replica receives from one label-selected watch per kind, with the assignment label
  `stead.dev/shard-bucket` = xxh3(project) mod B: placing projects on the ring by name spreads
  each replica's projects over most buckets (it receives nearly everything), placing them by
  bucket gives ~1/N at the price of coarser balance; and how long the selector gets;
- **bounded loads** (`--placement bounded`, issue 33): balance and moved fraction for 2 -> 3 and
  3 -> 2 of the plain ring beside consistent hashing with bounded loads (`BoundedRing`), each
  placing projects by name (the issue's literal case: it needs the whole project set, which no
  replica has) and by bucket (what the replicas run: the 4,096 buckets, a set every replica knows),
  against the ideal 1/N; then epsilon against balance and moves at 3, 10 and 100 replicas;
- the ring's cost: build time, and lookups per second (bisect over N x vnodes points);
- the API write cost of membership and claims (from `claims.py`'s design: only the membership
  Lease is renewed; claims are written on hand-over only), against renewing one Lease per project.

Targets checked (exit status 1 when one is missed): moved fraction within 1.2x of the ideal, and
nothing moved between staying replicas (plain ring); bounded by bucket: no replica over the bound
in buckets, and moved fraction within 1.2x of the ideal for 2 -> 3 and 3 -> 2.

    .venv/bin/python bench/scale_out.py [--projects 10000] [--replicas 100] [--vnodes 256]
                                        [--compare-vnodes 64,128,256,512] [--lease 15]
                                        [--epsilon 0.05] [--compare-epsilons 0.01,0.02,0.05,0.1,0.25]

`--claims N` (instead of all the above): the API requests of the coordinators alone, by verb, per
minute and per replica, from the API server's audit log (every request logged, leases included),
with N projects' claims on one local control plane, for 1 and 3 replicas, this tree's code beside
the code of `--stead-pythonpath` (e.g. a worktree of main) in one run. Each replica is a process
running `ShardMember` (membership, claims, passes every min(lease/3, 2 s)) over a fixed list of N
project names: there are no objects, the coordinator is given the projects (the claims' cost does
not depend on them). Counted over `--claims-window` seconds once every claim is held and nothing
moves; CPU seconds per minute per replica from /proc beside them.

    flock /tmp/stead-bench.lock .venv/bin/python bench/scale_out.py --claims 10000 \
        --stead-pythonpath /work/wt/old [--claims-window 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from operators.runtime.core.ring import balance_of
from operators.runtime.shard import (
    BUCKET_LABEL,
    DEFAULT_DURATION,
    DEFAULT_EPSILON,
    DEFAULT_VNODES,
    BoundedRing,
    Placement,
    Ring,
    bucket_keys,
    bucket_of,
    bucket_selector,
    buckets_of,
    by_bucket,
    moved_fraction,
)

MOVE_TOLERANCE = 1.2
E2E_PROJECTS = [f"t-so-scale-{i:03d}" for i in range(100)]
"""The projects of tests/e2e/test_scale_out.py's 2 -> 3 test (`grown_projects`), and its replica ids."""
E2E_REPLICAS = ("r0", "r1", "r2")


def replicas(n: int) -> list[str]:
    return [f"stead-{i}" for i in range(n)]  # a StatefulSet's pod names


def projects(n: int) -> list[str]:
    return [f"project-{i}" for i in range(n)]


def balance_line(label: str, ring: Ring, keys: Sequence[str]) -> str:
    balance = ring.balance(keys)
    counts = sorted(balance.counts.values())
    n = len(counts)
    return (f"{label:<34} {n:>5} {len(keys):>8} {counts[0]:>6} {balance.mean:>8.1f} {counts[-1]:>6} "
            f"{balance.max_over_mean:>8.3f} {balance.effective_replicas:>9.2f}")


def move(label: str, before: Ring, after: Ring, keys: Sequence[str]) -> tuple[str, bool]:
    """The moved fraction against the ideal, and whether only the joining/leaving replica's
    projects moved."""
    fraction = moved_fraction(before, after, keys)
    joined, left = after.members - before.members, before.members - after.members
    changed = after.members ^ before.members
    consistent = all(before.owner(k) == after.owner(k) or {before.owner(k), after.owner(k)} & changed for k in keys)
    ideal = 1 / max(len(after.members), len(before.members))
    ratio = fraction / ideal
    ok = consistent and 1 / MOVE_TOLERANCE <= ratio <= MOVE_TOLERANCE
    what = f"+{','.join(sorted(joined))}" if joined else f"-{','.join(sorted(left))}"
    line = (f"{label:<22} {what:<12} {fraction:>8.4f} {ideal:>8.4f} {ratio:>7.3f}  "
            f"{'yes' if consistent else 'NO':<10} {'ok' if ok else 'MISSED'}")
    return line, ok


def e2e_moves(vnodes: int) -> list[str]:
    """The ring's moved fraction for the e2e test's 2 -> 3, placed by bucket (`--sharding leases`
    with Stead's bucket-selected watches) and by name (before them): what the live figure equals."""
    two, three = Ring(E2E_REPLICAS[:2], vnodes), Ring(E2E_REPLICAS, vnodes)
    lines = []
    for label, key in (("placed by bucket", by_bucket()), ("placed by name", None)):
        place: Callable[[str], str] = key or (lambda p: p)
        moved = [p for p in E2E_PROJECTS if two.owner(place(p)) != three.owner(place(p))]
        to_new = all(three.owner(place(p)) == E2E_REPLICAS[2] for p in moved)
        fraction = len(moved) / len(E2E_PROJECTS)
        lines.append(f"{label:<17} moved {len(moved):>3}/{len(E2E_PROJECTS)} = {fraction:.3f} "
                     f"(ideal 0.333, ratio {fraction * 3:.3f}); all to {E2E_REPLICAS[2]}: {'yes' if to_new else 'NO'}")
    return lines


def selectivity(keys: Sequence[str], n: int, buckets: int, vnodes: int) -> str:
    """What one label selector per replica receives, placed by name and placed by bucket."""
    ring, grown, key = Ring(replicas(n), vnodes), Ring(replicas(n + 1), vnodes), by_bucket(buckets)
    per_bucket = Counter(bucket_of(k, buckets) for k in keys)
    watched: dict[str | None, set[int]] = {}
    for k in keys:
        watched.setdefault(ring.owner(k), set()).add(bucket_of(k, buckets))
    by_name = max(sum(per_bucket[b] for b in bs) for bs in watched.values()) / len(keys)
    placed = Counter(ring.owner(key(k)) for k in keys)
    mean = len(keys) / n
    by_bucket_share = max(placed.values()) / len(keys)
    moved = sum(1 for k in keys if ring.owner(key(k)) != grown.owner(key(k))) / len(keys) * (n + 1)
    own_buckets: dict[str | None, set[int]] = {}
    for b in range(buckets):
        own_buckets.setdefault(ring.owner(f"bucket-{b}"), set()).add(b)
    longest = max(len(bucket_selector(bs)) for bs in own_buckets.values())
    return (f"{buckets:>5} {n:>4} {by_name:>8.3f} {by_bucket_share:>10.3f} {1 / n:>6.3f}  "
            f"{max(placed.values()) / mean:>19.3f} {n / (max(placed.values()) / mean):>8.2f} {moved:>11.3f} "
            f"{longest:>14,}")


class Keyed:
    """A placement of projects through a key (`by_bucket`): the project's owner is its key's."""

    def __init__(self, inner: Placement, key: Callable[[str], str]) -> None:
        self.inner, self.key = inner, key

    @property
    def members(self) -> frozenset[str]:
        return self.inner.members

    def owner(self, project: str) -> str | None:
        return self.inner.owner(self.key(project))


def bounded_rows(keys: Sequence[str], epsilon: float, vnodes: int) -> tuple[list[str], bool]:
    """Plain ring vs bounded loads, by name and by bucket, for 2 -> 3 and 3 -> 2 (`keys`: the projects)."""
    bucket, all_buckets = by_bucket(), bucket_keys()
    built: dict[tuple[str, int], Placement] = {}

    def placed(how: str, n: int) -> Placement:
        if (how, n) not in built:
            members = replicas(n)
            built[how, n] = {
                "ring, by name": lambda: Ring(members, vnodes),
                "bounded, by name": lambda: BoundedRing(members, keys, epsilon, vnodes),
                "ring, by bucket": lambda: Keyed(Ring(members, vnodes), bucket),
                "bounded, by bucket": lambda: Keyed(BoundedRing(members, all_buckets, epsilon, vnodes), bucket),
            }[how]()
        return built[how, n]

    ok = True
    lines = [f"{'':<20} {'change':<7} {'max/mean before':>15} {'after':>6} {'moved':>7} {'ideal':>6} {'ratio':>6}  "
             f"{'buckets max/bound':>17}"]
    for how in ("ring, by name", "bounded, by name", "ring, by bucket", "bounded, by bucket"):
        for before, after in ((2, 3), (3, 2)):
            old, new = placed(how, before), placed(how, after)
            fraction = moved_fraction(old, new, keys)
            ideal = 1 / max(before, after)
            bound = ""
            if how.endswith("by bucket"):  # the unit the replicas place: buckets, against the bound
                inner = new.inner if isinstance(new, Keyed) else new
                most = max(len(buckets_of(inner, m)) for m in inner.members)
                cap = BoundedRing(inner.members, all_buckets, epsilon, vnodes).capacity
                bound = f"{most:>7}/{cap:<6}"
                if how.startswith("bounded"):
                    ok &= most <= cap and fraction / ideal <= MOVE_TOLERANCE
            lines.append(f"{how:<20} {before} -> {after} {balance_of(old, keys).max_over_mean:>15.3f} "
                         f"{balance_of(new, keys).max_over_mean:>6.3f} {fraction:>7.4f} {ideal:>6.3f} "
                         f"{fraction / ideal:>6.3f}  {bound:>17}")
    return lines, ok


def epsilon_rows(keys: Sequence[str], epsilons: Sequence[float], vnodes: int) -> list[str]:
    """Bounded by bucket: epsilon against the busiest replica's projects and the moves on scale-up."""
    bucket, all_buckets = by_bucket(), bucket_keys()
    sizes = (3, 10, 100)
    lines = [f"{'epsilon':>8} " + " ".join(f"{f'max/mean @{n}':>13} {f'moved {n}->{n + 1}/ideal':>20}" for n in sizes)]
    layouts: list[tuple[str, Callable[[int], Placement]]] = [
        (f"{e:g}", lambda n, e=e: Keyed(BoundedRing(replicas(n), all_buckets, e, vnodes), bucket)) for e in epsilons]
    layouts.append(("ring", lambda n: Keyed(Ring(replicas(n), vnodes), bucket)))
    for label, build in layouts:
        cells = []
        for n in sizes:
            small, grown = build(n), build(n + 1)
            cells.append(f"{balance_of(small, keys).max_over_mean:>13.3f} "
                         f"{moved_fraction(small, grown, keys) * (n + 1):>20.3f}")
        lines.append(f"{label:>8} " + " ".join(cells))
    return lines


def cost(keys: Sequence[str], members: int, vnodes: int) -> str:
    started = time.perf_counter()
    ring = Ring(replicas(members), vnodes)
    built = time.perf_counter() - started
    started = time.perf_counter()
    for key in keys:
        ring.owner(key)
    per_lookup = (time.perf_counter() - started) / len(keys)
    return (f"ring of {members} replicas x {vnodes} points: built in {built * 1e3:.1f} ms, "
            f"{per_lookup * 1e6:.2f} us per lookup ({1 / per_lookup:,.0f} lookups/s)")


def write_costs(n_projects: int, lease: int) -> list[str]:
    per_minute = 60 / (lease / 3)
    lines = [f"membership renewals (every lease/3 = {lease / 3:g} s): {per_minute:g} writes/min per replica"]
    for r in (1, 3, 100):
        plural = "s" if r > 1 else " "
        lines.append(f"  {r:>3} replica{plural}: {r * per_minute:>8,.0f} writes/min, whatever the number of projects")
    lines.append(f"claims, renewed with membership only (Stead): 0 writes/min in steady state; "
                 f"scale 2 -> 3 over {n_projects:,} projects: ~{2 * n_projects / 3:,.0f} writes once "
                 f"(release + acquire per moved project, ideal share 1/3)")
    lines.append(f"claims renewed one Lease per project (rejected): {n_projects * per_minute:,.0f} writes/min "
                 f"({n_projects * per_minute / 60:,.0f}/s) for {n_projects:,} projects")
    interval = min(lease / 3, 2.0)
    claim_bytes = len(json.dumps(_claim_example()))
    lines.append(f"reads (ShardMember, a pass every {interval:g} s): 2 LISTs per pass per replica, "
                 f"{60 / interval:g} LISTs/min; the claims LIST carries every claim: {n_projects:,} x "
                 f"~{claim_bytes} B = {n_projects * claim_bytes / 1e6:.1f} MB a pass (a WATCH of the claims "
                 f"instead: only changes)")
    return lines


def _claim_example() -> dict[str, object]:
    """A claim Lease as the API server returns it (managedFields omitted, as with a GET)."""
    return {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": {
        "name": "stead-project-team-1234", "namespace": "stead-system", "uid": "0d0b6c8e-3c55-4f53-9c6c-2b0c9f3e8a11",
        "resourceVersion": "1234567", "creationTimestamp": "2026-11-25T10:00:00Z",
        "labels": {"app.kubernetes.io/name": "stead", "stead.dev/role": "claim", "stead.dev/project": "team-1234"},
        "annotations": {"stead.dev/holder-incarnation": "0123456789abcdef"}},
        "spec": {"holderIdentity": "stead-2", "leaseTransitions": 3, "acquireTime": "2026-11-25T10:00:00.000000Z",
                 "renewTime": "2026-11-25T10:00:00.000000Z"}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--small-projects", type=int, default=100, help="projects for the 1/2/3-replica lines")
    parser.add_argument("--vnodes", type=int, default=DEFAULT_VNODES)
    parser.add_argument("--compare-vnodes", default="64,128,256,512",
                        help="virtual node counts for the comparison table ('' to skip)")
    parser.add_argument("--lease", type=int, default=DEFAULT_DURATION, help="membership lease seconds")
    parser.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON,
                        help="bounded loads: the slack over the mean (--placement-epsilon)")
    parser.add_argument("--compare-epsilons", default="0.01,0.02,0.05,0.1,0.25",
                        help="epsilons for the comparison table ('' to skip)")
    parser.add_argument("--live", action="store_true",
                        help="also run 1, 2 and 3 operator processes on a local control plane (minutes)")
    parser.add_argument("--live-projects", type=int, default=100)
    parser.add_argument("--live-per-project", type=int, default=3)
    parser.add_argument("--claims", type=int, default=0,
                        help="only the claims' requests per minute with this many projects (see above)")
    parser.add_argument("--claims-window", type=float, default=60.0, help="seconds counted per configuration")
    parser.add_argument("--stead-pythonpath", help="the code to compare with (--claims): first on its PYTHONPATH")
    parser.add_argument("--claims-replica", help=argparse.SUPPRESS)  # a replica's process (--claims)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--projects-file", help=argparse.SUPPRESS)
    parser.add_argument("--agent", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.claims_replica:
        asyncio.run(_claims_replica(Path(args.kubeconfig), args.claims_replica,
                                    Path(args.projects_file).read_text().split(), args.lease, args.agent))
        return 0
    if args.claims:
        print(f"== claims: API requests per minute per replica, {args.claims:,} projects, lease {args.lease} s, "
              f"{args.claims_window:g} s counted ==")
        for line in claims_requests(args.claims, args.claims_window, args.lease, args.stead_pythonpath):
            print(line, flush=True)
        return 0
    keys, small = projects(args.projects), projects(args.small_projects)
    big, v = args.replicas, args.vnodes
    ok = True

    print(f"== ring balance (xxh3_64, {v} virtual nodes per replica) ==")
    print(f"{'':<34} {'N':>5} {'projects':>8} {'min':>6} {'mean':>8} {'max':>6} {'max/mean':>8} "
          f"{'N/(m/m)':>9}")
    print(balance_line(f"{big} replicas", Ring(replicas(big), v), keys))
    print(balance_line(f"{big + 1} replicas", Ring(replicas(big + 1), v), keys))
    for n in (3, 4):
        print(balance_line(f"{n} replicas", Ring(replicas(n), v), keys))
    for n in (1, 2, 3):
        print(balance_line(f"{n} replica{'s' if n > 1 else ''}, {args.small_projects} projects", Ring(replicas(n), v),
                           small))

    print(f"\n== moved fraction ({args.projects:,} projects; ideal 1/N of the larger ring; "
          f"target within {MOVE_TOLERANCE}x) ==")
    print(f"{'':<22} {'change':<12} {'moved':>8} {'ideal':>8} {'ratio':>7}  {'only its':<10} target")
    for label, before, after in [
        (f"scale-up {big} -> {big + 1}", replicas(big), replicas(big + 1)),
        (f"scale-down {big} -> {big - 1}", replicas(big), replicas(big - 1)),
        ("scale-up 3 -> 4", replicas(3), replicas(4)),
        ("scale-up 2 -> 3", replicas(2), replicas(3)),
        ("scale-down 3 -> 2", replicas(3), replicas(2)),
    ]:
        line, good = move(label, Ring(before, v), Ring(after, v), keys)
        ok &= good
        print(line)

    print(f"\n== 2 -> 3 as tests/e2e/test_scale_out.py measures it live ({len(E2E_PROJECTS)} projects "
          f"{E2E_PROJECTS[0]}..{E2E_PROJECTS[-1]}, replicas {', '.join(E2E_REPLICAS)}) ==")
    print("moved fraction = projects whose claim's holder differs between the claims read with 2 replicas")
    print("settled and with 3 settled, over all the projects (each is one hand-over: drain, release, acquire)")
    for line in e2e_moves(v):
        print(line)

    if args.compare_vnodes:
        print(f"\n== virtual nodes per replica ({args.projects:,} projects) ==")
        print(f"{'vnodes':>6} {'max/mean @3':>12} {'max/mean @' + str(big):>14} {'moved 3->4 / ideal':>19} "
              f"{'moved ' + str(big) + '->' + str(big + 1) + ' / ideal':>22}")
        for vn in (int(x) for x in args.compare_vnodes.split(",")):
            three, many = Ring(replicas(3), vn), Ring(replicas(big), vn)
            m34 = moved_fraction(three, Ring(replicas(4), vn), keys) * 4
            mbig = moved_fraction(many, Ring(replicas(big + 1), vn), keys) * (big + 1)
            print(f"{vn:>6} {three.balance(keys).max_over_mean:>12.3f} {many.balance(keys).max_over_mean:>14.3f} "
                  f"{m34:>19.3f} {mbig:>22.3f}")
        print(f"(the floor for {args.projects // big} projects per replica: Poisson noise alone gives max/mean "
              f"~{1 + 2.5 / (args.projects / big) ** 0.5:.2f} over {big} replicas)")

    print(f"\n== watches filtered by the API server: label {BUCKET_LABEL} = xxh3(project) mod B "
          f"({args.projects:,} projects) ==")
    print("events received by the busiest replica, as a share of all projects' events (ideal 1/N), when")
    print("the ring places projects by name vs by bucket (`by_bucket`: whole buckets move together)")
    print(f"{'B':>5} {'N':>4} {'by name':>8} {'by bucket':>10} {'ideal':>6}  {'by bucket: max/mean':>19} "
          f"{'N/(m/m)':>8} {'moved/ideal':>11} {'selector chars':>14}")
    for buckets in (1024, 4096):
        for n in (3, big):
            print(selectivity(keys, n, buckets, v))

    print(f"\n== bounded loads (--placement bounded, epsilon {args.epsilon:g}) vs the plain ring: "
          f"{args.projects:,} projects ==")
    print("max/mean: projects of the busiest replica over the mean (before and after the change); moved: the")
    print("fraction of projects whose owner changes (each a hand-over); ideal: 1/N of the larger set; buckets:")
    print("the busiest replica's buckets against ceil((1 + epsilon) x 4096 / N), the unit the replicas place")
    lines, good = bounded_rows(keys, args.epsilon, v)
    ok &= good
    for line in lines:
        print(line)
    if args.compare_epsilons:
        print(f"\n== bounded by bucket: epsilon against balance and moves ({args.projects:,} projects) ==")
        for line in epsilon_rows(keys, [float(x) for x in args.compare_epsilons.split(",")], v):
            print(line)

    print("\n== cost ==")
    print(cost(keys, big, v))
    print(cost(keys, 3, v))
    for n in (3, big):
        started = time.perf_counter()
        BoundedRing(replicas(n), bucket_keys(), args.epsilon, v)
        print(f"bounded ring of {n} replicas over {len(bucket_keys()):,} buckets: built in "
              f"{(time.perf_counter() - started) * 1e3:.1f} ms (once per change of members)")
    for line in write_costs(args.projects, args.lease):
        print(line)

    if args.live:
        print(f"\n== live: 1, 2 and 3 replicas (--sharding leases) on one local control plane, "
              f"{args.live_projects} projects x {args.live_per_project} Environments ==")
        for line in live(args.live_projects, args.live_per_project):
            print(line)
    else:
        print("\nlive replicas (1/2/3 processes on one API server): skipped (--live)")
    print("\nall targets met" if ok else "\nTARGET MISSED")
    return 0 if ok else 1


# --- live: 1, 2 and 3 `stead operator --sharding leases` processes on one API server ------------------

LIVE_LEASE = 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _metric(port: int, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@dataclass
class _Replica:
    name: str
    process: subprocess.Popen[bytes]
    health: int


def _start(kubeconfig: Path, work: Path, name: str, webhook: bool) -> _Replica:
    health = _free_port()
    argv = [str(Path(sys.executable).parent / "stead"), "operator", "--kubeconfig", str(kubeconfig),
            "--store", str(work / name / "store"), "--health-port", str(health), "--replica-id", name,
            "--sharding", "leases", "--lease-seconds", str(LIVE_LEASE), "--config-api-port", "0",
            "--pipelines-state", str(work / "runs"), "--no-shipped-objects", "--install-crds",
            *(["--webhook-port", str(_free_port())] if webhook else ["--webhook", "off"])]
    (work / name).mkdir(parents=True, exist_ok=True)
    with (work / f"{name}.log").open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "STEAD_HOME": str(work / name)})
    replica = _Replica(name, process, health)
    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited {process.returncode}: see {work / f'{name}.log'}")
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2).status == 200:
                return replica
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not ready: see {work / f'{name}.log'}")
        time.sleep(0.2)


def _holders(kubectl: Callable[..., str]) -> dict[str, str]:
    out = json.loads(kubectl("get", "leases", "-n", "stead-system", "-l", "stead.dev/role=claim", "-o", "json"))
    return {lease["metadata"]["labels"]["stead.dev/project"]: lease["spec"].get("holderIdentity") or ""
            for lease in out["items"]}


def live(n_projects: int, per_project: int) -> list[str]:
    """1, 2 and 3 replicas on one local control plane, each run on fresh objects: time to all Ready,
    CPU per object (total and per replica), RSS and events received per replica, the balance of the
    claims; with 3, adoption after kill -9 of one replica."""
    from operators.cluster import LocalControlPlane, ensure_binaries

    binaries = ensure_binaries(progress=lambda line: print(line, file=sys.stderr))
    home = Path(tempfile.mkdtemp(prefix="stead-scale-out-"))
    plane = LocalControlPlane(home / "plane", apiserver_port=_free_port(), etcd_client_port=_free_port(),
                              etcd_peer_port=_free_port(), controller_manager_port=_free_port(), binaries=binaries)
    info = plane.up()

    def kubectl(*args: str, input: str | None = None) -> str:
        return subprocess.run([str(binaries.kubectl), "--kubeconfig", str(info.kubeconfig), *args], input=input,
                              capture_output=True, text=True, check=True, timeout=300).stdout

    lines = [f"{'N':>2} {'objects':>7} {'s to Ready':>10} {'obj/s':>6} {'CPU ms/obj':>10} {'per replica ms/obj':>24} "
             f"{'RSS MiB':>16} {'events seen':>20} {'claims':>12} {'N/(m/m)':>7}"]
    started: list[_Replica] = []
    try:
        for n in (1, 2, 3):
            work = home / f"run-{n}"
            (work / "runs").mkdir(parents=True)
            started = [_start(info.kubeconfig, work, f"r{i}", webhook=i == 0) for i in range(n)]
            time.sleep(LIVE_LEASE / 3 * 2)  # every member seen by the others before the objects come
            names = [f"so{n}-{i}" for i in range(n_projects)]
            kubectl("apply", "-f", "-", input="\n---\n".join(
                json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}) for ns in names))
            cpu0 = {r.name: _cpu(r.process.pid) for r in started}
            seen0 = {r.name: _metric(r.health, "stead_events_seen_total", kind="Environment") for r in started}
            began = time.monotonic()
            docs = [{"apiVersion": "stead.dev/v1alpha1", "kind": "Environment",
                     "metadata": {"name": f"env-{j}", "namespace": ns},
                     "spec": {"release": "mitaka-9.0", "nodes": [{"name": "n1", "roles": ["controller"]}]}}
                    for ns in names for j in range(per_project)]
            kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
            total = len(docs)
            while True:
                items = json.loads(kubectl("get", "environments", "-A", "-o", "json"))["items"]
                done = sum(1 for o in items if o["metadata"]["namespace"].startswith(f"so{n}-")
                           and any(c.get("type") == "Ready" and c.get("status") == "True"
                                   for c in (o.get("status") or {}).get("conditions") or []))
                if done == total or time.monotonic() - began > 600:
                    break
                time.sleep(0.5)
            took = time.monotonic() - began
            cpu = {r.name: _cpu(r.process.pid) - cpu0[r.name] for r in started}
            seen = {r.name: _metric(r.health, "stead_events_seen_total", kind="Environment") - seen0[r.name]
                    for r in started}
            holders = _holders(kubectl)
            counts = Counter(holders.get(ns, "") for ns in names)
            mean = n_projects / n
            effective = n / (max(counts[r.name] for r in started) / mean)
            lines.append(
                f"{n:>2} {total:>7} {took:>10.1f} {total / took:>6.1f} {sum(cpu.values()) / total * 1000:>10.2f} "
                f"{' '.join(f'{cpu[r.name] / total * 1000:.2f}' for r in started):>24} "
                f"{' '.join(f'{_rss_mib(r.process.pid):.0f}' for r in started):>16} "
                f"{' '.join(f'{seen[r.name]:.0f}' for r in started):>20} "
                f"{' '.join(str(counts[r.name]) for r in started):>12} {effective:>7.2f}"
                + ("" if done == total else f"  ({done} Ready only)"))
            if n == 3:
                victim = started[1]
                mine = [p for p in names if holders.get(p) == victim.name]
                victim.process.kill()
                killed = time.monotonic()
                victim.process.wait()
                while True:
                    now = _holders(kubectl)
                    if all(now.get(p) not in ("", victim.name) for p in mine):
                        break
                    if time.monotonic() - killed > 60:
                        break
                    time.sleep(0.1)
                lines.append(f"kill -9 of {victim.name} ({len(mine)} projects): adopted by the others in "
                             f"{time.monotonic() - killed:.1f} s (lease {LIVE_LEASE} s; target <= lease + 5 s)")
            # this run's projects go before the next run starts: else its replicas would adopt them
            # (hundreds of projects) inside their own timed interval
            kubectl("delete", "namespace", *names, "--wait=true", "--timeout=120s")
            for replica in started:
                if replica.process.poll() is None:
                    replica.process.send_signal(signal.SIGTERM)
            for replica in started:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    replica.process.wait(timeout=30)
            started = []
    finally:
        for replica in started:
            if replica.process.poll() is None:
                replica.process.kill()
        plane.down()
        shutil.rmtree(home, ignore_errors=True)
    return lines


# --- claims: the coordinators' requests, from the audit log ----------------------------------------

CLAIMS_NS = "stead-system"
VERBS = ("list", "watch", "get", "create", "update", "patch", "delete")
FULL_AUDIT = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
  - level: Metadata
"""
"""Every request, leases' reads included (Stead's own policy leaves those out: they are most requests)."""


async def _claims_replica(kubeconfig: Path, name: str, names: list[str], lease: int, agent: str) -> None:
    """One replica's coordinator, with whatever code is first on PYTHONPATH: the claims' watch when
    that code has one (`ClaimCache`), until SIGTERM (a hand-over) or SIGKILL."""
    from operators.runtime import shard
    from operators.runtime.kube.client import KubeClient, load_access

    async def listing() -> list[str]:
        return names

    access = load_access(kubeconfig)
    async with KubeClient(access, user_agent=agent) as kube, \
            KubeClient(access, concurrency=0, user_agent=agent) as watch_kube:
        extra: dict[str, object] = {}
        cache = getattr(shard, "ClaimCache", None)
        if cache is not None:
            extra["claims"] = cache.watching(watch_kube, CLAIMS_NS)
        member = shard.ShardMember(kube, CLAIMS_NS, name, listing, duration=lease, **extra)  # type: ignore[arg-type]
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await member.run(stop)


def claims_requests(n_projects: int, window: float, lease: int, old_tree: str | None) -> list[str]:
    """Old and new code, 1 and 3 replicas, one after the other on one plane (see the module's docstring)."""
    from operators.cluster import LocalControlPlane, controlplane, ensure_binaries
    from operators.runtime.kube.client import KubeClient, load_access

    setattr(controlplane, "AUDIT_POLICY", FULL_AUDIT)  # noqa: B010 (the module's own name, read by `up`)
    binaries = ensure_binaries(progress=lambda line: print(line, file=sys.stderr))
    home = Path(tempfile.mkdtemp(prefix="stead-claims-"))
    plane = LocalControlPlane(home / "plane", apiserver_port=_free_port(), etcd_client_port=_free_port(),
                              etcd_peer_port=_free_port(), controller_manager_port=_free_port(), binaries=binaries)
    info = plane.up()
    here = str(Path(__file__).resolve().parent.parent)

    def kubectl(*args: str) -> str:
        return subprocess.run([str(binaries.kubectl), "--kubeconfig", str(info.kubeconfig), *args],
                              capture_output=True, text=True, check=True, timeout=300).stdout

    async def holders() -> dict[str, tuple[str, str]]:
        """Each claim's holder and version: a claim taken again by the same replica (a new
        incarnation after its fence lapsed) is a change too."""
        from operators.runtime.shard.claims import list_claims
        async with KubeClient(load_access(info.kubeconfig), user_agent="stead-claims-bench") as kube:
            return {p: (c.holder, c.resource_version) for p, c in (await list_claims(kube, CLAIMS_NS)).items()}

    kubectl("create", "namespace", CLAIMS_NS)
    names = projects(n_projects)
    (home / "projects").write_text("\n".join(names))
    codes = [("old", old_tree), ("new", here)] if old_tree else [("new", here)]
    lines = [f"{'code':<4} {'N':>2} {'replica':<8} {'claims':>6} {'settle s':>8} "
             + " ".join(f"{v.upper():>7}" for v in VERBS) + f" {'CPU s/min':>9}"]
    running: list[subprocess.Popen[bytes]] = []
    try:
        for n in (1, 3):
            for code, tree in codes:
                label = f"{code}{n}"
                agent = f"stead-claims-bench/{label}"
                kubectl("delete", "leases", "-n", CLAIMS_NS, "-l", "stead.dev/role=member", "--ignore-not-found")
                members = [f"{label}-r{i}" for i in range(n)]
                env = {**os.environ, "PYTHONPATH": f"{tree}:{here}" if tree != here else here}
                began = time.monotonic()
                running = [subprocess.Popen(
                    [sys.executable, __file__, "--claims-replica", m, "--kubeconfig", str(info.kubeconfig),
                     "--projects-file", str(home / "projects"), "--lease", str(lease), "--agent", f"{agent}/{m}"],
                    stdout=(home / f"{m}.log").open("ab"), stderr=subprocess.STDOUT, env=env) for m in members]
                previous: dict[str, tuple[str, str]] = {}
                while True:  # settled: every claim held by this run's replicas, none written in 3 s
                    time.sleep(3)
                    now = asyncio.run(holders())
                    if any(p.poll() is not None for p in running):
                        raise RuntimeError(f"a replica of {label} exited: see {home}")
                    if now == previous and len(now) == n_projects and {h for h, _ in now.values()} <= set(members):
                        break
                    if time.monotonic() - began > 900:
                        raise TimeoutError(f"{label}: claims not settled in 900 s")
                    previous = now
                settled = time.monotonic() - began
                counts = Counter(h for h, _ in now.values())
                cpu0 = {p.pid: _cpu(p.pid) for p in running}
                t0 = datetime.now(UTC)
                time.sleep(window)
                t1 = datetime.now(UTC)
                cpu = {p.pid: _cpu(p.pid) - cpu0[p.pid] for p in running}
                for process in running:
                    process.kill()
                    process.wait()
                requests = _audit_counts(info.audit_log, agent, t0, t1)
                minutes = (t1 - t0).total_seconds() / 60
                for member, process in zip(members, running, strict=True):
                    mine = requests.get(member, Counter())
                    lines.append(f"{code:<4} {n:>2} {member:<8} {counts[member]:>6} {settled:>8.0f} "
                                 + " ".join(f"{mine[v] / minutes:>7.1f}" for v in VERBS)
                                 + f" {cpu[process.pid] / minutes:>9.2f}")
                running = []
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
        plane.down()
        shutil.rmtree(home, ignore_errors=True)
    lines.append("per minute per replica over the window, from the audit log (a WATCH counted when it starts);")
    lines.append("'settle s': from the replicas' start to every claim held and unchanged (acquisitions included)")
    return lines


def _audit_counts(log: Path, agent: str, since: datetime, until: datetime) -> dict[str, Counter[str]]:
    """Requests by replica (the user agent's last part) and verb, received in [since, until)."""
    found: dict[str, Counter[str]] = {}
    with log.open() as lines:
        for line in lines:
            if agent not in line:
                continue
            event = json.loads(line)
            user_agent = str(event.get("userAgent") or "")
            if not user_agent.startswith(agent + "/"):
                continue
            verb = str(event.get("verb") or "")
            if event.get("stage") != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
                continue
            received = datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00"))
            if since <= received < until:
                found.setdefault(user_agent.rsplit("/", 1)[1], Counter())[verb] += 1
    return found


if __name__ == "__main__":
    sys.exit(main())
