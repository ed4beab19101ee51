"""Build the control-plane binaries from the Go module proxy, once per version.

No registry ships kube-apiserver, so the binaries are compiled from Go modules. Kubernetes's own
go.mod points its staging modules (k8s.io/api, k8s.io/client-go, ...) at ``./staging/...``
directories, and replace lines only count in the main module; so each component is built inside
a throw-away *wrapper module* that requires it and, for Kubernetes, re-points every staging module
at its published ``v0.Y.Z`` release. The list of staging modules is read from the upstream go.mod
fetched through the proxy rather than typed here, so a version bump needs no code change. Flux's
controllers (built on demand for the GitOps e2e test) keep their own replacements the same way, and
bring their CRDs along. The go.mod text handling is in ``gomod.py``.

The results are cached outside the repository, one directory per component and version
(``$STEAD_CACHE`` or ``~/.cache/stead/bin``, then ``<component>-<version>/``). A directory only
ever appears complete: binaries are built into a temporary sibling that is renamed into place.
When the directory exists, nothing runs ``go`` at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from operators.cluster.gomod import (  # noqa: F401  (re-exported: build.wrapper_go_mod etc.)
    WRAPPER_MODULE,
    go_directive,
    kubernetes_wrapper_go_mod,
    required_versions,
    staging_modules,
    staging_version,
    tools_go,
    upstream_replacements,
    wrapper_go_mod,
)
from operators.cluster.versions import (
    CLI_UTILS_VERSION,
    ETCD_VERSION,
    FLUX_VERSION,
    HELM_VERSION,
    KUBERNETES_VERSION,
)

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]
"""Receives one human-readable line per build step (builds take minutes; say what is going on)."""

GO_FALLBACK_LOCATIONS: tuple[Path, ...] = (Path("/usr/local/go/bin/go"),)
"""Where the official Go tarball installs ``go``, tried when ``go`` is not on PATH."""

STEP_TIMEOUT_SECONDS: dict[str, float] = {"download": 600.0, "tidy": 1200.0, "build": 1500.0}
"""Upper bounds per ``go`` step: a stuck proxy or build must fail, never hang ``stead`` forever."""

LOG_TAIL_LINES: Final = 25
MANIFEST_NAME: Final = "stead-build.json"


class ControlPlaneError(RuntimeError):
    """The local control plane could not be built, started or stopped.

    ``message`` is one line meant for a terminal; ``detail`` (possibly empty) is the tail of the
    log that explains it (go's output, or a component's log).
    """

    def __init__(self, message: str, detail: str = "") -> None:
        self.message = message
        self.detail = detail
        super().__init__(f"{message}\n{detail}" if detail else message)


@dataclass(frozen=True)
class GoComponent:
    """One Go module whose main packages are built together into one cache directory."""

    name: str
    """Prefix of the cache directory, e.g. ``kubernetes`` for ``kubernetes-v1.34.4/``."""
    module: str
    version: str
    outputs: tuple[tuple[str, str], ...]
    """(Go package, binary file name) pairs built by one ``go build``."""
    version_symbols: tuple[tuple[str, str], ...] = ()
    """``-X symbol=value`` link flags: without them the binaries report version v0.0.0."""
    replace_staging: bool = False
    """Re-point the module's ``./staging/...`` replace targets at published releases."""
    source: Path | None = None
    """A module directory of this repository (own go.mod, go.sum) built as it is, not in a wrapper; its
    files' digest is in the cache directory's name: an edited program is never answered by an old build."""
    keep_replacements: bool = False
    """Carry the upstream go.mod's replace lines into the wrapper (they only count in the main
    module): module-to-module ones as written, local ``./dir`` ones at the version required."""
    tidy_tolerates_errors: bool = False
    """``go mod tidy -e``: tidy also resolves the modules of the tests of every imported package, and
    a proxy may lack a test-only one (Flux's source-controller tests import fluxcd/pkg/helmtestserver,
    403 on the proxy used here); a module the build really needs still fails ``go build``, by name."""
    crds: str = ""
    """A directory of the module whose ``*.yaml`` files are copied into ``crds/`` of the cache
    directory, so the CRDs always match the binaries' version."""

    @property
    def binary_names(self) -> tuple[str, ...]:
        return tuple(binary for _, binary in self.outputs)

    @property
    def directory_name(self) -> str:
        """Version plus a digest of the link flags, so changing a flag never reuses an old build."""
        digest = hashlib.sha256(repr(self.version_symbols).encode())
        if self.source is not None:
            digest.update(source_digest(self.source).encode())
        return f"{self.name}-{self.version}-{digest.hexdigest()[:8]}"


