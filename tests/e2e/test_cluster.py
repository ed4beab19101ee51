"""The local control plane itself: it starts, answers kubectl, is idempotent, and stops cleanly.

It runs its own plane in a temporary home on free ports, so it neither needs nor disturbs the
session's shared cluster.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from operators.cluster import LocalControlPlane, ensure_binaries


def _free_ports(count: int) -> list[int]:
    """Distinct ports the kernel just handed out (held together, so they cannot repeat)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.e2e
@pytest.mark.timeout(3600)  # the first run builds the binaries (minutes); later runs take seconds
def test_up_is_idempotent_kubectl_works_and_down_stops_exactly_its_processes(
    tmp_path: Path,
) -> None:
    binaries = ensure_binaries()
    apiserver, etcd_client, etcd_peer, controller_manager = _free_ports(4)
    plane = LocalControlPlane(
        tmp_path / "home",
        apiserver_port=apiserver,
        etcd_client_port=etcd_client,
        etcd_peer_port=etcd_peer,
        controller_manager_port=controller_manager,
        binaries=binaries,
    )
    try:
        info = plane.up()
        started = plane.status()
        assert started.running
        assert set(started.pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert info.server == f"https://127.0.0.1:{apiserver}"

        namespaces = subprocess.run(
            [str(binaries.kubectl), "--kubeconfig", str(info.kubeconfig), "get", "ns",
             "-o", "name"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()
        assert {"namespace/default", "namespace/kube-system"} <= set(namespaces)

        assert plane.up() == info
        assert plane.status().pids == started.pids
        assert info.audit_log.stat().st_size > 0
    finally:
        plane.down()

    assert not any(_running(pid) for pid in started.pids.values())
    stopped = plane.status()
    assert not stopped.running
    assert stopped.pids == {}
