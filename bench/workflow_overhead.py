"""Workflow engine overhead: time per step of no-op workflows, Stead's engine beside stock Luigi.

DESIGN.md (section 4) measured stock Luigi's local scheduler at 2.6 ms per no-op task at 100
tasks and 18 ms at 4,000: its cost per task grows with the size of the run. The target for
`pipelines` is at most 1 ms per step at 5,000 steps, with Luigi still the engine. This prints, for
100, 1,000 and 5,000 steps, as a chain (each step needs the previous one) and as a wide DAG (one
step fanning out to N-2 independent steps fanning into one):

- ``stead``: `pipelines.runner.Runner` running the workflow under a fresh run uid: the real
  engine end to end (LMDB Targets and records, the status file, the per-step state changes,
  Luigi's worker with `FastScheduler`), `noop` steps, one step at a time (``parallelism: 1``);
- ``luigi``: stock Luigi on the same DAG: `luigi.build(..., local_scheduler=True, workers=1)`
  over plain tasks whose completion is a lookup in an in-memory set, the cheapest possible
  Target; this is the stock scheduler's cost, not a straw man.

Times are from the start of the run to its end (imports and interpreter start-up excluded),
divided by the number of steps: wall-clock, and CPU time of the process (all its threads), which
stays meaningful on a machine shared with other work. Stead's figure is the median of ``--repeat``
runs; stock Luigi runs once per size (a 5,000-step run takes minutes). Each measurement runs in a
fresh interpreter, so no run warms another. ``--profile`` prints where stock Luigi spends its time
(cProfile, 1,000 steps). The exit status is 1 when the 5,000-step target is missed.

    .venv/bin/python bench/workflow_overhead.py [--sizes 100,1000,5000] [--shapes chain,wide]
                                                [--stock-max 5000] [--parallelism 1] [--repeat 3]
                                                [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

TARGET_MS_AT_5000 = 1.0


def build_steps(shape: str, n: int) -> list[dict[str, Any]]:
    if shape == "chain":
        return [{"id": f"s{i}", "type": "noop", **({"dependsOn": [f"s{i - 1}"]} if i else {})} for i in range(n)]
    middle = [f"m{i}" for i in range(n - 2)]
    return [
        {"id": "first", "type": "noop"},
        *({"id": m, "type": "noop", "dependsOn": ["first"]} for m in middle),
        {"id": "last", "type": "noop", "dependsOn": middle},
    ]


def measure_stead(shape: str, n: int, parallelism: int) -> tuple[float, float]:
    from pipelines.model import Workflow
    from pipelines.runner import Runner

    workflow = Workflow.model_validate({"steps": build_steps(shape, n), "parallelism": parallelism})
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(workflow, "bench", Path(tmp))
        started, cpu = time.perf_counter(), time.process_time()
        outcome = runner.run()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if outcome.phase != "Succeeded":
        raise SystemExit(f"stead run ended {outcome.phase}: {outcome.message}")
    return elapsed, cpu


def stock_tasks(shape: str, n: int) -> Any:
    import luigi

    class Chain(luigi.Task):
        done: ClassVar[set[int]] = set()
        i = luigi.IntParameter()

        def requires(self) -> list[Any]:
            return [Chain(i=self.i - 1)] if self.i > 0 else []

        def complete(self) -> bool:
            return self.i in self.done

        def run(self) -> None:
            self.done.add(self.i)

    class First(Chain):
        def requires(self) -> list[Any]:
            return []

    class Middle(Chain):
        def requires(self) -> list[Any]:
            return [First(i=-1)]

    class Last(Chain):
        def requires(self) -> list[Any]:
            return [Middle(i=i) for i in range(n - 2)]

    return Chain(i=n - 1) if shape == "chain" else Last(i=n)


def measure_luigi(shape: str, n: int) -> tuple[float, float]:
    import luigi

    root = stock_tasks(shape, n)
    started, cpu = time.perf_counter(), time.process_time()
    ok = luigi.build([root], local_scheduler=True, workers=1, log_level="WARNING")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if not ok:
        raise SystemExit("stock luigi run failed")
    return elapsed, cpu


def profile_luigi() -> None:
    import luigi

    logging.getLogger("luigi-interface").setLevel(logging.WARNING)
    for shape in ("chain", "wide"):
        root = stock_tasks(shape, 1000)
        profiler = cProfile.Profile()
        profiler.enable()
        luigi.build([root], local_scheduler=True, workers=1, log_level="WARNING")
        profiler.disable()
        print(f"\n== stock Luigi, {shape} of 1,000 no-op tasks, by cumulative time ==")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(r"luigi/(scheduler|worker)", 14)


def one(engine: str, shape: str, n: int, parallelism: int, repeat: int = 1) -> tuple[float, float]:
    """Median (wall, cpu) milliseconds per step over `repeat` runs, each in a fresh interpreter."""
    walls, cpus = [], []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--one", engine, shape, str(n), str(parallelism)],
            check=True, capture_output=True, text=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        walls.append(result["seconds"] * 1000 / n)
        cpus.append(result["cpu"] * 1000 / n)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--shapes", default="chain,wide")
    parser.add_argument("--stock-max", type=int, default=5000, help="skip stock Luigi above this size")
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="runs of Stead's engine per size (median)")
    parser.add_argument("--profile", action="store_true", help="profile stock Luigi at 1,000 steps and exit")
    parser.add_argument("--one", nargs=4, metavar=("ENGINE", "SHAPE", "N", "PAR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        engine, shape, n, par = args.one[0], args.one[1], int(args.one[2]), int(args.one[3])
        seconds, cpu = measure_stead(shape, n, par) if engine == "stead" else measure_luigi(shape, n)
        print(json.dumps({"seconds": seconds, "cpu": cpu}))
        return 0
    if args.profile:
        profile_luigi()
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    shapes = args.shapes.split(",")
    print(f"ms per step; wall (cpu). Stead: median of {args.repeat}, parallelism {args.parallelism}. "
          f"Luigi: luigi.build, local scheduler, 1 worker. load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'shape':<6} {'steps':>6}  {'stead':>15}  {'stock luigi':>16}  {'luigi/stead':>11}")
    failed = False
    for shape in shapes:
        for n in sizes:
            wall, cpu = one("stead", shape, n, args.parallelism, args.repeat)
            if n <= args.stock_max:
                stock_wall, stock_cpu = one("luigi", shape, n, 1)
                stock_text = f"{stock_wall:7.3f} ({stock_cpu:6.3f})"
                ratio_text = f"{stock_wall / wall:10.1f}x"
            else:
                stock_text, ratio_text = f"{'skipped':>16}", f"{'-':>11}"
            verdict = ""
            if n == 5000:
                ok = wall <= TARGET_MS_AT_5000
                failed |= not ok
                verdict = f"  target <= {TARGET_MS_AT_5000:g} ms: {'met' if ok else 'MISSED'}"
            print(f"{shape:<6} {n:>6}  {wall:6.3f} ({cpu:6.3f})  {stock_text}  {ratio_text}{verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