def source_files(directory: Path) -> list[Path]:
    """The files a local module is built from (hidden files and directories left out), sorted."""
    return sorted(
        path for path in directory.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    )


def source_digest(directory: Path) -> str:
    """sha256 over a local module's file names and contents: changes whenever any of them does."""
    digest = hashlib.sha256()
    for path in source_files(directory):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _kubernetes_version_symbols(version: str) -> tuple[tuple[str, str], ...]:
    major, minor = version.removeprefix("v").split(".")[:2]
    symbols: list[tuple[str, str]] = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        symbols += [
            (f"{package}.gitVersion", version),
            (f"{package}.gitMajor", major),
            (f"{package}.gitMinor", minor),
        ]
    return tuple(symbols)


KUBERNETES: Final = GoComponent(
    name="kubernetes",
    module="k8s.io/kubernetes",
    version=KUBERNETES_VERSION,
    outputs=(
        ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
        ("k8s.io/kubernetes/cmd/kube-controller-manager", "kube-controller-manager"),
        ("k8s.io/kubernetes/cmd/kubectl", "kubectl"),
    ),
    version_symbols=_kubernetes_version_symbols(KUBERNETES_VERSION),
    replace_staging=True,
)
ETCD: Final = GoComponent(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    version=ETCD_VERSION,
    outputs=(("go.etcd.io/etcd/server/v3", "etcd"),),
)
HELM: Final = GoComponent(
    name="helm",
    module="helm.sh/helm/v3",
    version=HELM_VERSION,
    outputs=(("helm.sh/helm/v3/cmd/helm", "helm"),),
    # Without the k8sVersion symbols, Helm's default capabilities say Kubernetes v1.20 and
    # `helm template`/`lint` refuse charts whose kubeVersion wants newer: use the local plane's.
    version_symbols=(
        ("helm.sh/helm/v3/internal/version.version", HELM_VERSION),
        *(
            (f"helm.sh/helm/v3/pkg/{package}.k8sVersion{part}", value)
            for package in ("chartutil", "lint/rules")
            for part, value in zip(("Major", "Minor"), KUBERNETES_VERSION.removeprefix("v").split(".")[:2], strict=True)
        ),
    ),
)
COMPONENTS: Final = (KUBERNETES, ETCD, HELM)
TOOLS_DIR: Final = Path(__file__).resolve().parents[2] / "tools"
KSTATUS: Final = GoComponent(
    name="kstatus",
    module="sigs.k8s.io/cli-utils",
    version=CLI_UTILS_VERSION,
    outputs=(("stead.dev/tools/kstatus", "kstatus"),),
    source=TOOLS_DIR / "kstatus",
)
"""tools/kstatus: kstatus' ``status.Compute`` (Flux's health) for the e2e tests; built when they run."""
FLUX_SOURCE_CONTROLLER: Final = GoComponent(
    name="flux-source-controller",
    module="github.com/fluxcd/source-controller",
    version=FLUX_VERSION,
    outputs=(("github.com/fluxcd/source-controller", "source-controller"),),
    keep_replacements=True,
    tidy_tolerates_errors=True,
    crds="config/crd/bases",
)
FLUX_KUSTOMIZE_CONTROLLER: Final = GoComponent(
    name="flux-kustomize-controller",
    module="github.com/fluxcd/kustomize-controller",
    version=FLUX_VERSION,
    outputs=(("github.com/fluxcd/kustomize-controller", "kustomize-controller"),),
    keep_replacements=True,
    tidy_tolerates_errors=True,
    crds="config/crd/bases",
)
FLUX_COMPONENTS: Final = (FLUX_SOURCE_CONTROLLER, FLUX_KUSTOMIZE_CONTROLLER)
"""Flux's two controllers of the GitOps loop (tests/e2e/test_gitops_flux.py), built only on demand
(``stead cluster build --flux``, ``make flux-tools`` or the e2e fixture), never by ``cluster up``."""
NODE: Final = GoComponent(
    name="kubernetes-node",
    module=KUBERNETES.module,
    version=KUBERNETES_VERSION,
    outputs=(
        ("k8s.io/kubernetes/cmd/kubelet", "kubelet"),
        ("k8s.io/kubernetes/cmd/kube-scheduler", "kube-scheduler"),
    ),
    version_symbols=KUBERNETES.version_symbols,
    replace_staging=True,
)
"""The local node's kubelet and scheduler: a component of their own (cached apart from KUBERNETES,
whose directory would otherwise count as incomplete and be rebuilt whole), built only when a node
is started or ``stead cluster build --node`` asks; most of its packages are in Go's build cache
once kube-apiserver is built."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every binary the local control plane and the chart tests run."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path
    etcd: Path
    helm: Path


def ldflags(component: GoComponent) -> str:
    """Strip symbols (smaller binaries) and stamp the version the binaries report."""
    return " ".join(["-s", "-w"] + [f"-X {sym}={val}" for sym, val in component.version_symbols])


# --- cache -----------------------------------------------------------------------------------


def cache_root() -> Path:
    """``$STEAD_CACHE``, else ``$XDG_CACHE_HOME/stead/bin`` (``~/.cache/stead/bin``)."""
    explicit = os.environ.get("STEAD_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "stead" / "bin"


def component_dir(component: GoComponent, root: Path | None = None) -> Path:
    return (root or cache_root()) / component.directory_name


def _is_complete(directory: Path, component: GoComponent) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in component.binary_names)


def _binaries(root: Path) -> Binaries:
    kubernetes, etcd, helm = (component_dir(c, root) for c in (KUBERNETES, ETCD, HELM))
    return Binaries(
        kube_apiserver=kubernetes / "kube-apiserver",
        kube_controller_manager=kubernetes / "kube-controller-manager",
        kubectl=kubernetes / "kubectl",
        etcd=etcd / "etcd",
        helm=helm / "helm",
    )


@dataclass(frozen=True)
class NodeBinaries:
    """The binaries of the local node (``node.py``)."""

    kubelet: Path
    kube_scheduler: Path


def ensure_node_binaries(root: Path | None = None, *, progress: Progress | None = None) -> NodeBinaries:
    """kubelet and kube-scheduler of the pinned Kubernetes version, built first when not cached."""
    directory = ensure_component(NODE, root, progress=progress)
    return NodeBinaries(kubelet=directory / "kubelet", kube_scheduler=directory / "kube-scheduler")


def ensure_kstatus(root: Path | None = None, *, progress: Progress | None = None) -> Path:
    """The kstatus program of tools/kstatus, built first when this version of its source is not cached."""
    return ensure_component(KSTATUS, root, progress=progress) / "kstatus"


@dataclass(frozen=True)
class FluxBinaries:
    """Flux's controllers and the CRDs of the same version (the e2e GitOps loop)."""

    source_controller: Path
    kustomize_controller: Path
    crds: tuple[Path, ...]


