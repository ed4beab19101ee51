"""`make bench-check`: short versions of the benches, run by a stored baseline commit's code and by this
tree's code on the same machine in one run, compared figure by figure; exit 1 on a regression beyond noise.

Figures taken on different days or machines cannot be compared (issue 32: this machine is about twice as
slow as the one earlier notes came from). So both contenders run here, now, alternately: for each round
and each bench the old code and the new code run back to back (the order swapped every round), each in a
fresh interpreter, so that a change in the machine's load hits both alike.

- The baseline is `bench/baseline.toml`: the commit, the number of rounds, and a tolerance per bench. Its
  `operators` and `pipelines` are extracted (`git archive`) into a temporary directory and put first on
  the path of the old side's processes; the measuring code (this script and the bench modules it
  imports) is this tree's for both sides, so that both measure the same thing. Each child reports the
  files it imported its packages from, and the run stops if they are not the side's own.
- The figures are CPU times (of the measuring process, all threads), lower is better; CPU time is
  steadier than wall time on a shared machine.
- A figure regresses when new/old exceeds 1 + its bench's tolerance for both the medians and the minima
  of the rounds: one slow round (a load spike) moves the median or the minimum, rarely both.

The benches in process (no control plane): `workflow_overhead.py`'s engine at 1,000 steps, chain and wide;
`graph_plan.py`'s merge + expand + plan at 100 tasks x 50 nodes; `compile.py`'s compile at 200 services;
`masking.py`'s line-by-line masking with 10 values; `service_lifecycle.py`'s per-trigger cost in process (a
creation's identity check against 200 and 2,000 instances).

The benches on a control plane run the real operator, `stead run`, of each side (`plane_rounds` rounds, as
each costs tens of seconds): `pipeline` is `pipeline_throughput.py --only stead` (300 Environments to Ready,
`--stead-pythonpath` the side's tree) on one LocalControlPlane this script starts for all its runs, old and
new; `config` is `config_lookup.py --only ceiling,operator` (wrk, 4 s each; the script starts its own plane,
the operator inherits the side's PYTHONPATH). Both are called with `--json`.

    .venv/bin/python bench/check.py [--rounds N] [--plane-rounds N] [--only workflow,pipeline] [--baseline FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE_FILE = ROOT / "bench" / "baseline.toml"
PACKAGES = ("operators", "pipelines")


# --- the pure part: the baseline file and the verdict ------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """What `bench/baseline.toml` holds: the commit whose code is the reference, the rounds, and the
    tolerance (a fraction: 0.15 allows new/old up to 1.15) per bench."""

    commit: str
    rounds: int
    tolerance: Mapping[str, float]
    plane_rounds: int = 3
    """Rounds of the benches on a control plane (`pipeline`, `config`): each costs tens of seconds."""


def parse_baseline(text: str, benches: Sequence[str]) -> Baseline:
    """`text` (TOML) as a Baseline; every bench in `benches` must have a tolerance. A ValueError names the
    field that is missing or wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"baseline: not TOML: {error}") from None
    commit = data.get("commit")
    if not isinstance(commit, str) or not commit.strip():
        raise ValueError("baseline: `commit` must be a commit name (a hash), as a string")
    rounds = data.get("rounds", 5)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"baseline: `rounds` must be a positive integer, not {rounds!r}")
    plane_rounds = data.get("plane_rounds", 3)
    if not isinstance(plane_rounds, int) or isinstance(plane_rounds, bool) or plane_rounds < 1:
        raise ValueError(f"baseline: `plane_rounds` must be a positive integer, not {plane_rounds!r}")
    table = data.get("tolerance")
    if not isinstance(table, dict):
        raise ValueError("baseline: a [tolerance] table is needed, one fraction per bench")
    tolerance: dict[str, float] = {}
    for name, value in table.items():
        if name not in benches:
            raise ValueError(f"baseline: tolerance.{name}: no such bench (known: {', '.join(benches)})")
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 10:
            raise ValueError(f"baseline: tolerance.{name} must be a fraction such as 0.15, not {value!r}")
        tolerance[name] = float(value)
    missing = [name for name in benches if name not in tolerance]
    if missing:
        raise ValueError(f"baseline: tolerance.{missing[0]} is missing (every bench needs one)")
    return Baseline(commit.strip(), rounds, tolerance, plane_rounds)


