"""Workflow engine overhead: time per step of no-op workflows, Stead's engine beside stock Luigi.

DESIGN.md (section 4) measured stock Luigi's local scheduler at 2.6 ms per no-op task at 100
tasks and 18 ms at 4,000: its cost per task grows with the size of the run. The target for
`pipelines` (issue 32) is at most 0.35 ms per step at 5,000 steps and at 50,000, flat (the cost
per step must not grow with N), chain and wide, with Luigi still the engine. This prints, for
1,000, 5,000 and 50,000 steps by default, as a chain (each step needs the previous one) and as a
wide DAG (one step fanning out to N-2 independent steps fanning into one):

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
fresh interpreter, so no run warms another. Per shape it then prints the flatness: ms/step at the
largest size over ms/step at the smallest (wall and CPU; 1.0 is flat). With ``--baseline-tree
DIR`` another checkout's engine (its `pipelines`, first on the path; this script measures both)
runs each size right before this tree's, so that both see the same load, and new/old is printed.
``--profile`` prints where stock Luigi spends its time (cProfile, 1,000 steps). The exit status
is 1 when the target (wall ms/step, at every size of 5,000 steps or more) is missed.

    .venv/bin/python bench/workflow_overhead.py [--sizes 1000,5000,50000] [--shapes chain,wide]
                                                [--stock-max 5000] [--parallelism 1] [--repeat 3]
                                                [--baseline-tree DIR] [--profile]
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

TARGET_MS = 0.35
"""Issue 32: wall ms per step, at every size from 5,000 steps up (5,000 and 50,000 by default)."""
TARGET_FROM = 5000


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


def one(
    engine: str, shape: str, n: int, parallelism: int, repeat: int = 1, tree: Path | None = None,
) -> tuple[float, float]:
    """Median (wall, cpu) milliseconds per step over `repeat` runs, each in a fresh interpreter;
    with `tree`, that checkout's packages first on the path."""
    walls, cpus = [], []
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), str(Path(__file__).resolve().parents[1])])
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--one", engine, shape, str(n), str(parallelism)],
            check=True, capture_output=True, text=True, env=env,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        walls.append(result["seconds"] * 1000 / n)
        cpus.append(result["cpu"] * 1000 / n)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,5000,50000")
    parser.add_argument("--shapes", default="chain,wide")
    parser.add_argument("--stock-max", type=int, default=5000, help="skip stock Luigi above this size")
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="runs of Stead's engine per size (median)")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout whose engine runs beside this one")
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
    base: Path | None = args.baseline_tree.resolve() if args.baseline_tree else None
    print(f"ms per step; wall (cpu). Stead: median of {args.repeat}, parallelism {args.parallelism}. "
          f"Luigi: luigi.build, local scheduler, 1 worker. load average {load()} on {os.cpu_count()} CPUs")
    if base is not None:
        print(f"old: the engine of {base}, run right before this tree's at each size")
    print(f"{'shape':<6} {'steps':>6}  {'stead':>15}  {'old':>15}  {'new/old':>13}  {'stock luigi':>16}  "
          f"{'luigi/stead':>11}")
    failed = False
    for shape in shapes:
        figures: dict[int, tuple[float, float]] = {}
        for n in sizes:
            old_text, change_text = f"{'-':>15}", f"{'-':>13}"
            if base is not None:
                old_wall, old_cpu = one("stead", shape, n, args.parallelism, args.repeat, base)
                old_text = f"{old_wall:6.3f} ({old_cpu:6.3f})"
            wall, cpu = one("stead", shape, n, args.parallelism, args.repeat)
            figures[n] = (wall, cpu)
            if base is not None:
                change_text = f"{wall / old_wall:5.2f} ({cpu / old_cpu:5.2f})"
            if n <= args.stock_max:
                stock_wall, stock_cpu = one("luigi", shape, n, 1)
                stock_text = f"{stock_wall:7.3f} ({stock_cpu:6.3f})"
                ratio_text = f"{stock_wall / wall:10.1f}x"
            else:
                stock_text, ratio_text = f"{'skipped':>16}", f"{'-':>11}"
            verdict = ""
            if n >= TARGET_FROM:
                ok = wall <= TARGET_MS
                failed |= not ok
                verdict = f"  {wall / TARGET_MS:4.2f} of the target ({TARGET_MS:g} ms): {'met' if ok else 'MISSED'}"
            print(f"{shape:<6} {n:>6}  {wall:6.3f} ({cpu:6.3f})  {old_text}  {change_text}  {stock_text}  "
                  f"{ratio_text}{verdict}", flush=True)
        if len(figures) > 1:
            small, large = min(figures), max(figures)
            wall_ratio, cpu_ratio = figures[large][0] / figures[small][0], figures[large][1] / figures[small][1]
            print(f"{shape:<6} flatness, ms/step at {large:,} / at {small:,}: wall {wall_ratio:.2f}, "
                  f"cpu {cpu_ratio:.2f} (1.00 is flat)", flush=True)
    print(f"load average at end: {load()}")
    return 1 if failed else 0


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