def ensure_flux_binaries(root: Path | None = None, *, progress: Progress | None = None) -> FluxBinaries:
    """source-controller and kustomize-controller of the pinned Flux version, built when not cached."""
    source, kustomize = (ensure_component(c, root, progress=progress) for c in FLUX_COMPONENTS)
    return FluxBinaries(
        source_controller=source / "source-controller",
        kustomize_controller=kustomize / "kustomize-controller",
        crds=tuple(sorted([*(source / "crds").glob("*.yaml"), *(kustomize / "crds").glob("*.yaml")])),
    )


def cached_binaries(root: Path | None = None) -> Binaries | None:
    """The cached binaries if every component is already built, else None; never runs ``go``."""
    root = root or cache_root()
    if all(_is_complete(component_dir(c, root), c) for c in COMPONENTS):
        return _binaries(root)
    return None


def cached_kubectl(root: Path | None = None) -> Path | None:
    """The cached kubectl of the pinned Kubernetes version (whatever other versions the cache holds),
    or None until it is built; never runs ``go``."""
    kubectl = component_dir(KUBERNETES, root) / "kubectl"
    return kubectl if os.access(kubectl, os.X_OK) else None


def ensure_binaries(
    root: Path | None = None, *, force: bool = False, progress: Progress | None = None
) -> Binaries:
    """Every control-plane binary, building the components that are not cached yet.

    With ``force`` the components are rebuilt even when cached (the old directory is replaced
    only once the new build succeeded). Raises ControlPlaneError when Go is missing or a step
    fails or times out.
    """
    root = root or cache_root()
    for component in COMPONENTS:
        ensure_component(component, root, force=force, progress=progress)
    return _binaries(root)


