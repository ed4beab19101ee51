"""End-to-end fixtures: one real local control plane per test session, and Stead operators as processes.

The control plane is the project's own (`operators.cluster`): kube-apiserver, etcd and
kube-controller-manager built from the Go module proxy, on loopback, with an audit log that
the tests read to count what the operator really sent to the API server.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from operators.cluster import Binaries, ClusterInfo, LocalControlPlane, ensure_binaries
from tests.polling import wait_until

if TYPE_CHECKING:
    from operators.cluster.node import LocalNode

ROOT = Path(__file__).resolve().parents[2]
STEAD = Path(sys.executable).parent / "stead"


def stop_process(process: subprocess.Popen[bytes] | None, grace: float = 30) -> None:
    """SIGTERM, `grace` seconds to exit, then SIGKILL: every process a test starts stops this way."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


DOCS_SKIPPED = "docs-skipped"
"""The `user_properties` entry of a docs test (tests/e2e/test_docs.py) naming each block its page marked
`docs-test: skip`: reported at the end of the run, never silently dropped. (A report's properties reach the
terminal from an xdist worker too.)"""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [value for reports in terminalreporter.stats.values() for report in reports
               if getattr(report, "when", None) == "call"
               for name, value in getattr(report, "user_properties", ()) if name == DOCS_SKIPPED]
    if skipped:
        terminalreporter.write_line(f"docs: {len(skipped)} shell blocks marked as not runnable here were not run:")
        for where in skipped:
            terminalreporter.write_line(f"  {where}")


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    return ensure_binaries(progress=lambda line: print(line, file=sys.stderr))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[LocalControlPlane]:
    """The session's control plane; a test that stops a part of it (an outage) starts it again."""
    ports: list[int] = []
    while len(set(ports)) < 4:  # free_port() may give the same port twice once its socket is closed
        ports = [free_port() for _ in range(4)]
    plane = LocalControlPlane(
        tmp_path_factory.mktemp("stead-home"),
        apiserver_port=ports[0], etcd_client_port=ports[1], etcd_peer_port=ports[2],
        controller_manager_port=ports[3], binaries=binaries,
    )
    plane.up()
    try:
        yield plane
    finally:
        plane.down()


@pytest.fixture(scope="session")
def cluster(control_plane: LocalControlPlane) -> ClusterInfo:
    return control_plane.info


