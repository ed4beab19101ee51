"""The image (Dockerfile): built here with buildah, then run the way the chart runs it.

`scripts/build-image.sh` (what `make image` runs) builds the image from a local Debian base. Its
root filesystem (`buildah mount`) is then run as a pod of the chart would run it, everything read
from the chart rendered with the cached helm: the container's args, env and volumeMounts, the
pod's volumes and the securityContexts. The process runs as the chart's uid:gid (65532:65532),
with no capabilities and no_new_privs, in its own mount and PID namespaces, on the image's root
filesystem mounted read-only (readOnlyRootFilesystem), with only the chart's volumes mounted on
it: emptyDirs and the store's claim writable, the webhook Secret read-only (the chart's own
certificate, mode defaultMode, group fsGroup). So the image and the chart cannot drift apart: a
flag the image's `stead` lacks, a path the chart mounts that the image does not expect, a write
outside the volumes, fails here.

Network: the host's (the API server of the session's control plane listens on loopback), so
the chart's ports are replaced by free ones in the args; nothing else is added to them but
`--install-crds` (the chart installs the CRDs itself) and `--namespace` (only the test's
namespace is watched, so that the session's operator has the cluster to itself). In place of the
pod's service account, the session's kubeconfig is mounted read-only and named by $KUBECONFIG.

Needs root (buildah's vfs storage, mount namespaces): CI runs `make test` as root.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cluster import Binaries, ClusterInfo
from operators.cluster.versions import KUBERNETES_VERSION
from tests.e2e.conftest import IMAGE_BUILD_SECONDS, buildah, free_port
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "stead"
RELEASE = "stead"
BUILD_SECONDS = IMAGE_BUILD_SECONDS  # the session's `image` fixture (conftest.py) builds it once
# Test-only: the kubeconfig of the session's control plane, where a pod has its service account.
KUBECONFIG_DIR = "/run/secrets/stead-e2e"

pytestmark = [
    pytest.mark.image,
    pytest.mark.timeout(BUILD_SECONDS + 300),
    pytest.mark.skipif(os.geteuid() != 0, reason="builds with buildah's vfs storage and mounts: needs root"),
]

Manifest = dict[str, Any]


# --- the chart ---------------------------------------------------------------------------------------


def render(binaries: Binaries, namespace: str) -> list[Manifest]:
    """`helm template` of the chart's defaults, with helm's own directories kept out of ~."""
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "HELM_CACHE_HOME": f"{home}/cache",
               "HELM_CONFIG_HOME": f"{home}/config", "HELM_DATA_HOME": f"{home}/data",
               "KUBECONFIG": f"{home}/no-kubeconfig"}
        result = subprocess.run(
            [str(binaries.helm), "template", RELEASE, str(CHART), "--namespace", namespace,
             "--kube-version", KUBERNETES_VERSION],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@dataclass(frozen=True)
class ChartPod:
    """The operator's pod as the chart renders it."""

    objects: list[Manifest]
    namespace: str

    @property
    def statefulset(self) -> Manifest:
        [sts] = [o for o in self.objects if o["kind"] == "StatefulSet"]
        return sts

    @property
    def pod(self) -> Manifest:
        spec: Manifest = self.statefulset["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> Manifest:
        annotations = self.statefulset["spec"]["template"]["metadata"]["annotations"]
        name = annotations["kubectl.kubernetes.io/default-container"]
        [container] = [c for c in self.pod["containers"] if c["name"] == name]
        return container

    @property
    def pod_name(self) -> str:
        return f"{self.statefulset['metadata']['name']}-0"

    def security(self, field: str) -> Any:
        """A securityContext field: the container's, else the pod's (as the kubelet resolves it)."""
        container = self.container.get("securityContext") or {}
        return container[field] if field in container else (self.pod.get("securityContext") or {}).get(field)

    def volume(self, name: str) -> Manifest:
        found = [v for v in self.pod.get("volumes") or [] if v["name"] == name]
        found += [{"name": name, "persistentVolumeClaim": t["spec"]}
                  for t in self.statefulset["spec"].get("volumeClaimTemplates") or [] if t["metadata"]["name"] == name]
        assert len(found) == 1, f"volume {name!r}: {len(found)} definitions in the chart"
        return found[0]

    def secret_data(self, name: str) -> dict[str, bytes]:
        [secret] = [o for o in self.objects if o["kind"] == "Secret" and o["metadata"]["name"] == name]
        return {key: base64.b64decode(value) for key, value in secret["data"].items()}

    def env(self) -> dict[str, str]:
        """The container's env, fieldRefs resolved as the kubelet would for the first replica."""
        fields = {"metadata.name": self.pod_name, "metadata.namespace": self.namespace}
        env = {}
        for var in self.container.get("env") or []:
            if "value" in var:
                env[var["name"]] = var["value"]
            else:
                path = var["valueFrom"]["fieldRef"]["fieldPath"]
                assert path in fields, f"env {var['name']}: the test does not know fieldRef {path}"
                env[var["name"]] = fields[path]
        return env


# --- the image, run as the chart runs it ---------------------------------------------------------------


@dataclass
class Mount:
    name: str
    host: Path
    path: str
    read_only: bool


@dataclass
class Sandbox:
    """The image's root filesystem (a buildah working container) and its configuration."""

    rootfs: Path
    config: Manifest  # the OCI image config: User, Env, Entrypoint, Cmd, WorkingDir, Labels

    @property
    def user(self) -> tuple[int, int]:
        user, _, group = self.config["User"].partition(":")
        return int(user), int(group)

    def env(self) -> dict[str, str]:
        return dict(item.partition("=")[::2] for item in self.config.get("Env") or [])

    def command(self, args: list[str], *, mounts: list[Mount], user: tuple[int, int],
                read_only_root: bool = True) -> list[str]:
        """argv running the entrypoint with `args` inside the image: PID and mount namespaces of its
        own, /proc and a minimal /dev, `mounts` on the root filesystem, the root read-only, then
        chroot to it, drop to `user` (no capabilities left) with no_new_privs."""
        root = str(self.rootfs)
        for mount in mounts:
            self._check_mount_point(mount.path)
        lines = ["set -eu", f"R={shlex.quote(root)}", 'mount --bind "$R" "$R"',
                 'mount -t proc -o nosuid,nodev,noexec proc "$R/proc"',
                 'mount -t tmpfs -o nosuid,mode=755,size=1m dev "$R/dev"',
                 'for n in null zero full random urandom tty; do touch "$R/dev/$n"; '
                 'mount --bind "/dev/$n" "$R/dev/$n"; done',
                 'mkdir "$R/dev/shm" && mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m shm "$R/dev/shm"',
                 'ln -s /proc/self/fd "$R/dev/fd"']
        for mount in mounts:
            target = f'"$R"{shlex.quote(mount.path)}'
            # As a container runtime does: a mount point missing from the image is made (in the
            # working container, before its root is made read-only).
            lines += [f"mkdir -p {target}", f"mount --bind {shlex.quote(str(mount.host))} {target}"]
            if mount.read_only:
                lines.append(f"mount -o remount,bind,ro,nosuid,nodev {target}")
        if read_only_root:
            lines.append('mount -o remount,bind,ro "$R"')
        uid, gid = user
        lines.append(f'exec setpriv --no-new-privs unshare --root="$R" --wd={shlex.quote(self.workdir)} '
                     f'--setgid {gid} --setuid {uid} -- "$@"')
        entrypoint = list(self.config.get("Entrypoint") or [])
        return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
                "sh", "-c", "\n".join(lines), "sandbox", *entrypoint, *args]

    @property
    def workdir(self) -> str:
        return str(self.config.get("WorkingDir") or "/")

    def _check_mount_point(self, path: str) -> None:
        """No component of a mount point may be a symbolic link: it would resolve on the host."""
        assert path.startswith("/"), path
        current = self.rootfs
        for part in Path(path).parts[1:]:
            current = current / part
            assert not current.is_symlink(), f"mount point {path}: {current} is a symbolic link in the image"


