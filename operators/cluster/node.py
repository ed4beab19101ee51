"""A real Kubernetes node beside the local control plane: containerd, runc, a kubelet and a scheduler.

Pods really run: Jobs complete, the chart's StatefulSet comes up, ``kubectl logs`` and ``exec``
work. What the node needs from the machine is root, Debian's ``containerd``, ``runc`` and
``containernetworking-plugins`` (``make node-tools`` installs them), and the kubelet and
kube-scheduler that ``build.py`` builds once like kube-apiserver.

Nothing global changes beyond what ``down`` removes, and Pod traffic never leaves the machine:

- containerd and the kubelet share one private mount namespace. In it ``/run``, ``/var/lib`` and
  ``/var/log`` are bind mounts of directories under the node's home, the kernel settings the kubelet
  insists on writing (``vm.overcommit_memory``, ``kernel.panic``, ...) are bind mounts of plain
  files, and ``iptables`` is hidden (the kubelet would add its firewall chains to the host's rules
  every minute). Every mount goes with the namespace's last process.
- The Pods' bridge (``stead0``) is made here with the node's address and no uplink; the CNI bridge
  plugin never acts as a gateway, so ``ip_forward`` stays as it is (0 on these machines) and
  nothing is forwarded off the machine.
- There is no kube-proxy. The API server dials webhooks at their endpoints (aggregator routing) and
  the kubelet at its InternalIP; Pods reach the ``kubernetes`` Service through one DNAT rule from the
  bridge to the loopback API server (tagged with a comment, removed by ``down``), with
  ``route_localnet`` on the bridge alone.
- The kubelet authenticates callers by client certificate (the plane's client CA) or token, and asks
  the API server whether they may (webhook authorization): no anonymous access. The kubelet itself
  is ``system:node:<name>``, held to its own Node and Pods by the Node authorizer.

What the node changes on the machine (bridge, NAT rule, cgroups, mount namespace) is nodehost.py's,
beside what undoes it; what its processes are told (containerd's, CNI's and the kubelet's
configuration) is nodeconfig.py's. This module starts, checks and stops the node.

Machine limits met on the way (no CAP_SYS_RESOURCE, cgroup v1, no registry) are answered in the
configuration below, each where it is set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from operators.cluster.atomicwrite import write_file_atomically
from operators.cluster.build import (
    ControlPlaneError,
    NodeBinaries,
    Progress,
    cached_kubectl,
    ensure_node_binaries,
)
from operators.cluster.controlplane import LocalControlPlane, wait_for_start
from operators.cluster.images import image_base_name, pause_archive
from operators.cluster.nodeconfig import CNI_BIN_DIR, SCHEDULER_PORT, cni_config, containerd_config, kubelet_config
from operators.cluster.nodehost import (
    NodeNetwork,
    containerd_argv,
    make_cgroups,
    make_network,
    remove_cgroups,
    remove_network,
)
from operators.cluster.pki import KUBELET_CLIENT_USER, ensure_client_certificate
from operators.cluster.planeconfig import render_kubeconfig
from operators.cluster.processes import ProcessTable, process_cmdline

DEFAULT_NODE_NAME: Final = "stead-node"
NETWORK_FILE: Final = "network.json"
"""The network a home's node was started with, so `down` and `status` find it again."""
READY_TIMEOUT_SECONDS: Final = 180.0
STOP_TIMEOUT_SECONDS: Final = 30.0
CTR_TIMEOUT_SECONDS: Final = 300.0

CONTAINERD: Final = "containerd"
KUBELET: Final = "kubelet"
SCHEDULER: Final = "kube-scheduler"
PROCESS_NAMES: Final = (CONTAINERD, SCHEDULER, KUBELET)
"""Start order; they stop in reverse."""

REQUIRED_TOOLS: Final = ("containerd", "ctr", "runc", "unshare", "nsenter", "mount", "ip", "iptables")
CNI_PLUGINS: Final = ("bridge", "host-local", "loopback")
KERNEL_SETTINGS: Final = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                          "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
"""What the kubelet writes at start (its ``protectKernelDefaults`` would refuse to start instead): in
the node's mount namespace these are plain files holding the machine's values, so nothing changes."""
KUBELET_API_ROLE_BINDING: Final = "stead:apiserver-kubelet-client"


class NodeUnavailable(ControlPlaneError):
    """This machine cannot run the node (not root, or a package is missing): the message says which."""