Kubectl = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def kubectl(cluster: ClusterInfo, binaries: Binaries) -> Kubectl:
    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(binaries.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    return run


@dataclass
class OperatorProcess:
    """`stead run` as a real process, with its own store, webhook and health ports."""

    cluster: ClusterInfo
    store: Path
    log_path: Path
    webhook_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    config_api_port: int = field(default_factory=free_port)
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [
            str(STEAD), "run", "--kubeconfig", str(self.cluster.kubeconfig), "--install-crds",
            "--store", str(self.store), "--webhook-port", str(self.webhook_port),
            "--health-port", str(self.health_port), "--replica", "stead-0",
            "--config-api-port", str(self.config_api_port),
            "--trust-local-namespaces", "t-test-app*",  # tests/e2e/test_apps.py runs scripts on this host
            "--ssh-allow", "127.0.0.0/8",  # tests/e2e/test_calm_substrates.py: sshd nodes on 127.0.0.2-4
            # tests/e2e/test_egress.py: a private network an operator opened, which holds the Service CIDR;
            # tests/e2e/test_services_notify.py and docs/services.md: notifications' receivers on 127.0.0.77
            "--http-allow-networks", "10.0.0.0/8", "127.0.0.77/32",
            # short, so that tests/e2e/test_tenancy.py sees unreferenced vault entries collected
            "--vault-grace-seconds", "3", "--vault-collect-seconds", "0.5", *self.extra_args,
        ]
        with self.log_path.open("ab") as log:
            env = {**os.environ, "STEAD_HOME": str(self.store.parent)}  # its generated CAs land here, not in ~
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        try:
            wait_until(self._ready, 60, "the operator's /readyz")
        except BaseException:
            self.stop()  # a failed start must not leave an operator running after the tests
            raise

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"operator exited {self.process.returncode}:\n{self.log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        stop_process(self.process)

    def metric(self, name: str, **labels: str) -> float:
        """One sample from `/metrics` (0 when absent); labels match in any order."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5).read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return 0.0


@pytest.fixture(scope="session")
def operator(cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The session's operator; tests that restart it leave it running again."""
    work = tmp_path_factory.mktemp("operator")
    proc = OperatorProcess(cluster, store=work / "store", log_path=work / "operator.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@dataclass(frozen=True)
class AuditEntry:
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user_agent: str
    user: str = ""
    """The authenticated user (for a Pod's service account, system:serviceaccount:<namespace>:<name>)."""
    source_ips: tuple[str, ...] = ()
    """Where the request came from (a Pod's IP for an operator in a Pod), first the client's."""
    code: int = 0
    """The response's status code."""
    api_group: str = ""
    timestamp: str = ""
    """stageTimestamp: when the API server completed the request (RFC 3339, microseconds)."""


class AuditLog:
    """The API server's audit log, read from a byte offset: what really reached the API server."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def since(self, offset: int) -> list[AuditEntry]:
        entries = []
        with self.path.open("rb") as f:
            f.seek(offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # the API server is still writing this line: it is read by the next call
                event = json.loads(raw)
                if event.get("stage") != "ResponseComplete":
                    continue
                ref = event.get("objectRef") or {}
                entries.append(AuditEntry(
                    verb=event.get("verb", ""), resource=ref.get("resource", ""),
                    subresource=ref.get("subresource", ""), namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""), user_agent=event.get("userAgent", ""),
                    user=str((event.get("user") or {}).get("username") or ""),
                    source_ips=tuple(str(ip) for ip in event.get("sourceIPs") or ()),
                    code=int((event.get("responseStatus") or {}).get("code") or 0),
                    api_group=ref.get("apiGroup", ""), timestamp=str(event.get("stageTimestamp") or ""),
                ))
        return entries


@pytest.fixture(scope="session")
def audit(cluster: ClusterInfo) -> AuditLog:
    return AuditLog(cluster.audit_log)


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test."""
    slug = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def env_manifest(name: str, namespace: str, nodes: list[dict[str, Any]] | None = None, **spec: Any) -> str:
    body = {
        "apiVersion": "stead.dev/v1alpha1", "kind": "Environment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"release": "mitaka-9.0", "nodes": nodes if nodes is not None else [
            {"name": "node-1", "roles": ["controller"]}, {"name": "node-2", "roles": ["compute"]},
        ], **spec},
    }
    return json.dumps(body)


def api_call(operator: OperatorProcess, cert: tuple[Path, Path], namespace: str, method: str, path: str,
             body: Any = None, query: str = "") -> tuple[int, Any]:
    """One request to the operator's API server (the configuration API and its extensions) with a client
    certificate, `?namespace=` set: the status and the JSON answer."""
    context = ssl.create_default_context(cafile=str(operator.store.parent / "config-api" / "ca.crt"))
    context.load_cert_chain(*cert)
    url = f"https://127.0.0.1:{operator.config_api_port}{path}?namespace={namespace}{'&' + query if query else ''}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode() or "null")


# --- the operator image, built once per session ----------------------------------------------------

IMAGE_BUILD_SCRIPT = ROOT / "scripts" / "build-image.sh"
IMAGE_BUILD_SECONDS = 1200  # a cold build: mmdebstrap, then pip installing every dependency from PyPI


def buildah(*args: str, timeout: float = 120) -> str:
    result = subprocess.run(["buildah", "--storage-driver", "vfs", *args], capture_output=True, text=True,
                            timeout=timeout, check=False)
    if result.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout.strip()


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    """The image, built by the script `make image` runs, under a tag of this session (removed after):
    built once, for tests/e2e/test_image.py and the tests that run it on a real node."""
    if os.geteuid() != 0:
        pytest.skip("builds with buildah's vfs storage and mounts: needs root")
    tag = f"localhost/stead-e2e:{uuid.uuid4().hex[:10]}"
    started = time.monotonic()
    result = subprocess.run(["sh", str(IMAGE_BUILD_SCRIPT), "build", tag], cwd=ROOT, capture_output=True, text=True,
                            timeout=IMAGE_BUILD_SECONDS, check=False)
    assert result.returncode == 0, f"{IMAGE_BUILD_SCRIPT.name} failed ({result.returncode}):\n{result.stderr[-6000:]}"
    print(f"image {tag} built in {time.monotonic() - started:.0f}s", file=sys.stderr)
    try:
        yield tag
    finally:
        buildah("rmi", tag)


# --- a real node: containerd, runc, kubelet and kube-scheduler beside the session's control plane ----


