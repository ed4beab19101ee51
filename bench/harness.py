"""What the end-to-end benchmarks share: a LocalControlPlane of their own, the real operator around a
scenario, and the runner processes they must not leave behind.

`app_burst.py` and `service_lifecycle.py` (and any benchmark that drives `stead run` against objects)
start the same way: a control plane in the benchmark's work directory on free ports, the operator with
its admission webhook and the benchmark's namespaces trusted, the CRDs installed, and afterwards the
operator stopped, its webhooks removed and the workflow runners it started (which outlive their operator
by design) killed. Written once here so that a fix to the start or the cleanup reaches every benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.pipeline_throughput import (
    OperatorProcess,
    Target,
    free_port,
    log,
    remove_stead_webhooks,
    stead_operator,
    with_agent,
)
from operators.catalog import KINDS
from operators.cluster import Binaries
from operators.runtime.kube.client import ClusterAccess, KubeClient, load_access
from operators.runtime.kube.crds import install_crds

RUNNER_ARGV: Final = ("-m", "pipelines", "run")
PAGE: Final = os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def local_plane(workdir: Path) -> Iterator[tuple[Target, Binaries]]:
    """A LocalControlPlane in `workdir/cluster` on four distinct free ports, stopped on the way out."""
    from operators.cluster import LocalControlPlane, ensure_binaries

    binaries = ensure_binaries(progress=log)
    ports: list[int] = []
    while len(set(ports)) < 4:
        ports = [free_port() for _ in range(4)]
    plane = LocalControlPlane(workdir / "cluster", apiserver_port=ports[0], etcd_client_port=ports[1],
                              etcd_peer_port=ports[2], controller_manager_port=ports[3], progress=log)
    try:
        info = plane.up()
        log(f"local control plane at {info.server} (home {plane.home})")
        yield Target(info.kubeconfig, info.audit_log, dict(plane.status().pids)), binaries
    finally:
        log("stopping the local control plane")
        plane.down()


@dataclass
class Session:
    """The operator under test and the benchmark's own client of the API server."""

    operator: OperatorProcess
    access: ClusterAccess
    kube: KubeClient


@contextlib.asynccontextmanager
async def operator_session(args: argparse.Namespace, target: Target, workdir: Path, trusted_prefix: str,
                           extra_args: Sequence[str] = (), concurrency: int = 8) -> AsyncIterator[Session]:
    """The real operator (`stead run`, webhook included, namespaces `<trusted_prefix>-*` trusted to run
    local scripts) from `args` (see `stead_operator`), started once the CRDs are installed; on the way
    out it is stopped, its webhooks removed and its left-over runners killed. SIGTERM cancels the
    benchmark, so `kill` cleans up as Ctrl-C does."""
    access = with_agent(load_access(target.kubeconfig))
    operator, webhook_port = stead_operator(args, target, workdir / "operator")
    (workdir / "operator").mkdir(parents=True, exist_ok=True)
    operator.argv += ["--trust-local-namespaces", f"{trusted_prefix}-*", *extra_args]
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    async with KubeClient(access, concurrency=concurrency) as kube:
        await install_crds(kube, KINDS)
        try:
            await operator.start(target, args.start_timeout)
            yield Session(operator, access, kube)
        finally:
            await operator.stop()
            await remove_stead_webhooks(kube, webhook_port)
            for pid in runners_of(workdir):  # runners outlive their operator by design; ours go now
                log(f"stopping left-over runner pid {pid}")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def processes() -> dict[int, tuple[int, int, bytes]]:
    """pid -> (parent pid, RSS in bytes, argv as NUL-separated bytes) of every process."""
    out: dict[int, tuple[int, int, bytes]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
            rss = int(Path(entry.path, "statm").read_text().split()[1]) * PAGE
            argv = Path(entry.path, "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        out[int(entry.name)] = (int(stat[1]), rss, argv)
    return out


def is_runner(argv: bytes) -> bool:
    return b"\0".join(a.encode() for a in RUNNER_ARGV) in argv


def runners_of(workdir: Path) -> list[int]:
    """Runner processes whose arguments name `workdir` (this benchmark's), wherever they hang."""
    mark = str(workdir).encode()
    return [pid for pid, (_, _, argv) in processes().items() if is_runner(argv) and mark in argv]
