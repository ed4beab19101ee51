"""`stead` start-up (issue 27, friction 6): the wall time of a command that talks to the cluster, at idle.

Times, each as a user runs it (a new process, as the `stead` script starts one):

    stead actionrun logs R      one ActionRun, finished (its status written, as the operator would)
    stead service list E        a ServiceEntity and two instances
    stead graph list            three DeploymentGraphs
    stead --help                no cluster: the floor of any command

against a local control plane of its own (kube-apiserver and etcd on free ports, a temporary home; the
CRDs installed, no operator: "at idle"), or the cluster of `--kubeconfig`. Target: ≤ 0.3 s for the first
three.

Bytecode is cached as after `pip install` (a temporary PYTHONPYCACHEPREFIX: nothing is written in the trees,
PYTHONDONTWRITEBYTECODE is dropped for the commands); one warm-up run of each command fills the cache.
Each timed run is a median of `--runs` (default 15). With `--baseline-tree DIR` (a checkout of the code to
compare with, e.g. `git worktree add /tmp/base main`), every command runs alternately from DIR's code and
this tree's, so that both see the same machine; the report gives both medians and their ratio, of wall
time and of the command process's CPU time (user + system). The machine's load average is printed too: on
a shared machine wall times move with it, CPU times and ratios much less; at idle, wall time is about the
CPU time plus the API server's answers.

    .venv/bin/python bench/cli_startup.py --baseline-tree /path/to/main-checkout [--runs 15]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAMESPACE = "bench-cli"
RUN = "greeter-update-1"
COMMANDS: dict[str, list[str]] = {
    "actionrun logs": ["actionrun", "logs", RUN, "-n", NAMESPACE],
    "service list": ["service", "list", "greeter", "-n", NAMESPACE],
    "graph list": ["graph", "list", "-n", NAMESPACE],
    "--help": ["--help"],
}
TARGET_SECONDS = 0.3
MAIN = "import sys; from operators.cli import main; sys.exit(main())"  # what the `stead` console script runs

ACTION_RUN = {
    "apiVersion": "stead.dev/v1alpha1", "kind": "ActionRun",
    "metadata": {"name": RUN, "namespace": NAMESPACE},
    "spec": {"app": "greeter", "action": "update"},
}
ACTION_RUN_STATUS = {"status": {
    "state": "Succeeded", "progress": {"done": 1, "total": 1},
    "runLog": [{"task": "apply", "type": "exec", "state": "Succeeded",
                "replicas": [{"target": "runner", "state": "Succeeded", "attempts": 1, "exitCode": 0,
                              "output": "now greeting world in eu\n"}]}],
}}


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def cluster(kubeconfig: Path | None, work: Path) -> Iterator[tuple[Path, Path]]:
    """(kubeconfig, kubectl): of `--kubeconfig`, else of a local control plane started here and stopped after."""
    from operators.cluster import ensure_binaries

    if kubeconfig is not None:
        yield kubeconfig, ensure_binaries(progress=log).kubectl
        return
    from bench.harness import local_plane

    with local_plane(work) as (target, binaries):
        yield target.kubeconfig, binaries.kubectl


def install_crds(kubeconfig: Path) -> None:
    import asyncio

    from operators.catalog import KINDS
    from operators.runtime.kube.client import KubeClient, load_access
    from operators.runtime.kube.crds import install_crds as install

    async def run() -> None:
        async with KubeClient(load_access(kubeconfig)) as kube:
            await install(kube, KINDS)

    asyncio.run(run())


def create_objects(kubeconfig: Path, kubectl: Path) -> None:
    """The objects the commands show: what `examples/` holds for services and graphs, and one finished run."""

    def run(*args: str, stdin: str | None = None) -> None:
        subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig), *args], input=stdin, text=True, check=True,
                       capture_output=True, timeout=120)

    run("create", "namespace", NAMESPACE)
    for example in ("service-entity.yaml", "service-instance.yaml", "graph-environment.yaml"):
        run("apply", "-n", NAMESPACE, "-f", str(ROOT / "examples" / example))
    second = (ROOT / "examples" / "service-instance.yaml").read_text().replace("hello", "hello-2")
    run("apply", "-n", NAMESPACE, "-f", "-", stdin=second)
    run("apply", "-f", "-", stdin=json.dumps(ACTION_RUN))
    run("patch", "actionrun", RUN, "-n", NAMESPACE, "--subresource=status", "--type=merge", "-p",
        json.dumps(ACTION_RUN_STATUS))


def environment(tree: Path, kubeconfig: Path, pycache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(tree), "KUBECONFIG": str(kubeconfig), "PYTHONPYCACHEPREFIX": str(pycache)}


def once(tree: Path, argv: list[str], env: dict[str, str], cwd: Path
         ) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """One command from `tree`'s code: its wall time, its CPU time (user + system), and what it did. `-P`: the
    working directory is not put on the path (a checkout there would shadow `tree`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-P", "-c", MAIN, *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command and tree (median)")
    parser.add_argument("--baseline-tree", type=Path, help="a checkout to compare with, run alternately")
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster (default: a local control plane)")
    args = parser.parse_args()
    trees = {"this": ROOT}
    if args.baseline_tree is not None:
        trees = {"baseline": args.baseline_tree.resolve(), "this": ROOT}
    with tempfile.TemporaryDirectory(prefix="stead-cli-bench-") as tmp:
        work = Path(tmp)
        with cluster(args.kubeconfig, work) as (kubeconfig, kubectl):
            install_crds(kubeconfig)
            create_objects(kubeconfig, kubectl)
            env = {name: environment(tree, kubeconfig, work / "pycache") for name, tree in trees.items()}
            for name, tree in trees.items():  # warm-up (fills the bytecode cache) and a check of what runs
                for argv in COMMANDS.values():
                    _, _, done = once(tree, argv, env[name], work)
                    if done.returncode != 0 or not done.stdout.strip():
                        log(f"{name} ({tree}): stead {' '.join(argv)} failed ({done.returncode}): {done.stderr}")
                        return 1
            log(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            times: dict[tuple[str, str], list[float]] = {(n, c): [] for n in trees for c in COMMANDS}
            cpu: dict[tuple[str, str], list[float]] = {(n, c): [] for n in trees for c in COMMANDS}
            for _ in range(args.runs):
                for command, argv in COMMANDS.items():
                    for name, tree in trees.items():
                        seconds, used, _ = once(tree, argv, env[name], work)
                        times[name, command].append(seconds)
                        cpu[name, command].append(used)
            log(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"stead start-up, median (min) of {args.runs} runs each" +
          (", the two trees alternately" if len(trees) > 1 else ""))
    for name, tree in trees.items():
        print(f"  {name}: {tree}")
    print("wall seconds")
    report(times, trees)
    print("CPU seconds of the command's process (user + system): less moved by other load than wall time")
    report(cpu, trees)
    return 0


def report(times: dict[tuple[str, str], list[float]], trees: dict[str, Path]) -> None:
    header = f"{'command':<16}" + "".join(f"{name:>18}" for name in trees)
    print(header + ("     this/baseline" if "baseline" in trees else "") + "   target")
    for command in COMMANDS:
        cells = {name: times[name, command] for name in trees}
        row = f"{command:<16}" + "".join(
            f"{statistics.median(v):>10.3f} ({min(v):.3f})" for v in cells.values())
        if "baseline" in trees:
            row += f"{statistics.median(cells['this']) / statistics.median(cells['baseline']):>18.2f}"
        if command != "--help":
            ok = statistics.median(cells["this"]) <= TARGET_SECONDS
            row += f"   ≤ {TARGET_SECONDS} s: {'yes' if ok else 'no'}"
        print(row)


if __name__ == "__main__":
    sys.exit(main())