@pytest.fixture(scope="module")
def sandbox(image: str) -> Iterator[Sandbox]:
    container = buildah("from", "--pull=false", "--quiet", image)
    try:
        rootfs = Path(buildah("mount", container))
        config = json.loads(buildah("inspect", "--type", "image", image))["OCIv1"]["config"]
        yield Sandbox(rootfs, config)
    finally:
        buildah("rm", container)


@pytest.fixture(scope="module")
def chart(binaries: Binaries) -> ChartPod:
    return ChartPod(render(binaries, "stead-system"), "stead-system")


def volumes(chart: ChartPod, work: Path) -> list[Mount]:
    """A host directory for each of the container's volumeMounts, made as the kubelet makes it."""
    fs_group = (chart.pod.get("securityContext") or {}).get("fsGroup")
    mounts = []
    for mount in chart.container.get("volumeMounts") or []:
        volume = chart.volume(mount["name"])
        host = work / mount["name"]
        host.mkdir(parents=True)
        read_only = bool(mount.get("readOnly"))
        if "emptyDir" in volume:
            host.chmod(0o777)
        elif "persistentVolumeClaim" in volume:  # a fresh claim, given to fsGroup
            assert fs_group is not None, "the store's claim is writable by the operator only through fsGroup"
            os.chown(host, 0, fs_group)
            host.chmod(0o2775)
        elif "secret" in volume:  # the chart's own Secret, files of group fsGroup, mode defaultMode
            read_only = True
            mode = volume["secret"].get("defaultMode", 0o644)
            for key, value in chart.secret_data(volume["secret"]["secretName"]).items():
                (host / key).write_bytes(value)
                os.chown(host / key, 0, fs_group if fs_group is not None else 0)
                (host / key).chmod(mode)
        else:
            raise AssertionError(f"volume {mount['name']}: the test knows emptyDir, secret and the claims: {volume}")
        mounts.append(Mount(mount["name"], host, mount["mountPath"], read_only))
    return mounts