@dataclass(frozen=True)
class Verdict:
    """One figure's comparison: the minima and medians of both sides, their ratios new/old, and whether
    that is a regression beyond `tolerance`."""

    old_min: float
    old_median: float
    new_min: float
    new_median: float
    median_ratio: float
    min_ratio: float
    tolerance: float

    @property
    def regressed(self) -> bool:
        limit = 1 + self.tolerance
        return self.median_ratio > limit and self.min_ratio > limit


def judge(old: Sequence[float], new: Sequence[float], tolerance: float) -> Verdict:
    """Compare one figure's rounds (lower is better). Both ratios must exceed 1 + tolerance for a
    regression: the median guards against one lucky round of the new code, the minimum against one
    unlucky (loaded) round."""
    if not old or not new:
        raise ValueError("judge: both sides need at least one round")
    if min(old) <= 0 or min(new) <= 0:
        raise ValueError("judge: figures must be positive times")
    old_min, old_median = min(old), statistics.median(old)
    new_min, new_median = min(new), statistics.median(new)
    return Verdict(old_min, old_median, new_min, new_median, new_median / old_median, new_min / old_min, tolerance)


# --- the benches (run in a child process, with the side's packages first on the path) ---------------


def bench_workflow() -> dict[str, float]:
    from bench.workflow_overhead import measure_stead

    figures = {}
    for shape in ("chain", "wide"):
        _, cpu = measure_stead(shape, 1000, 1)
        figures[f"{shape} 1000, CPU ms/step"] = cpu * 1e3 / 1000
    return figures


def bench_graph_plan() -> dict[str, float]:
    from bench.graph_plan import measure

    result = measure("100x50", 1)
    return {"expand 100x50, CPU ms": result["expand"] * 1e3, "plan 100x50, CPU ms": result["plan"] * 1e3}


def bench_compile() -> dict[str, float]:
    from functools import partial

    from bench.compile import best, blueprint
    from operators.calm.compiler import compile_blueprint
    from operators.calm.models import BlueprintSpec

    spec = BlueprintSpec.model_validate(blueprint(200))
    took, result = best(partial(compile_blueprint, spec, None), 3)
    assert result.ok, result.errors[:3]
    return {"compile 200 services, CPU ms": took * 1e3}


def bench_masking() -> dict[str, float]:
    import random

    from bench.masking import MIB, mask_lines, output, values
    from pipelines.masking import Masker

    rng = random.Random(25)
    secrets = values(10, rng)
    masker, lines = Masker(secrets), output(secrets, rng)
    size = sum(len(line) + 1 for line in lines) / MIB
    mask_lines(masker, lines)  # warm-up
    times = []
    for _ in range(3):
        start = time.process_time()
        mask_lines(masker, lines)
        times.append(time.process_time() - start)
    return {"10 values by line, CPU ms/MiB": min(times) / size * 1e3}


def instance_body(name: str, created: int) -> dict[str, Any]:
    """A ServiceInstance of the entity `bench` in state up, as the API server lists it (with a status log)."""
    entry = {"from": "creating", "to": "up", "trigger": "resource_based", "version": 4,
             "time": "2026-11-28T00:00:00Z", "message": "deployed"}
    return {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
            "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                         "creationTimestamp": f"2026-11-28T{created // 3600:02d}:{created // 60 % 60:02d}:"
                                              f"{created % 60:02d}Z"},
            "spec": {"entity": "bench", "attributes": {"name": name}},
            "status": {"state": "up", "version": 4, "identity": name, "activeAttributes": {"name": name},
                       "log": [entry] * 4}}


