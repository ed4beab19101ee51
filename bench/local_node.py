"""The local node's costs (issue 24): how long `up` takes to a Ready node, a Pod to Ready and
`down`, and what the node's processes hold in memory; against the figures of the probe that first
ran Pods here (shared notes, real-pods.md), the baseline.

Each round starts the node on a control plane of its own (a temporary home, free ports, bridge
`steadb0`) and stops it again; the binaries and the pause image must be cached (`stead cluster
build`). Needs root and containerd (`make node-tools`).

    .venv/bin/python bench/local_node.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from operators.cluster import LocalControlPlane, LocalNode, NodeNetwork, ensure_binaries  # noqa: E402
from operators.cluster.build import ensure_node_binaries  # noqa: E402
from operators.cluster.images import PAUSE_IMAGE, pause_archive  # noqa: E402
from operators.cluster.node import node_unavailable_reason  # noqa: E402

BASELINE = {"node Ready after the kubelet starts": (0.3, 2.3), "Pod created → Ready": (1.6, 3.1)}
"""The probe's ranges (seconds), measured on a machine of this kind under a CI run's load."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def one_round(home: Path) -> dict[str, float]:
    ports = [free_port() for _ in range(4)]
    plane = LocalControlPlane(home, apiserver_port=ports[0], etcd_client_port=ports[1], etcd_peer_port=ports[2],
                              controller_manager_port=ports[3])
    binaries = ensure_binaries()
    figures: dict[str, float] = {}
    started = time.monotonic()
    plane.up()
    figures["control plane up"] = time.monotonic() - started
    node = LocalNode(plane, network=NodeNetwork("steadb0", "10.92.0.0/16"), kubectl=binaries.kubectl)
    lines: list[tuple[float, str]] = []
    node._progress = lambda line: lines.append((time.monotonic(), line))  # when each process starts
    started = time.monotonic()
    node.up()
    ready = time.monotonic()
    figures["node up (containerd, scheduler, kubelet) to Ready"] = ready - started
    kubelet_start = next(at for at, line in lines if "kubelet" in line)
    figures["node Ready after the kubelet starts"] = ready - kubelet_start

    def kubectl(*args: str) -> str:
        return subprocess.run([str(binaries.kubectl), "--kubeconfig", str(plane.kubeconfig_path), *args],
                              capture_output=True, text=True, check=True, timeout=300).stdout

    try:
        started = time.monotonic()
        kubectl("run", "bench", f"--image={PAUSE_IMAGE}", "--image-pull-policy=Never", "--restart=Never")
        kubectl("wait", "--for=condition=Ready", "pod/bench", "--timeout=120s")
        figures["Pod created → Ready"] = time.monotonic() - started
        for name, pid in node.status().pids.items():
            figures[f"RSS MiB {name}"] = rss_mib(pid)
    finally:
        started = time.monotonic()
        node.down()
        figures["node down"] = time.monotonic() - started
        plane.down()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reason = node_unavailable_reason()
    if reason:
        print(f"local_node: {reason}", file=sys.stderr)
        return 2
    ensure_node_binaries()
    pause_archive()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="stead-bench-node-") as work:
        for index in range(args.rounds):
            rounds.append(one_round(Path(work) / f"home-{index}"))
    print(f"{'figure':<58} {'min':>7} {'median':>7} {'max':>7}   baseline (probe)")
    for figure in rounds[0]:
        values = [r[figure] for r in rounds]
        low, high = BASELINE.get(figure, (None, None))
        base = f"{low}-{high} s" if low is not None else ""
        print(f"{figure:<58} {min(values):7.2f} {statistics.median(values):7.2f} {max(values):7.2f}   {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
