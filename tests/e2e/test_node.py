"""The local node through `stead cluster`: up starts it beside the control plane, Pods run on it, the
kubelet lets in only whom the API server vouches for, and down leaves nothing behind on the machine.

It runs in a home, on ports and on a bridge of its own (`$STEAD_NODE_BRIDGE`), beside the session's
plane and node; the chart on the node is tests/e2e/test_node_chart.py.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from operators.cli.cluster import PORT_VARIABLES
from operators.cluster import Binaries
from operators.cluster.images import PAUSE_IMAGE
from operators.cluster.node import node_unavailable_reason
from operators.cluster.nodeconfig import KUBELET_PORT
from operators.cluster.ports import PORT_SETTINGS
from operators.cluster.processes import process_is_running
from tests.e2e.conftest import STEAD, free_port
from tests.polling import wait_until

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(node_unavailable_reason() is not None, reason=str(node_unavailable_reason())),
]

BRIDGE, SUBNET, NODE_IP = "steadc0", "10.90.0.0/16", "10.90.0.1"
KERNEL_SETTINGS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "net/ipv4/ip_forward", "kernel/keys/root_maxkeys")


def _machine_state(home: Path) -> dict[str, object]:
    """What the node must not change on the machine, or must put back: kernel settings, nat rules,
    network interfaces, cgroups and mounts of its files (other tests may mount meanwhile)."""
    nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True).stdout
    filter_ = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True).stdout
    return {
        "sysctl": {key: Path("/proc/sys", key).read_text() for key in KERNEL_SETTINGS},
        "nat": sorted(line for line in nat.splitlines() if line.startswith("-A")),
        "filter": sorted(line for line in filter_.splitlines() if line.startswith(("-A", ":KUBE"))),
        "links": sorted(os.listdir("/sys/class/net")),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/*") if p.is_dir()),
        "mounts": [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                   if str(home) in line or "stead-node-" in line],
    }


def test_up_runs_pods_and_down_leaves_nothing_behind(tmp_path: Path, binaries: Binaries) -> None:
    home = tmp_path / "node-home"
    before = _machine_state(home)
    env = {key: value for key, value in os.environ.items() if key not in PORT_VARIABLES.values()}
    env.update(STEAD_HOME=str(home), STEAD_NODE_BRIDGE=BRIDGE, STEAD_NODE_SUBNET=SUBNET)
    env.pop("KUBECONFIG", None)
    ports = [word for setting in PORT_SETTINGS for word in (setting.flag, str(free_port()))]

    def stead(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(STEAD), "cluster", *args], env=env, capture_output=True, text=True, timeout=600)

    def kubectl(*args: str, check: bool = True) -> str:
        result = subprocess.run([str(binaries.kubectl), "--kubeconfig", str(home / "kubeconfig"), *args],
                                capture_output=True, text=True, timeout=120)
        assert not check or result.returncode == 0, result.stderr
        return result.stdout + result.stderr

    up = stead("up", *ports)
    try:
        assert up.returncode == 0, up.stderr
        assert f"node stead-node Ready ({NODE_IP} on bridge {BRIDGE})" in up.stdout
        status = stead("status")
        assert status.returncode == 0, status.stderr
        assert "node:" in status.stdout and "Ready (stead-node)" in status.stdout
        pids = {line.split(":")[0].strip(): int(line.rsplit("pid", 1)[1])
                for line in status.stdout.splitlines() if line.split(":")[0].strip() in
                ("containerd", "kubelet", "kube-scheduler")}
        assert len(pids) == 3, status.stdout

        node = json.loads(kubectl("get", "node", "stead-node", "-o", "json"))
        assert {"type": "InternalIP", "address": NODE_IP} in node["status"]["addresses"]

        # A Pod, scheduled by the scheduler and run by the kubelet (the sandbox image is the only one here).
        kubectl("run", "sleeper", f"--image={PAUSE_IMAGE}", "--image-pull-policy=Never", "--restart=Never")
        kubectl("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")
        pod = json.loads(kubectl("get", "pod", "sleeper", "-o", "json"))
        assert pod["spec"]["nodeName"] == "stead-node"
        assert pod["status"]["podIP"].startswith("10.90.")
        # The API server reaches the kubelet with its client certificate (logs go through it) ...
        kubectl("logs", "sleeper")
        # ... and nobody reaches it without one.
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"https://{NODE_IP}:{KUBELET_PORT}/pods", context=context, timeout=10)
        assert refused.value.code == 401

        nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True).stdout
        assert f"stead-node:{BRIDGE}" in nat
        assert Path(f"/sys/fs/cgroup/memory/stead-{BRIDGE}/kubepods").is_dir()
        mount_ns = os.readlink(f"/proc/{pids['containerd']}/ns/mnt")
        assert mount_ns != os.readlink("/proc/self/ns/mnt")

        again = stead("up")  # idempotent: the same processes
        assert again.returncode == 0, again.stderr
        assert stead("status").stdout == status.stdout
    finally:
        down = stead("down")
    assert down.returncode == 0, down.stderr
    assert not any(process_is_running(pid) for pid in pids.values())

    def gone() -> bool:
        holders = [entry for entry in Path("/proc").iterdir() if entry.name.isdigit()
                   and _readlink(entry / "ns" / "mnt") == mount_ns]
        return not holders
    wait_until(gone, 10, "no process left in the node's mount namespace")
    assert _machine_state(home) == before
    assert "node:" in stead("status").stdout and "stopped" in stead("status").stdout


def _readlink(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