def bench_lsm() -> dict[str, float]:
    """`service_lifecycle.py`'s per-trigger cost in one process, without a cluster: a creation's identity check
    (`World.advance(Create)`, as the pipeline runs it) against 200 and 2,000 instances of the entity. The side's
    code answers it as it does: a LIST (decoded from JSON, as `KubeClient` does) or the index its watch feeds
    (`operators.lsm.identities`, when the side has it)."""
    import asyncio

    from operators.lsm.builtin import BUILTINS
    from operators.lsm.machine import Create
    from operators.lsm.models import SERVICE_INSTANCE, ServiceEntitySpec, ServiceInstanceStatus
    from operators.lsm.world import World

    try:
        from operators.lsm.identities import Identities
        from operators.runtime import Watch
    except ImportError:  # a baseline before the index: its LIST it is
        Identities = None  # type: ignore[assignment,misc]

    entity = ServiceEntitySpec.model_validate({
        "attributes": [{"name": "name", "type": "string"}], "identity": "name", "lifecycle": {"builtin": "simple"}})

    @dataclass
    class Services:
        listing: bytes
        watches: dict[str, Any]
        store: Any = None

        @property
        def kube(self) -> Services:
            return self

        async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
            listed: dict[str, Any] = json.loads(self.listing)
            return listed

    def check(count: int, creations: int) -> float:
        bodies = [instance_body(f"si-{i:05d}", i) for i in range(count)]
        watches: dict[str, Any] = {}
        if Identities is not None:
            watch = Watch(None, "", SERVICE_INSTANCE.kind, None)  # type: ignore[arg-type]
            index = Identities(watch)
            watch.add_tap(index)
            for body in bodies:
                index("ADDED", body)
            watch.listed.set()
            watches[SERVICE_INSTANCE.plural] = watch
        services = Services(json.dumps({"items": bodies}).encode(), watches)

        async def creations_() -> None:
            for i in range(creations):
                name = f"new-{i:05d}"
                world = World(services, "ns", name, "bench", entity, BUILTINS["simple"], tie_break=True)
                await world.advance(ServiceInstanceStatus(), Create({"name": name}))

        asyncio.run(creations_())  # warm-up
        start = time.process_time()
        asyncio.run(creations_())
        return (time.process_time() - start) / creations

    return {f"create's identity check at {count}, CPU us": check(count, 20) * 1e6 for count in (200, 2000)}


BENCHES: dict[str, Callable[[], dict[str, float]]] = {
    "lsm": bench_lsm,
    "workflow": bench_workflow,
    "graph_plan": bench_graph_plan,
    "compile": bench_compile,
    "masking": bench_masking,
}


# --- the benches on a control plane: the bench scripts as subprocesses, the side's operator -------------


@dataclass(frozen=True)
class Side:
    """One contender: its name (old/new) and the tree whose `operators` and `pipelines` it runs."""

    name: str
    tree: Path


def run_script(bench: str, argv: Sequence[str], pythonpath: Sequence[Path], timeout: float) -> Any:
    """Run a bench script of this tree (with `--json`) and return what its last line of stdout says."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath)}
    try:
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"bench {bench}: {' '.join(argv)} took more than {timeout:.0f} s") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"bench {bench} failed ({' '.join(argv)}, PYTHONPATH {env['PYTHONPATH']}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


PIPELINE_COUNT = 300
"""Environments per pipeline run: ~1 s of the operator's CPU, enough to swamp its start and stop."""


def bench_pipeline(side: Side, kubeconfig: Path | None) -> tuple[dict[str, float], str]:
    """`pipeline_throughput.py --only stead`: N Environments to Ready on the run's one control plane, the
    side's operator (`--stead-pythonpath`). Its CPU per object over the timed interval, and from the audit
    log its status PATCHes and all its requests per object. The script and its client are this tree's."""
    assert kubeconfig is not None, "the pipeline bench runs on the run's control plane"
    argv = ["bench/pipeline_throughput.py", "--kubeconfig", str(kubeconfig), "--only", "stead", "--count",
            str(PIPELINE_COUNT), "--warmup", "0", "--stead-pythonpath", str(side.tree), "--json"]
    [run] = run_script("pipeline", argv, [ROOT], timeout=600)
    try:
        return pipeline_figures(run)
    except ValueError as error:
        raise SystemExit(f"bench pipeline ({side.name}): {error}") from None


