"""The local control plane itself: it starts, answers kubectl, is idempotent, and stops cleanly; and
`stead cluster` starts a second one, in a home of its own on other ports, beside the session's.

Each runs its own plane in a temporary home on free ports (as the session's cluster fixture does), so
it neither needs nor disturbs the session's shared cluster.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from operators.cli.cluster import PORT_VARIABLES
from operators.cluster import Binaries, ClusterInfo, LocalControlPlane, ensure_binaries
from operators.cluster.ports import PORT_SETTINGS
from tests.e2e.conftest import STEAD, free_port


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
    apiserver, etcd_client, etcd_peer, controller_manager = (free_port() for _ in range(4))
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


def _kubectl_namespaces(binaries: Binaries, kubeconfig: Path | str) -> set[str]:
    return set(subprocess.run(
        [str(binaries.kubectl), "--kubeconfig", str(kubeconfig), "get", "ns", "-o", "name"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split())


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_stead_cluster_up_starts_a_second_plane_in_another_home_on_other_ports_beside_the_first(
    tmp_path: Path, cluster: ClusterInfo, binaries: Binaries,
) -> None:
    home = tmp_path / "second-home"
    env = {key: value for key, value in os.environ.items()
           if key not in PORT_VARIABLES.values() and key != "KUBECONFIG"}
    env["STEAD_HOME"] = str(home)
    ports = {setting.flag: free_port() for setting in PORT_SETTINGS}
    apiserver = ports["--apiserver-port"]

    def stead(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(STEAD), "cluster", *args], env=env, capture_output=True, text=True,
                              timeout=300)

    up = stead("up", *(word for flag, port in ports.items() for word in (flag, str(port))))
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines()[0] == f"control plane up at https://127.0.0.1:{apiserver}"
        status = stead("status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.splitlines()[0].split() == ["control", "plane:", "running"]
        assert (f"kube-apiserver {apiserver}, etcd client {ports['--etcd-port']}, etcd peer "
                f"{ports['--etcd-peer-port']}, kube-controller-manager {ports['--controller-manager-port']}"
                in status.stdout)
        assert stead("kubeconfig").stdout.strip() == str(home / "kubeconfig")
        assert stead("kubectl").stdout.strip() == str(binaries.kubectl)

        second = _kubectl_namespaces(binaries, home / "kubeconfig")
        assert {"namespace/default", "namespace/kube-system"} <= second
        assert {"namespace/default", "namespace/kube-system"} <= _kubectl_namespaces(binaries, cluster.kubeconfig)
        assert cluster.server != f"https://127.0.0.1:{apiserver}"

        again = stead("up")  # no flags: the home's plane is found on the ports it started on
        assert (again.returncode, again.stdout) == (0, up.stdout), again.stderr
        pids = LocalControlPlane(home, apiserver_port=apiserver).status().pids
        assert len(pids) == 3
    finally:
        down = stead("down")
    assert down.returncode == 0, down.stderr
    assert not any(_running(pid) for pid in pids.values())
    stopped = stead("status")
    assert stopped.returncode == 3 and "stopped" in stopped.stdout.splitlines()[0]
    assert f"kube-apiserver {apiserver}," in stopped.stdout  # its next `up` uses them again
    assert {"namespace/default"} <= _kubectl_namespaces(binaries, cluster.kubeconfig)  # the first one runs on