@pytest.fixture(scope="session")
def node(control_plane: LocalControlPlane, binaries: Binaries) -> Iterator[LocalNode]:
    """One Kubernetes node on this machine (skipped, saying why, where none can run: not root, no
    containerd, runc or CNI plugins). Pods get addresses on its bridge, reachable from the host."""
    from operators.cluster.node import LocalNode, node_unavailable_reason
    from operators.cluster.nodehost import NodeNetwork

    reason = node_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no local node: {reason}")
    local = LocalNode(control_plane, network=NodeNetwork(bridge="steadt0", subnet="10.89.0.0/16"),
                      kubectl=binaries.kubectl, progress=lambda line: print(line, file=sys.stderr))
    try:
        local.up()
        yield local
    finally:
        local.down()


@pytest.fixture(scope="session")
def node_image(node: LocalNode, image: str) -> str:
    """The session's image, in the node's containerd (nothing can be pulled: Pods use it as it is)."""
    started = time.monotonic()
    node.load_image(image)
    print(f"image {image} loaded into the node in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return image


# --- Helm, against the session's cluster --------------------------------------------------------------


@dataclass
class Helm:
    """The cached helm, with empty config, cache and data directories of its own, on the session's cluster."""

    binary: Path
    kubeconfig: Path
    home: Path

    def __call__(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
               "HELM_CACHE_HOME": str(self.home / "cache"), "HELM_CONFIG_HOME": str(self.home / "config"),
               "HELM_DATA_HOME": str(self.home / "data"), "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run([str(self.binary), *args], env=env, capture_output=True, text=True,
                                timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result


@pytest.fixture(scope="session")
def helm_cli(binaries: Binaries, cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(binaries.helm, cluster.kubeconfig, tmp_path_factory.mktemp("helm-home"))


# --- volumes: no dynamic provisioner, so hostPath PersistentVolumes made by hand -------------------------

IMAGE_USER = (65532, 65532)
"""The image's uid:gid (the chart's runAsUser/runAsGroup): fsGroup does not apply to hostPath volumes."""


@dataclass
class HostVolumes:
    """hostPath PersistentVolumes (storageClassName "", Retain), each pre-bound to one claim by claimRef,
    on directories owned by the image's user; `remove` deletes them and their directories."""

    kubectl: Kubectl
    root: Path
    names: list[str] = field(default_factory=list)

    def add(self, namespace: str, claim: str, *, access_modes: tuple[str, ...] = ("ReadWriteOnce",),
            size: str = "1Gi") -> Path:
        name = f"pv-{uuid.uuid4().hex[:10]}"
        path = self.root / name
        path.mkdir(parents=True)
        os.chown(path, *IMAGE_USER)
        path.chmod(0o770)
        body = {"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "stead-e2e"}},
                "spec": {"capacity": {"storage": size}, "accessModes": list(access_modes),
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                         "volumeMode": "Filesystem", "hostPath": {"path": str(path), "type": "Directory"},
                         "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                      "namespace": namespace, "name": claim}}}
        self.kubectl("apply", "-f", "-", input=json.dumps(body))
        self.names.append(name)
        return path

    def claim(self, namespace: str, claim: str, *, access_modes: tuple[str, ...] = ("ReadWriteMany",),
              size: str = "1Gi") -> Path:
        """A claim of our own (not a StatefulSet's) and its volume, bound."""
        path = self.add(namespace, claim, access_modes=access_modes, size=size)
        body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": namespace},
                "spec": {"accessModes": list(access_modes), "storageClassName": "", "volumeName": self.names[-1],
                         "resources": {"requests": {"storage": size}}}}
        self.kubectl("apply", "-f", "-", input=json.dumps(body))
        self.kubectl("wait", "--for=jsonpath={.status.phase}=Bound", "-n", namespace, "--timeout=60s", f"pvc/{claim}")
        return path

    def remove(self) -> None:
        for name in self.names:
            self.kubectl("delete", "pv", name, "--wait=false", "--ignore-not-found", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def host_volumes(kubectl: Kubectl, node: LocalNode) -> Iterator[HostVolumes]:
    """hostPath volumes under the node's volumes directory (what its kubelet sees whatever it mounts)."""
    volumes = HostVolumes(kubectl, node.volumes_dir / f"e2e-{uuid.uuid4().hex[:8]}")
    volumes.root.mkdir(parents=True)
    try:
        yield volumes
    finally:
        volumes.remove()