def pipeline_figures(run: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """The figures of one `pipeline_throughput.py --json` run of Stead, and a line saying how it went; a
    ValueError when not every object became Ready or the audit log or the operator's CPU is missing (a
    figure of 0 would read as an improvement)."""
    count, audit, cpu = run["count"], run.get("audit"), run.get("cpu") or {}
    if run.get("seconds") is None or not audit or cpu.get("operator") is None:
        raise ValueError(f"{run.get('ready', 0)}/{count} Ready ({run.get('error') or 'no error'}); audit log "
                         f"{'read' if audit else 'missing'}; operator CPU {cpu.get('operator', 'missing')}")
    figures = {f"{count} to Ready, operator CPU ms/obj": cpu["operator"] * 1e3 / count,
               "status PATCHes/obj": audit["patches_by_subresource"].get("status", 0) / count,
               "operator requests/obj": audit["operator_requests"] / count}
    note = (f"{count} Ready in {run['seconds']:.1f} s ({count / run['seconds']:.0f}/s), kube-apiserver CPU "
            f"{cpu.get('kube-apiserver', 0):.2f} s, load at start {run.get('load', 0):.2f}")
    return figures, note


CONFIG_SECONDS = 4
"""Seconds of load per contender in a config run (after config_lookup's 1 s warm-up)."""


def bench_config(side: Side, kubeconfig: Path | None) -> tuple[dict[str, float], str]:
    """`config_lookup.py --only ceiling,operator`: the side's operator (`stead run` on the side's path, its own
    control plane: the script starts one) and the constant handler on the same HTTP server (this tree's)
    answer wrk's lookups in turn. The operator's server CPU per request, and the ceiling's req/s over the
    operator's: the ceiling shares the run's load, so the ratio is steadier than either rate."""
    argv = ["bench/config_lookup.py", "--only", "ceiling,operator", "--no-attack", "--seconds", str(CONFIG_SECONDS),
            "--json"]
    result = run_script("config", argv, [side.tree, ROOT], timeout=300)
    try:
        figures, note = config_figures(result)
    except ValueError as error:
        raise SystemExit(f"bench config ({side.name}): {error}") from None
    return figures, f"{note}, load {load()}"


def config_figures(result: Mapping[str, Mapping[str, float]]) -> tuple[dict[str, float], str]:
    """The figures of one `config_lookup.py --only ceiling,operator --json` run, and a line saying how it went;
    a ValueError when the operator answered an error (an error is cheap: it would read as an improvement)."""
    operator, ceiling = result["operator"], result["ceiling"]
    if operator["errors"] or not operator["rps"] or not ceiling["rps"]:
        raise ValueError(f"operator: {operator['errors']:.0f} errors, {operator['rps']:.0f} req/s; "
                         f"ceiling {ceiling['rps']:.0f} req/s")
    figures = {"operator server CPU us/req": operator["cpu_us_per_request"],
               "ceiling/operator req/s": ceiling["rps"] / operator["rps"]}
    note = (f"operator {operator['rps']:.0f} req/s p99 {operator['p99_ms']:.1f} ms, ceiling {ceiling['rps']:.0f} "
            f"req/s p99 {ceiling['p99_ms']:.1f} ms")
    return figures, note


PLANE_BENCHES: dict[str, Callable[[Side, Path | None], tuple[dict[str, float], str]]] = {
    "pipeline": bench_pipeline,
    "config": bench_config,
}


ALL_BENCHES = [*BENCHES, *PLANE_BENCHES]
"""Every bench's name, as `--only` and the baseline's tolerances know them."""


def child(name: str) -> int:
    """Run one bench and print its figures and where its packages came from, as one JSON line."""
    import importlib

    figures = BENCHES[name]()
    origins = {package: str(Path(importlib.import_module(package).__file__ or "").parent) for package in PACKAGES}
    print(json.dumps({"figures": figures, "origins": origins}))
    return 0


# --- the run -------------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def extract(commit: str, into: Path) -> str:
    """The commit's packages (`git archive`) in `into`; returns the full commit hash."""
    full = subprocess.run(["git", "rev-parse", "--verify", f"{commit}^{{commit}}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    archive = into / "baseline.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), full, *PACKAGES], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    archive.unlink()
    return full


def run_child(name: str, tree: Path, extra_path: Sequence[Path]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (tree, *extra_path))}
    done = subprocess.run([sys.executable, __file__, "--child", name], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench {name} failed with the code of {tree}:\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for package, origin in report["origins"].items():
        if Path(origin) != tree / package:
            raise SystemExit(f"bench {name}: {package} came from {origin}, not from {tree / package}")
    figures: dict[str, float] = report["figures"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--baseline", type=Path, default=BASELINE_FILE, help="the baseline file (TOML)")
    parser.add_argument("--rounds", type=int, help="rounds per side (default: the baseline file's)")
    parser.add_argument("--plane-rounds", type=int,
                        help="rounds per side of the benches on a control plane (default: the baseline file's)")
    parser.add_argument("--only", help="a comma-separated subset of: " + ", ".join(ALL_BENCHES))
    parser.add_argument("--child", choices=list(BENCHES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)

    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    try:
        baseline = parse_baseline(args.baseline.read_text(), ALL_BENCHES)
    except (OSError, ValueError) as error:
        console.print(f"[red]{error}[/red]")
        return 2
    names = args.only.split(",") if args.only else ALL_BENCHES
    unknown = [n for n in names if n not in ALL_BENCHES]
    if unknown:
        parser.error(f"--only: no bench {unknown[0]!r} (known: {', '.join(ALL_BENCHES)})")
    rounds = args.rounds or baseline.rounds
    plane_rounds = args.plane_rounds or baseline.plane_rounds
    console.print(f"CPU: {cpu_model()} x {os.cpu_count()}; Python {platform.python_version()}")
    console.print(f"load average at start: {load()}")
    started = time.monotonic()
    runs: dict[tuple[str, str], dict[str, list[float]]] = {}
    in_process = [name for name in names if name in BENCHES]
    on_plane = [name for name in names if name in PLANE_BENCHES]
    with tempfile.TemporaryDirectory(prefix="stead-bench-check-") as tmp, contextlib.ExitStack() as stack:
        full = extract(baseline.commit, Path(tmp))
        console.print(f"old: {full[:12]} (bench/baseline.toml, extracted to {tmp}/tree); new: this tree, {ROOT}; "
                      f"{rounds} rounds in process, {plane_rounds} on a control plane, old and new alternately")
        sides = {"old": (Path(tmp) / "tree", [ROOT]), "new": (ROOT, [])}
        for round_ in range(rounds if in_process else 0):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for name in in_process:
                for side in order:
                    tree, extra = sides[side]
                    for figure, value in run_child(name, tree, extra).items():
                        runs.setdefault((name, figure), {}).setdefault(side, []).append(value)
            console.print(f"round {round_ + 1}/{rounds} done ({time.monotonic() - started:.0f} s, load {load()})")
        kubeconfig: Path | None = None
        if "pipeline" in on_plane:  # one plane for all its runs, old and new: the API server is not compared
            sys.path.insert(0, str(ROOT))
            from bench.harness import local_plane

            target, _ = stack.enter_context(local_plane(Path(tmp) / "plane"))
            kubeconfig = target.kubeconfig
        for round_ in range(plane_rounds if on_plane else 0):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for name in on_plane:
                for side in order:
                    figures, note = PLANE_BENCHES[name](Side(side, sides[side][0]), kubeconfig)
                    console.print(f"  {name} {side}: {note}", highlight=False)
                    for figure, value in figures.items():
                        runs.setdefault((name, figure), {}).setdefault(side, []).append(value)
            console.print(f"control-plane round {round_ + 1}/{plane_rounds} done ({time.monotonic() - started:.0f} s, "
                          f"load {load()})")

    table = Table(title=f"new (this tree) vs old ({full[:12]}): CPU and requests, lower is better, {rounds} rounds "
                        f"({plane_rounds} on a control plane)")
    for column in ("bench", "figure", "old min", "old median", "new min", "new median", "new/old median",
                   "new/old min", "tolerance", "verdict"):
        table.add_column(column, justify="left" if column in ("bench", "figure", "verdict") else "right")
    regressions: list[str] = []
    for (name, figure), sides_values in runs.items():
        verdict = judge(sides_values["old"], sides_values["new"], baseline.tolerance[name])
        mark = "[red]REGRESSED[/red]" if verdict.regressed else "ok"
        table.add_row(name, figure, f"{verdict.old_min:.3f}", f"{verdict.old_median:.3f}", f"{verdict.new_min:.3f}",
                      f"{verdict.new_median:.3f}", f"{verdict.median_ratio:.3f}", f"{verdict.min_ratio:.3f}",
                      f"{verdict.tolerance:.2f}", mark)
        if verdict.regressed:
            regressions.append(
                f"{name}: {figure}: new median {verdict.new_median:.3f} vs old {verdict.old_median:.3f} "
                f"(x{verdict.median_ratio:.3f}), min {verdict.new_min:.3f} vs {verdict.old_min:.3f} "
                f"(x{verdict.min_ratio:.3f}), beyond the tolerance of {verdict.tolerance:.2f}")
    console.print(table)
    console.print(f"load average at end: {load()} ({time.monotonic() - started:.0f} s)")
    for line in regressions:
        console.print(f"[red]regression[/red] {line}", highlight=False)
    if regressions:
        return 1
    console.print("no regression beyond the tolerances")
    return 0


if __name__ == "__main__":
    sys.exit(main())