def user_of(chart: ChartPod, sandbox: Sandbox) -> tuple[int, int]:
    uid, gid = chart.security("runAsUser"), chart.security("runAsGroup")
    return (uid if uid is not None else sandbox.user[0]), (gid if gid is not None else sandbox.user[1])


def run_in_image(sandbox: Sandbox, chart: ChartPod, work: Path, args: list[str], *,
                 entrypoint: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """`args` given to the entrypoint (or to `entrypoint`), in the chart's pod, to completion."""
    config = sandbox.config if entrypoint is None else {**sandbox.config, "Entrypoint": entrypoint}
    runner = Sandbox(sandbox.rootfs, config)
    command = runner.command(args, mounts=volumes(chart, work),
                             user=user_of(chart, sandbox), read_only_root=chart.security("readOnlyRootFilesystem"))
    env = {**sandbox.env(), **chart.env()}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


# --- 1. the image's configuration agrees with the chart ----------------------------------------------


@pytest.mark.e2e
def test_image_config_matches_the_chart(sandbox: Sandbox, chart: ChartPod) -> None:
    config = sandbox.config
    # Numeric, non-root, and the one the chart runs as (runAsNonRoot checks the image's numeric user).
    assert config["User"] == "65532:65532"
    assert user_of(chart, sandbox) == sandbox.user
    assert chart.security("runAsNonRoot") is True
    assert chart.security("readOnlyRootFilesystem") is True
    assert chart.security("allowPrivilegeEscalation") is False  # what setpriv --no-new-privs emulates
    assert chart.security("capabilities") == {"drop": ["ALL"]}  # a non-root uid keeps none
    # The entrypoint is `stead`, the chart gives the command: no `stead run` baked into the image.
    assert Path(config["Entrypoint"][-1]).name == "stead"
    assert chart.container.get("command") is None
    assert not chart.container["args"][0].startswith("-")  # the command (`run`), then its flags
    assert config["WorkingDir"] == sandbox.env()["HOME"] == sandbox.env()["STEAD_HOME"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["Labels"]["org.opencontainers.image.version"] == pyproject["project"]["version"]
    # Every port the chart declares is one the image exposes.
    ports = {f"{p['containerPort']}/{p['protocol'].lower()}" for p in chart.container["ports"]}
    assert ports <= set(config.get("ExposedPorts") or {})
    # The installed tree is root's: the operator cannot change its own code, even without a read-only root.
    venv = sandbox.rootfs / Path(config["Entrypoint"][-1]).relative_to("/").parent.parent
    assert venv.stat().st_uid == 0
    assert not list(venv.glob("lib/python3*/site-packages/pip")), "pip is left in the image"


# --- 2. as uid 65532 on a read-only root, only the chart's volumes are writable ----------------------

PROBE = """
import json, os, pathlib, sys
writes = {}
for path in sys.argv[1:]:
    try:
        pathlib.Path(path, f"probe-{os.getpid()}").write_text("x")
        writes[path] = "ok"
    except OSError as error:
        writes[path] = error.strerror
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd(),
                  "pid": os.getpid(), "writes": writes,
                  "caps": {k: int(status[k], 16) for k in ("CapEff", "CapPrm", "CapAmb")},
                  "no_new_privs": int(status["NoNewPrivs"])}))
"""


@pytest.mark.e2e
def test_read_only_root_and_the_chart_volumes(sandbox: Sandbox, chart: ChartPod, tmp_path: Path) -> None:
    python = str(Path(sandbox.config["Entrypoint"][-1]).parent / "python")
    writable = {m["mountPath"] for m in chart.container["volumeMounts"] if not m.get("readOnly")}
    read_only = {m["mountPath"] for m in chart.container["volumeMounts"] if m.get("readOnly")}
    elsewhere = ["/", sandbox.workdir, "/etc", "/opt", "/var/tmp", str(Path(python).parent)]
    result = run_in_image(sandbox, chart, tmp_path, ["-c", PROBE, *sorted(writable), *sorted(read_only), *elsewhere],
                          entrypoint=[python])
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert (seen["uid"], seen["gid"]) == (65532, 65532)
    assert seen["cwd"] == sandbox.workdir
    assert seen["pid"] == 1  # a PID namespace of its own, as in a pod
    assert seen["caps"] == {"CapEff": 0, "CapPrm": 0, "CapAmb": 0}
    assert seen["no_new_privs"] == 1
    assert {path: seen["writes"][path] for path in writable} == dict.fromkeys(writable, "ok")
    for path in [*read_only, *elsewhere]:
        assert seen["writes"][path] == "Read-only file system", (path, seen["writes"][path])
    # What it wrote to the writable volumes is on the host's directories, owned by 65532.
    written = [p for p in tmp_path.rglob("probe-*")]
    assert len(written) == len(writable)
    assert {p.stat().st_uid for p in written} == {65532}


# --- 3. the CLI in the image ---------------------------------------------------------------------------


@pytest.mark.e2e
def test_help_and_version(sandbox: Sandbox, chart: ChartPod, tmp_path: Path) -> None:
    result = run_in_image(sandbox, chart, tmp_path, ["--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: stead")
    assert result.stderr == ""  # no warning on start-up (a cache it cannot write, say)
    command = run_in_image(sandbox, chart, tmp_path / "command", [chart.container["args"][0], "--help"])
    assert command.returncode == 0, command.stderr  # the command the chart runs exists in the image
    if "--version" not in result.stdout:
        pytest.skip("`stead --version` does not exist yet: `stead --help` checked instead")
    version = run_in_image(sandbox, chart, tmp_path / "version", ["--version"])
    assert version.returncode == 0, version.stderr
    assert sandbox.config["Labels"]["org.opencontainers.image.version"] in version.stdout


@pytest.mark.e2e
def test_crds_of_the_image_are_the_repository_s(sandbox: Sandbox, chart: ChartPod, tmp_path: Path) -> None:
    """The models in the image generate exactly the CRDs checked in (crds/ and the chart's copy)."""
    [scratch] = [m for m in chart.container["volumeMounts"] if "emptyDir" in chart.volume(m["name"])]
    result = run_in_image(sandbox, chart, tmp_path, ["crds", "--dir", f"{scratch['mountPath']}/crds"])
    assert result.returncode == 0, result.stderr
    generated = tmp_path / scratch["name"] / "crds"
    for checked_in in (REPO / "crds", CHART / "files" / "crds"):
        assert sorted(p.name for p in generated.iterdir()) == sorted(p.name for p in checked_in.glob("*.yaml"))
        for path in generated.iterdir():
            assert path.read_text() == (checked_in / path.name).read_text(), f"{checked_in / path.name} differs"


# --- 4. the operator, with the chart's arguments, against the local control plane -------------------


def with_free_ports(args: list[str], ports: dict[str, int]) -> tuple[list[str], dict[str, int]]:
    """The chart's args with each `--...-port=N` of a container port N given a free port instead
    (the test shares the host's network), and the free port of each port name."""
    by_number = {number: name for name, number in ports.items()}
    free: dict[str, int] = {}
    replaced = []
    for arg in args:
        flag, _, value = arg.partition("=")
        if flag.startswith("--") and flag.endswith("-port") and value.isdigit() and int(value) in by_number:
            free[by_number[int(value)]] = free_port()
            arg = f"{flag}={free[by_number[int(value)]]}"
        replaced.append(arg)
    assert set(free) == set(ports), f"container ports the args do not name: {set(ports) - set(free)}"
    return replaced, free


def stop(process: subprocess.Popen[bytes], grace: float, log_path: Path) -> int:
    """SIGTERM to the sandbox's processes, as the kubelet stops a container; its exit code."""
    if process.poll() is not None:
        return process.returncode
    os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        raise AssertionError(f"the operator ignored SIGTERM:\n{log_path.read_text()[-4000:]}") from None


@pytest.mark.e2e
def test_operator_runs_with_the_chart_s_args_until_ready(
    sandbox: Sandbox, binaries: Binaries, cluster: ClusterInfo, namespace: str, tmp_path: Path,
) -> None:
    pod = ChartPod(render(binaries, namespace), namespace)  # STEAD_NAMESPACE: the (test's) release namespace
    container = pod.container
    args, ports = with_free_ports(container["args"], {p["name"]: p["containerPort"] for p in container["ports"]})
    args += ["--install-crds", "--namespace", namespace]
    work = tmp_path / "volumes"
    work.mkdir()
    mounts = volumes(pod, work)
    kube = tmp_path / "kubeconfig"
    kube.mkdir()
    (kube / "config").write_bytes(cluster.kubeconfig.read_bytes())
    os.chown(kube / "config", 0, sandbox.user[1])
    (kube / "config").chmod(0o440)
    mounts.append(Mount("kubeconfig", kube, KUBECONFIG_DIR, read_only=True))
    command = sandbox.command(args, mounts=mounts, user=user_of(pod, sandbox),
                              read_only_root=pod.security("readOnlyRootFilesystem"))
    env = {**sandbox.env(), **pod.env(), "KUBECONFIG": f"{KUBECONFIG_DIR}/config"}
    log_path = tmp_path / "operator.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def probe(kind: str) -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the operator exited {process.returncode}:\n{log_path.read_text()[-4000:]}")
        http = container[kind]["httpGet"]
        try:
            url = f"http://127.0.0.1:{ports[http['port']]}{http['path']}"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    try:
        started = time.monotonic()
        wait_until(lambda: probe("readinessProbe"), 90, "the operator's readinessProbe")
        print(f"operator in the image ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
        assert probe("livenessProbe")
        # Every other port (the webhook's, the config API's) serves the chart's certificate, read
        # from the Secret's volume.
        [certificates] = [m for m in mounts if m.name != "kubeconfig" and "secret" in pod.volume(m.name)]
        served = ssl.PEM_cert_to_DER_cert((certificates.host / "tls.crt").read_text())
        context = ssl.create_default_context(cafile=str(certificates.host / "ca.crt"))
        context.check_hostname = False  # the names are the cluster's; the chain is still verified
        for name in set(ports) - {container["readinessProbe"]["httpGet"]["port"]}:
            with socket.create_connection(("127.0.0.1", ports[name]), timeout=5) as raw, \
                    context.wrap_socket(raw) as tls:
                assert tls.getpeercert(binary_form=True) == served, f"port {name}: not the Secret's certificate"
    finally:
        code = stop(process, pod.pod.get("terminationGracePeriodSeconds", 30), log_path)
    log = log_path.read_text()
    assert code == 0, f"the operator exited {code}:\n{log[-4000:]}"
    for trouble in ("Traceback", "Read-only file system", "Permission denied"):
        assert trouble not in log, f"{trouble!r} in the operator's log:\n{log[-4000:]}"
    # Its store (the chart's --store) is on the store's volume, written by 65532.
    [path] = [arg.partition("=")[2] for arg in args if arg.startswith("--store=")]
    [store] = [m for m in mounts if m.path == path]
    files = list(store.host.rglob("*"))
    assert files
    assert {p.stat().st_uid for p in files} == {65532}