@dataclass(frozen=True)
class NodeStatus:
    """One home's node, for ``stead cluster status``."""

    name: str
    pids: Mapping[str, int]
    ready: bool

    def rows(self) -> list[tuple[str, str]]:
        if self.ready:
            state = f"Ready ({self.name})"
        elif not self.pids:
            state = "stopped"
        else:
            state = f"not Ready ({self.name}; its logs are in the home's logs/)"
        rows = [("node", state)]
        rows += [(name, f"pid {self.pids[name]}" if name in self.pids else "not running") for name in PROCESS_NAMES]
        return rows


def missing_tools() -> list[str]:
    """The commands and CNI plugins the node needs that this machine lacks."""
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    missing += [f"{CNI_BIN_DIR}/{plugin}" for plugin in CNI_PLUGINS if not os.access(CNI_BIN_DIR / plugin, os.X_OK)]
    return missing


def node_unavailable_reason() -> str | None:
    """Why no node can run on this machine, in one line; None when it can."""
    if os.geteuid() != 0:
        return ("the local node needs root (a network bridge, a mount namespace, cgroups): "
                "run as root, or without a node (Pods stay Pending)")
    missing = missing_tools()
    if missing:
        return (f"the local node needs {', '.join(missing)}: `make node-tools` installs Debian's containerd, "
                "runc and containernetworking-plugins")
    return None


