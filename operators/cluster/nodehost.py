"""What the local node changes on the machine, and how its `down` undoes it.

`LocalNode` (node.py) starts and stops the node's processes; this module holds the machine-wide
side of it, the part that must be undone exactly: the Pods' bridge and the one NAT rule that lets
Pods reach the loopback API server (marked with a comment, so only ours are removed), the node's
own cgroups, and containerd's private mount namespace (the bind mounts that keep what containerd
and the kubelet write under the node's home, and ``iptables`` hidden from them). Kept apart so that
everything the node does to the host can be read, and checked against ``down``, in one place.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from operators.cluster.build import ControlPlaneError
from operators.cluster.pki import SERVICE_IP
from operators.cluster.processes import LOOPBACK


@dataclass(frozen=True)
class NodeNetwork:
    """The Pods' bridge and address range: the bridge's address is the node's InternalIP."""

    bridge: str = "stead0"
    subnet: str = "10.88.0.0/16"

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def node_ip(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def first_pod_ip(self) -> str:
        return str(self.network.network_address + 10)

    @property
    def rule_comment(self) -> str:
        """Marks the node's nat rules, so ``down`` removes exactly those."""
        return f"stead-node:{self.bridge}"


def make_network(network: NodeNetwork, apiserver_port: int) -> None:
    """The Pods' bridge with the node's address, and the one NAT rule that lets Pods reach the API server."""
    bridge = network.bridge
    if not Path(f"/sys/class/net/{bridge}").exists():
        _run(["ip", "link", "add", bridge, "type", "bridge"])
    _run(["ip", "addr", "replace", f"{network.node_ip}/{network.network.prefixlen}", "dev", bridge])
    _run(["ip", "link", "set", bridge, "up"])
    # Pods dial the `kubernetes` Service; the API server listens on loopback only: one DNAT from
    # the bridge, allowed by route_localnet on the bridge alone (kube-proxy sets it everywhere).
    Path(f"/proc/sys/net/ipv4/conf/{bridge}/route_localnet").write_text("1")
    drop_nat_rules(network)
    apiserver = f"{LOOPBACK}:{apiserver_port}"
    _run(["iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-i", bridge, "-d", f"{SERVICE_IP}/32", "-p", "tcp",
          "--dport", "443", "-j", "DNAT", "--to-destination", apiserver,
          "-m", "comment", "--comment", network.rule_comment])


def drop_nat_rules(network: NodeNetwork) -> None:
    """The NAT rules marked with the network's comment, and no others, removed."""
    if shutil.which("iptables-save") is None:
        return
    result = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, timeout=60,
                            check=False)
    for line in result.stdout.splitlines():
        rule = shlex.split(line)  # iptables-save quotes a comment with a colon
        if rule[:1] == ["-A"] and network.rule_comment in rule:
            _run(["iptables", "-w", "-t", "nat", "-D", *rule[1:]])


def remove_network(network: NodeNetwork) -> None:
    """What `make_network` made, removed: the NAT rule, then the bridge."""
    drop_nat_rules(network)
    if Path(f"/sys/class/net/{network.bridge}").exists():
        _run(["ip", "link", "delete", network.bridge])


def containerd_argv(home: Path) -> list[str]:
    """containerd in a new mount namespace whose binds redirect what it and the kubelet write."""
    binds = [f'mount --bind "{copy}" "/proc/sys/{copy.name.replace(".", "/")}"'
             for copy in sorted(home.joinpath("sysctl").iterdir())]
    binds += [f'mount --bind "{home.joinpath("host", source)}" "{target}"'
              for source, target in (("run", "/run"), ("var-lib", "/var/lib"), ("var-log", "/var/log"))]
    hidden = sorted({os.path.realpath(path) for tool in ("iptables", "ip6tables", "iptables-legacy",
                                                         "ip6tables-legacy", "iptables-nft", "ip6tables-nft")
                     if (path := shutil.which(tool))})
    binds += [f'mount --bind /bin/false "{tool}"' for tool in hidden]
    script = "set -e\n" + "\n".join(binds) + '\nexec containerd --config "$0"\n'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script,
            str(home.joinpath("etc", "containerd.toml"))]


def _run(argv: Sequence[str]) -> None:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"`{' '.join(argv)}` failed (exit {result.returncode})", result.stderr[-2000:])


def _hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (the kubelet's cgroupfs driver creates its cgroups in each)."""
    root = Path("/sys/fs/cgroup")
    return [path for path in sorted(root.iterdir()) if path.is_dir() and (path / "cgroup.procs").exists()]


def make_cgroups(name: str) -> None:
    """The node's cgroup in every hierarchy; a new cpuset starts with no CPUs or memory nodes, so it
    gets its parent's (a process can join only a cpuset that has both)."""
    for hierarchy in _hierarchies():
        directory = hierarchy / name.lstrip("/")
        directory.mkdir(exist_ok=True)
        for setting in ("cpuset.cpus", "cpuset.mems"):
            if (directory / setting).exists() and not (directory / setting).read_text().strip():
                (directory / setting).write_text((hierarchy / setting).read_text())


def remove_cgroups(name: str) -> None:
    """The node's cgroups, empty once its Pods are gone: removed deepest first."""
    for hierarchy in _hierarchies():
        top = hierarchy / name.lstrip("/")
        if not top.is_dir():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                                reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