def ensure_component(
    component: GoComponent,
    root: Path | None = None,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> Path:
    """The cache directory of one component, built first when missing (or when ``force``)."""
    root = root or cache_root()
    final = component_dir(component, root)
    if not force and _is_complete(final, component):
        return final
    say = progress or logger.info
    go = find_go()
    root.mkdir(parents=True, exist_ok=True)
    with _build_lock(root, component, say):
        if not force and _is_complete(final, component):
            return final  # another process built it while we waited for the lock
        say(f"building {component.name} {component.version} with {go} (only the first time)")
        started = time.monotonic()
        _build(component, go, root, final, say)
        say(f"built {component.name} {component.version} in {time.monotonic() - started:.0f} s")
    return final


def find_go() -> str:
    """The ``go`` executable: PATH first, then where the official installer puts it."""
    found = shutil.which("go")
    if found:
        return found
    for candidate in GO_FALLBACK_LOCATIONS:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    raise ControlPlaneError(
        "Go toolchain not found: install Go 1.24 or newer (https://go.dev/dl/) and put `go` on "
        "PATH; it is needed once to build the local control plane's binaries"
    )


@contextlib.contextmanager
def _build_lock(root: Path, component: GoComponent, say: Progress) -> Iterator[None]:
    """Serialise builds of one component across processes (e2e session and CLI at once)."""
    with open(root / f".lock-{component.directory_name}", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process building {component.directory_name}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(component: GoComponent, go: str, root: Path, final: Path, say: Progress) -> None:
    log_dir = root / "logs"
    log_dir.mkdir(exist_ok=True)
    log_path = log_dir / f"{component.directory_name}.build.log"
    log_path.write_text("")
    output = Path(tempfile.mkdtemp(prefix=f".tmp-{component.directory_name}-", dir=root))
    try:
        with tempfile.TemporaryDirectory(prefix="stead-gowrap-") as workdir:
            work = Path(workdir)
            if component.source is not None:
                _build_source(component, go, work, output, log_path, say)
            else:
                _build_wrapper(component, go, work, output, log_path, say)
        if not _is_complete(output, component):
            raise ControlPlaneError(
                f"building {component.directory_name} produced no "
                f"{', '.join(component.binary_names)} in {output}; log: {log_path}",
                log_tail(log_path),
            )
        manifest = {"component": component.name, "version": component.version,
                    "go": _go_version(go), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (output / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        output.chmod(0o755)
        _move_into_place(output, final)
    finally:
        shutil.rmtree(output, ignore_errors=True)


def _build_wrapper(component: GoComponent, go: str, work: Path, output: Path, log_path: Path, say: Progress) -> None:
    """A published module, built inside a throw-away wrapper module that requires it."""
    say(f"fetching {component.module}@{component.version} from the Go module proxy")
    upstream, module_dir = _download_go_mod(component, go, work, log_path)
    if component.replace_staging:
        go_mod = kubernetes_wrapper_go_mod(upstream, component.version)
    else:
        go_mod = wrapper_go_mod(
            go_directive(upstream) or "1.24.0", (component.module, component.version),
            redirects=upstream_replacements(upstream) if component.keep_replacements else (),
        )
    if component.crds:
        _copy_crds(component, module_dir, output / "crds")
    (work / "go.mod").write_text(go_mod)
    packages = [package for package, _ in component.outputs]
    (work / "tools.go").write_text(tools_go(packages))
    say(f"resolving dependencies of {component.name} (go mod tidy)")
    tidy = ["mod", "tidy", "-e"] if component.tidy_tolerates_errors else ["mod", "tidy"]
    _run_go(component, go, tidy, work, log_path, "tidy")
    # One package: name the file (etcd's package path ends in /v3); several: a directory.
    single = len(packages) == 1
    destination = str(output / component.outputs[0][1]) if single else f"{output}/"
    say(f"compiling {', '.join(component.binary_names)} (go build)")
    build_args = ["build", "-ldflags", ldflags(component), "-o", destination, *packages]
    _run_go(component, go, build_args, work, log_path, "build")


def _build_source(component: GoComponent, go: str, work: Path, output: Path, log_path: Path, say: Progress) -> None:
    """A module of this repository, copied out of the work tree first (no VCS stamping, no stray
    files); ``-mod=readonly``: its committed go.sum decides the dependencies, fetched from the proxy."""
    assert component.source is not None
    for path in source_files(component.source):
        target = work / path.relative_to(component.source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    (package, binary), = component.outputs
    say(f"compiling {binary} from {component.source} (go build; {component.module} {component.version} "
        "from the Go module proxy)")
    build_args = ["build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-ldflags", ldflags(component),
                  "-o", str(output / binary), package]
    _run_go(component, go, build_args, work, log_path, "build")


def _move_into_place(built: Path, final: Path) -> None:
    """Rename the finished build to its cache name; a replaced build is removed afterwards."""
    if final.exists():
        retired = final.with_name(f".old-{final.name}-{os.getpid()}")
        final.rename(retired)
        built.rename(final)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        built.rename(final)


def _copy_crds(component: GoComponent, module_dir: Path, destination: Path) -> None:
    sources = sorted((module_dir / component.crds).glob("*.yaml"))
    if not sources:
        raise ControlPlaneError(
            f"{component.module}@{component.version} has no CRDs in {component.crds}/ ({module_dir})"
        )
    destination.mkdir()
    for source in sources:
        shutil.copyfile(source, destination / source.name)


def _download_go_mod(
    component: GoComponent, go: str, work: Path, log_path: Path
) -> tuple[str, Path]:
    """Fetch the component's module through the proxy: its upstream go.mod text and its directory."""
    info_path = work / "download.json"
    _run_go(component, go, ["mod", "download", "-json", f"{component.module}@{component.version}"],
            work, log_path, "download", stdout_path=info_path)
    try:
        info = json.loads(info_path.read_text())
        return Path(info["GoMod"]).read_text(), Path(info.get("Dir", ""))
    except (ValueError, KeyError, OSError) as error:
        raise ControlPlaneError(
            f"could not read the go.mod of {component.module}@{component.version} ({error}); "
            f"log: {log_path}",
            log_tail(log_path),
        ) from error


def _go_environment() -> dict[str, str]:
    """Static binaries, no workspace interference; GOPATH/GOCACHE stay the user's (warm) ones."""
    return {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GO111MODULE": "on"}


def _run_go(
    component: GoComponent,
    go: str,
    args: list[str],
    cwd: Path,
    log_path: Path,
    step: str,
    stdout_path: Path | None = None,
) -> None:
    """Run one ``go`` step with its output appended to the build log; fail with its tail.

    The step runs in its own process group so that a timeout or Ctrl-C stops the compiler
    processes it spawned too, rather than leaving them running.
    """
    timeout = STEP_TIMEOUT_SECONDS[step]
    what = f"`go {' '.join(args[:2])}` for {component.directory_name}"
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(log_path, "ab"))
        log.write(f"$ go {' '.join(args)}\n".encode())
        log.flush()
        stdout = stack.enter_context(open(stdout_path, "wb")) if stdout_path else log
        try:
            process = subprocess.Popen(
                [go, *args], cwd=cwd, env=_go_environment(), stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=log, start_new_session=True,
            )
        except OSError as error:
            raise ControlPlaneError(f"could not run {go}: {error}") from error
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise ControlPlaneError(
                f"{what} timed out after {timeout:.0f} s; log: {log_path}", log_tail(log_path)
            ) from None
        except BaseException:
            _kill_group(process)
            raise
    if code != 0:
        if stdout_path is not None:  # `go mod download -json` reports its error in the JSON
            with open(log_path, "ab") as log:
                log.write(stdout_path.read_bytes())
        raise ControlPlaneError(f"{what} failed (exit {code}); log: {log_path}", log_tail(log_path))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _go_version(go: str) -> str:
    try:
        result = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                                timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return result.stdout.strip()


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log, for error messages that explain themselves."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])