class LocalNode:
    """The node of one local control plane, with its state under ``<plane home>/node``.

    ``up`` is idempotent, ``down`` stops what ``up`` started and removes the bridge, the nat rule and
    the kubelet's cgroups; containerd's images stay on disk for the next ``up``. One node per bridge:
    two planes on one machine give their nodes different ``NodeNetwork``s and ports.
    """

    def __init__(
        self,
        plane: LocalControlPlane,
        *,
        name: str = DEFAULT_NODE_NAME,
        network: NodeNetwork | None = None,
        binaries: NodeBinaries | None = None,
        kubectl: Path | None = None,
        ready_timeout: float = READY_TIMEOUT_SECONDS,
        progress: Progress | None = None,
    ) -> None:
        self.plane = plane
        self.name = name
        self.home = plane.home / "node"
        # A node that runs keeps its network until `down`, whatever a later caller asks for.
        self.network = self.recorded_network() or network or NodeNetwork()
        self._binaries = binaries
        self._kubectl = kubectl
        self.ready_timeout = ready_timeout
        self._progress: Progress = progress or (lambda line: None)
        self._processes = ProcessTable(self.home / "run", owner_mark=str(self.home))

    # -- layout --

    @property
    def socket(self) -> Path:
        """containerd's socket: in a short directory of its own, since a Unix socket's path may not
        exceed 104 bytes (a home under pytest's temporary directories is longer)."""
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"stead-node-{digest}" / "containerd.sock"

    def _path(self, *parts: str) -> Path:
        return self.home.joinpath(*parts)

    def log_path(self, name: str) -> Path:
        return self.plane.logs_dir / f"{name}.log"

    @property
    def cgroup_root(self) -> str:
        """The node's own cgroup (``kubepods`` and the Pods' below it), so that two nodes on one
        machine never see each other's Pods as orphans to clean up, and ``down`` removes only its own."""
        return f"/stead-{self.network.bridge}"

    @property
    def volumes_dir(self) -> Path:
        """Where hostPath volumes of the node's Pods may live (visible inside its mount namespace)."""
        return self._path("volumes")

    def recorded_network(self) -> NodeNetwork | None:
        """The network this home's node last started with."""
        try:
            data = json.loads((self.home / NETWORK_FILE).read_text())
            return NodeNetwork(bridge=str(data["bridge"]), subnet=str(data["subnet"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # -- public operations --

    def up(self) -> None:
        """Start containerd, the scheduler and the kubelet (or find them running), and wait for the
        Node to be Ready. The control plane must be up. On failure everything started is stopped
        and ControlPlaneError carries the failing log's tail."""
        reason = node_unavailable_reason()
        if reason:
            raise NodeUnavailable(reason)
        if len(self._processes.alive(PROCESS_NAMES)) == len(PROCESS_NAMES) and self._ready():
            return
        self.down()
        bridge = self.network.bridge
        if Path(f"/sys/class/net/{bridge}").exists() and self.recorded_network() is None:
            raise NodeUnavailable(f"the network interface {bridge} exists and is not this home's node's: another "
                                  "node runs on it; give this one another NodeNetwork")
        binaries = self._binaries or ensure_node_binaries(progress=self._progress)
        pause = pause_archive(progress=self._progress)
        try:
            self._prepare()
            write_file_atomically(self.home / NETWORK_FILE, json.dumps(
                {"bridge": self.network.bridge, "subnet": self.network.subnet}).encode())
            self._bind_api_roles()
            make_cgroups(self.cgroup_root)
            make_network(self.network, self.plane.ports.apiserver)
            self._start(binaries, pause)
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Stop the node: the kubelet first, then every container, the scheduler and containerd; then
        remove the node's cgroups, the nat rule and the bridge. Safe to run at any time; a home whose
        node never started touches nothing."""
        if self.recorded_network() is None:
            return
        survivors = self._processes.stop([KUBELET], STOP_TIMEOUT_SECONDS)
        if CONTAINERD in self._processes.alive([CONTAINERD]):
            self._kill_containers()
        survivors += self._processes.stop([SCHEDULER, CONTAINERD], STOP_TIMEOUT_SECONDS)
        self._kill_leftover_shims()
        if survivors:
            pids = ", ".join(f"{record.name} pid {record.pid}" for record in survivors)
            raise ControlPlaneError(f"could not stop {pids} even with SIGKILL")
        remove_cgroups(self.cgroup_root)
        remove_network(self.network)
        shutil.rmtree(self.socket.parent, ignore_errors=True)
        (self.home / NETWORK_FILE).unlink(missing_ok=True)

    def status(self) -> NodeStatus:
        pids = self._processes.alive(PROCESS_NAMES)
        return NodeStatus(name=self.name, pids=pids, ready=len(pids) == len(PROCESS_NAMES) and self._ready())

    def load_image(self, reference: str) -> None:
        """Copy an image from buildah's storage (what ``make image`` builds) into the node's containerd,
        where Pods find it under the same name without a registry."""
        if shutil.which("buildah") is None:
            raise ControlPlaneError("loading an image needs buildah (`make image-tools` installs it)")
        with tempfile.TemporaryDirectory(prefix="stead-image-", dir=self.home) as work:
            archive = Path(work) / "image.tar"
            result = subprocess.run(
                ["buildah", "--storage-driver", "vfs", "push", "--quiet", reference,
                 f"oci-archive:{archive}:{reference}"],
                capture_output=True, text=True, timeout=CTR_TIMEOUT_SECONDS, check=False,
            )
            if result.returncode != 0:
                raise ControlPlaneError(f"buildah could not export {reference}", result.stderr[-2000:])
            self.import_archive(archive, base_name=image_base_name(reference))
        if reference not in self.images():
            raise ControlPlaneError(f"{reference} is not in the node's containerd after the import")

    def import_archive(self, archive: Path, base_name: str | None = None) -> None:
        """Import an OCI or Docker image archive into the node's containerd (the CRI's namespace)."""
        if CONTAINERD not in self._processes.alive([CONTAINERD]):
            raise ControlPlaneError("the local node is not running: `stead cluster up` starts it")
        args = ["images", "import", "--digests"]
        if base_name:
            args += ["--base-name", base_name]
        self._ctr(*args, str(archive))

    def images(self) -> list[str]:
        return self._ctr("images", "list", "--quiet").split()

    # -- starting --

    def _prepare(self) -> None:
        for directory in ("etc", "run", "cni/net.d", "containerd", "sysctl", "host/run", "host/var-lib",
                          "host/var-log", "volumes"):
            self._path(directory).mkdir(parents=True, exist_ok=True)
        self.socket.parent.mkdir(mode=0o700, exist_ok=True)
        self.home.chmod(0o711)
        write_file_atomically(self._path("etc", "containerd.toml"), containerd_config(self.home, self.socket).encode())
        # Renamed into place whole: containerd watches the directory and would read half a file.
        write_file_atomically(self._path("cni", "net.d", "10-stead.conflist"),
                              json.dumps(cni_config(self.network, self._path("cni", "ipam")), indent=2).encode())
        kubelet = kubelet_config(self.socket, self.cgroup_root, self.network, self.plane.pki.client_ca_cert)
        write_file_atomically(self._path("etc", "kubelet.yaml"), yaml.safe_dump(kubelet, sort_keys=False).encode())
        for setting in KERNEL_SETTINGS:
            copy = self._path("sysctl", setting.replace("/", "."))
            if not copy.exists():
                copy.write_text(Path("/proc/sys", setting).read_text())
        pki = self.plane.pki
        server = self.plane.info.server
        for name, user, groups in ((KUBELET, f"system:node:{self.name}", ["system:nodes"]),
                                   (SCHEDULER, "system:kube-scheduler", [])):
            cert, key = self._path("etc", f"{name}.crt"), self._path("etc", f"{name}.key")
            ensure_client_certificate(pki, cert, key, user, groups)
            kubeconfig = render_kubeconfig(server, pki.serving_ca_cert.read_bytes(), cert.read_bytes(),
                                           key.read_bytes(), user=user)
            write_file_atomically(self._path("etc", f"{name}.kubeconfig"), kubeconfig.encode(), 0o600)

    def _kubectl_path(self) -> Path:
        kubectl = self._kubectl or cached_kubectl()
        if kubectl is None:
            raise ControlPlaneError("kubectl is not built yet: `stead cluster build` builds it")
        return kubectl

    def _kubectl_run(self, *args: str, input: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(self._kubectl_path()), "--kubeconfig", str(self.plane.kubeconfig_path), *args],
            input=input, capture_output=True, text=True, timeout=60, check=False,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args[:3])} failed", result.stderr[-2000:])
        return result.stdout

    def _bind_api_roles(self) -> None:
        """The API server may use the kubelet's API (logs, exec): its client user gets the role the
        bootstrap policy made for that."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": KUBELET_API_ROLE_BINDING, "labels": {"app.kubernetes.io/managed-by": "stead"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:kubelet-api-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}],
        }
        self._kubectl_run("apply", "-f", "-", input=json.dumps(binding))

    def _start(self, binaries: NodeBinaries, pause: Path) -> None:
        deadline = time.monotonic() + self.ready_timeout
        started: dict[str, subprocess.Popen[bytes]] = {}
        self._progress("starting containerd in the node's mount namespace")
        started[CONTAINERD] = self._launch(CONTAINERD, containerd_argv(self.home))
        wait_for_start(self._ctr_answers, "containerd's socket", started, deadline, self.ready_timeout,
                       self.log_path)
        self.import_archive(pause)
        self._progress("starting kube-scheduler")
        started[SCHEDULER] = self._launch(SCHEDULER, [
            str(binaries.kube_scheduler),
            f"--kubeconfig={self._path('etc', 'kube-scheduler.kubeconfig')}",
            f"--bind-address={self.network.node_ip}",
            f"--secure-port={SCHEDULER_PORT}",
            "--leader-elect=false",
        ])
        self._progress(f"starting the kubelet of node {self.name} ({self.network.node_ip})")
        containerd_pid = started[CONTAINERD].pid
        started[KUBELET] = self._launch(KUBELET, [
            "nsenter", f"--target={containerd_pid}", "--mount", "--",
            str(binaries.kubelet),
            f"--config={self._path('etc', 'kubelet.yaml')}",
            f"--kubeconfig={self._path('etc', 'kubelet.kubeconfig')}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.network.node_ip}",
            "--v=1",
        ])
        wait_for_start(self._ready, f"node {self.name} to be Ready", started, deadline, self.ready_timeout,
                       self.log_path)

    def _launch(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        self.plane.logs_dir.mkdir(parents=True, exist_ok=True)
        return self._processes.launch(name, argv, log=self.log_path(name), cwd=self.home)

    def _ready(self) -> bool:
        try:
            output = self._kubectl_run("get", "node", self.name, "-o",
                                       'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False)
        except (OSError, subprocess.SubprocessError, ControlPlaneError):
            return False
        return output.strip() == "True"

    # -- containerd --

    def _ctr(self, *args: str) -> str:
        result = subprocess.run(["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
                                capture_output=True, text=True, timeout=CTR_TIMEOUT_SECONDS, check=False)
        if result.returncode != 0:
            raise ControlPlaneError(f"ctr {' '.join(args[:2])} failed", result.stderr[-2000:])
        return result.stdout

    def _ctr_answers(self) -> bool:
        try:
            self._ctr("version")
        except (ControlPlaneError, subprocess.SubprocessError):
            return False
        return True

    def _kill_containers(self) -> None:
        """Every container of the node's Pods, killed (containerd's CRI plugin then deletes the tasks,
        and their shims exit); what is still listed after a few seconds is deleted by force."""
        def tasks() -> list[str]:
            try:
                return self._ctr("tasks", "list", "--quiet").split()
            except (ControlPlaneError, subprocess.SubprocessError):
                return []

        running = tasks()
        for task in running:
            with contextlib.suppress(ControlPlaneError, subprocess.SubprocessError):
                self._ctr("tasks", "kill", "--signal", "SIGKILL", task)
        deadline = time.monotonic() + 10
        while running and time.monotonic() < deadline:
            time.sleep(0.1)
            running = tasks()
        for task in running:
            with contextlib.suppress(ControlPlaneError, subprocess.SubprocessError):
                self._ctr("tasks", "delete", "--force", task)

    def _kill_leftover_shims(self) -> None:
        """A shim outlives containerd by design; ours name our socket in their command line."""
        marker = str(self.socket)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                argv = process_cmdline(int(entry.name))
                if argv and "containerd-shim" in Path(argv[0]).name and marker in argv:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(entry.name), signal.SIGKILL)
