"""Building and caching the binaries, and the control plane's process and port bookkeeping.

No test here runs the real Go toolchain or starts a cluster: a fake ``go`` script on PATH stands
in for the toolchain, and stand-in processes for the components.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from operators.cluster import build
from operators.cluster.build import ControlPlaneError
from operators.cluster.controlplane import ClusterStatus, LocalControlPlane, PortInUse
from operators.cluster.ports import Ports
from operators.cluster.processes import ProcessRecord, port_in_use, port_owner, process_start_ticks

UPSTREAM_GO_MOD = """\
// This is a generated file. Do not edit directly.

module k8s.io/kubernetes

go 1.24.0

godebug default=go1.24

require (
\tgithub.com/example/dependency v1.2.3
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

replace github.com/example/fork => github.com/example/upstream v1.0.0

replace k8s.io/single => ./staging/src/k8s.io/single // one-line form

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\t// k8s.io/commented-out => ./staging/src/k8s.io/commented-out
\tk8s.io/elsewhere => ../elsewhere
)
"""


def test_staging_modules_are_the_local_staging_replacements_in_file_order() -> None:
    assert build.staging_modules(UPSTREAM_GO_MOD) == [
        "k8s.io/single",
        "k8s.io/api",
        "k8s.io/client-go",
    ]


def test_the_go_directive_is_read_from_the_upstream_go_mod() -> None:
    assert build.go_directive(UPSTREAM_GO_MOD) == "1.24.0"
    assert build.go_directive("module x\n") is None


def test_the_kubernetes_wrapper_requires_the_release_and_pins_staging_to_v0() -> None:
    assert build.kubernetes_wrapper_go_mod(UPSTREAM_GO_MOD, "v1.34.4") == textwrap.dedent("""\
        module stead.dev/controlplane

        go 1.24.0

        require k8s.io/kubernetes v1.34.4

        replace (
        \tk8s.io/single => k8s.io/single v0.34.4
        \tk8s.io/api => k8s.io/api v0.34.4
        \tk8s.io/client-go => k8s.io/client-go v0.34.4
        )
        """)


def test_a_go_mod_without_staging_modules_is_refused() -> None:
    with pytest.raises(ValueError, match="staging"):
        build.kubernetes_wrapper_go_mod("module k8s.io/kubernetes\n\ngo 1.24.0\n", "v1.34.4")


@pytest.mark.parametrize("version", ["1.34.4", "v2.0.1", "v1.34", "v1.34.4-rc.1"])
def test_only_kubernetes_release_versions_map_to_staging_versions(version: str) -> None:
    with pytest.raises(ValueError):
        build.staging_version(version)


def test_the_tools_file_is_build_tagged_and_imports_every_package() -> None:
    text = build.tools_go(["k8s.io/kubernetes/cmd/kubectl", "k8s.io/kubernetes/cmd/kube-apiserver"])
    assert text.startswith("//go:build tools\n")
    assert '_ "k8s.io/kubernetes/cmd/kubectl"' in text
    assert '_ "k8s.io/kubernetes/cmd/kube-apiserver"' in text


def test_link_flags_stamp_the_version_for_server_and_client_packages() -> None:
    flags = build.ldflags(build.KUBERNETES)
    assert flags.startswith("-s -w ")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion={build.KUBERNETES.version}" in flags
        assert f"-X {package}.gitMinor=34" in flags
    assert f"-X helm.sh/helm/v3/internal/version.version={build.HELM.version}" in build.ldflags(
        build.HELM
    )


# --- the toolchain ---------------------------------------------------------------------------


@pytest.fixture
def no_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without ``go`` and no fallback location: as on a machine without Go."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(build, "GO_FALLBACK_LOCATIONS", ())


def _install_fake_binaries(root: Path) -> None:
    for component in build.COMPONENTS:
        directory = build.component_dir(component, root)
        directory.mkdir(parents=True)
        for name in component.binary_names:
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)


@pytest.mark.usefixtures("no_go")
def test_a_missing_go_toolchain_is_a_clear_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError) as raised:
        build.ensure_binaries(tmp_path / "cache")

    assert raised.value.message.startswith("Go toolchain not found")
    assert "\n" not in str(raised.value)


@pytest.mark.usefixtures("no_go")
def test_cached_binaries_are_used_without_any_toolchain(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _install_fake_binaries(root)

    binaries = build.ensure_binaries(root)

    assert binaries == build.cached_binaries(root)
    assert binaries.kube_apiserver == root / build.KUBERNETES.directory_name / "kube-apiserver"
    assert binaries.etcd == root / build.ETCD.directory_name / "etcd"
    assert build.ETCD.directory_name.startswith(f"etcd-{build.ETCD.version}-")
    assert binaries.helm.name == "helm"


def test_the_cache_root_follows_stead_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEAD_CACHE", "/somewhere/bin")
    assert build.cache_root() == Path("/somewhere/bin")
    monkeypatch.delenv("STEAD_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert build.cache_root() == Path("/xdg/stead/bin")


FAKE_GO = """\
#!/bin/sh
# Stands in for the Go toolchain: records its calls, answers like go would.
echo "$*" >> "$FAKE_GO_CALLS"
case "$1 $2" in
  "mod download") printf '{"Path": "x", "GoMod": "%s", "Dir": "%s"}\\n' "$FAKE_UPSTREAM_GO_MOD" "$FAKE_MODULE_DIR" ;;
  "mod tidy") cp go.mod "$FAKE_GO_CAPTURE" ;;
  "env GOVERSION") echo go1.99 ;;
  build*)
    while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
    printf '#!/bin/sh\\n' > "$out" && chmod +x "$out" ;;
esac
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put FAKE_GO on PATH; yields the file its calls are recorded in."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(FAKE_GO)
    (bin_dir / "go").chmod(0o755)
    upstream = tmp_path / "upstream.mod"
    upstream.write_text("module go.etcd.io/etcd/server/v3\n\ngo 1.25.0\n")
    calls = tmp_path / "go-calls.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("FAKE_GO_CALLS", str(calls))
    monkeypatch.setenv("FAKE_UPSTREAM_GO_MOD", str(upstream))
    monkeypatch.setenv("FAKE_GO_CAPTURE", str(tmp_path / "captured-go.mod"))
    yield calls


def test_a_build_lands_atomically_in_the_versioned_directory_and_is_reused(
    tmp_path: Path, fake_go: Path
) -> None:
    root = tmp_path / "cache"

    directory = build.ensure_component(build.ETCD, root)

    assert directory == root / build.ETCD.directory_name
    assert os.access(directory / "etcd", os.X_OK)
    manifest = json.loads((directory / build.MANIFEST_NAME).read_text())
    assert manifest["version"] == build.ETCD.version
    assert (tmp_path / "captured-go.mod").read_text() == build.wrapper_go_mod(
        "1.25.0", ("go.etcd.io/etcd/server/v3", build.ETCD.version)
    )
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]
    calls = fake_go.read_text()

    assert build.ensure_component(build.ETCD, root) == directory
    assert fake_go.read_text() == calls  # cached: go was not run again


FLUX_LIKE_GO_MOD = """\
module github.com/fluxcd/source-controller

go 1.26.0

replace github.com/fluxcd/source-controller/api => ./api

// a fork, kept as written
replace github.com/opencontainers/go-digest => github.com/opencontainers/go-digest v1.0.1-0.20220411205349-bde1400a84be

require (
\tgithub.com/fluxcd/source-controller/api v1.9.0
\tgithub.com/opencontainers/go-digest v1.0.0
)

replace github.com/example/unused => ../unused
"""


def test_upstream_replacements_pin_local_directories_at_the_required_version_and_keep_forks() -> None:
    assert build.upstream_replacements(FLUX_LIKE_GO_MOD) == [
        ("github.com/fluxcd/source-controller/api", "github.com/fluxcd/source-controller/api v1.9.0"),
        ("github.com/opencontainers/go-digest",
         "github.com/opencontainers/go-digest v1.0.1-0.20220411205349-bde1400a84be"),
    ]  # ../unused is not required by anything: dropped


def test_a_flux_build_keeps_the_replacements_tolerates_missing_test_modules_and_ships_the_crds(
    tmp_path: Path, fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = tmp_path / "flux.mod"
    upstream.write_text(FLUX_LIKE_GO_MOD)
    module = tmp_path / "module"
    (module / "config" / "crd" / "bases").mkdir(parents=True)
    (module / "config" / "crd" / "bases" / "gitrepositories.yaml").write_text("kind: CustomResourceDefinition\n")
    monkeypatch.setenv("FAKE_UPSTREAM_GO_MOD", str(upstream))
    monkeypatch.setenv("FAKE_MODULE_DIR", str(module))
    root = tmp_path / "cache"

    directory = build.ensure_component(build.FLUX_SOURCE_CONTROLLER, root)

    assert os.access(directory / "source-controller", os.X_OK)
    assert (directory / "crds" / "gitrepositories.yaml").read_text() == "kind: CustomResourceDefinition\n"
    captured = (tmp_path / "captured-go.mod").read_text()
    assert "\tgithub.com/fluxcd/source-controller/api => github.com/fluxcd/source-controller/api v1.9.0\n" in captured
    assert "mod tidy -e" in fake_go.read_text()


def test_a_failing_go_step_reports_the_step_and_the_tail_of_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text("#!/bin/sh\necho 'go: reading proxy: 404 Not Found' >&2\nexit 1\n")
    (bin_dir / "go").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    root = tmp_path / "cache"

    with pytest.raises(ControlPlaneError) as raised:
        build.ensure_component(build.HELM, root)

    assert "`go mod download` for helm-" in raised.value.message
    assert "exit 1" in raised.value.message
    assert "404 Not Found" in raised.value.detail
    assert not build.component_dir(build.HELM, root).exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]


def test_a_hanging_go_step_times_out_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text("#!/bin/sh\nsleep 60\n")
    (bin_dir / "go").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setitem(build.STEP_TIMEOUT_SECONDS, "download", 0.5)
    started = time.monotonic()

    with pytest.raises(ControlPlaneError, match="timed out after"):
        build.ensure_component(build.ETCD, tmp_path / "cache")

    assert time.monotonic() - started < 10


# --- ports and processes ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_in_use_is_reported_with_its_owner(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert port_in_use(port)
        assert port_owner(port) == os.getpid()
        plane = LocalControlPlane(
            tmp_path, apiserver_port=port, etcd_client_port=_free_port(),
            etcd_peer_port=_free_port(), controller_manager_port=_free_port(),
        )
        with pytest.raises(PortInUse, match=rf"port {port} \(kube-apiserver\) is in use "
                                            rf"by pid {os.getpid()}") as raised:
            plane.check_ports_free()
        assert raised.value.field == "apiserver"  # `stead cluster up` names its flag
    assert not port_in_use(port)


def test_ports_must_differ(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must differ"):
        LocalControlPlane(tmp_path, apiserver_port=2000, etcd_client_port=2000)


def _write_record(home: Path, name: str, pid: int) -> None:
    run = home / "run"
    run.mkdir(parents=True, exist_ok=True)
    record = ProcessRecord(name=name, pid=pid, start_ticks=process_start_ticks(pid) or 0)
    (run / f"{name}.json").write_text(json.dumps(record.__dict__))


def _alive(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


def test_a_stale_pid_record_pointing_at_another_process_is_ignored(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        _write_record(home, "etcd", bystander.pid)
        plane = LocalControlPlane(home)

        assert plane.status().pids == {}
        plane.down(timeout=1)

        assert _alive(bystander)
        assert not (home / "run" / "etcd.json").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_down_stops_a_recorded_process_that_is_ours(tmp_path: Path) -> None:
    """A process started by another ``stead`` invocation: binary named like the component and
    a command line pointing into the home, as the real etcd's ``--data-dir`` does."""
    home = tmp_path / "home"
    stand_in = tmp_path / "bin" / "etcd"
    stand_in.parent.mkdir()
    stand_in.symlink_to(Path(sys.executable).resolve())
    process = subprocess.Popen(
        [str(stand_in), "-c", "import time; time.sleep(60)", f"--data-dir={home / 'etcd'}"]
    )
    try:
        deadline = time.monotonic() + 10
        while not _cmdline_is(process.pid, str(stand_in)) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the exec has happened
        _write_record(home, "etcd", process.pid)
        plane = LocalControlPlane(home)
        assert plane.status().pids == {"etcd": process.pid}

        plane.down(timeout=5)

        assert process.wait(timeout=5) is not None
        assert plane.status().pids == {}
    finally:
        if _alive(process):
            process.kill()
            process.wait()


def _cmdline_is(pid: int, argv0: str) -> bool:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return raw.split(b"\0", 1)[0].decode() == argv0


def test_status_describes_the_state_the_server_the_pids_and_the_versions(tmp_path: Path) -> None:
    versions = {"kubernetes": "v1.34.4", "etcd": "v3.6.16"}
    pids = {"etcd": 11, "kube-apiserver": 12, "kube-controller-manager": 13}
    running = ClusterStatus(running=True, pids=pids, server="https://127.0.0.1:16443",
                            kubeconfig=tmp_path / "kubeconfig", home=tmp_path, versions=versions,
                            ports=Ports(16443, 12379, 12380, 16257))

    lines = running.describe().splitlines()

    assert lines[0].split() == ["control", "plane:", "running"]
    assert any(line.split() == ["server:", "https://127.0.0.1:16443"] for line in lines)
    assert any(line.split() == ["kubeconfig:", str(tmp_path / "kubeconfig")] for line in lines)
    assert any(line.split() == ["kube-apiserver:", "pid", "12"] for line in lines)
    assert any(line.split(None, 1) == ["ports:", "kube-apiserver 16443, etcd client 12379, etcd peer 12380, "
                                       "kube-controller-manager 16257"] for line in lines)
    assert lines[-1].split(None, 1) == ["versions:", "kubernetes v1.34.4, etcd v3.6.16"]
    assert len({line.index(line.split(":", 1)[1].lstrip()) for line in lines}) == 1, "values aligned"


def test_status_describes_a_stopped_or_partial_plane(tmp_path: Path) -> None:
    stopped = LocalControlPlane(tmp_path, apiserver_port=17443).status()
    text = stopped.describe()
    assert "stopped" in text.splitlines()[0]
    assert stopped.ports.apiserver == 17443 and "kube-apiserver 17443" in text  # the ports its next `up` uses
    assert text.count("not running") == 3

    partial = ClusterStatus(running=False, pids={"etcd": 11}, server=stopped.server,
                            kubeconfig=stopped.kubeconfig, home=stopped.home, versions=stopped.versions,
                            ports=stopped.ports)
    assert "not running" in partial.describe().splitlines()[0]
    assert "pid 11" in partial.describe()


def test_changing_a_link_flag_changes_the_cache_directory() -> None:
    changed = dataclasses.replace(build.HELM, version_symbols=(("x.y", "z"),))
    assert changed.directory_name != build.HELM.directory_name
    assert changed.directory_name.startswith(f"helm-{build.HELM.version}-")
    flags = build.ldflags(build.HELM)
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34" in flags


def _local_tool(tmp_path: Path) -> build.GoComponent:
    source = tmp_path / "tool"
    source.mkdir()
    (source / "go.mod").write_text("module stead.dev/tools/tool\n\ngo 1.24.0\n")
    (source / "main.go").write_text("package main\n\nfunc main() {}\n")
    (source / ".hidden").write_text("an editor's file, not the program")
    return build.GoComponent(name="tool", module="example.com/lib", version="v1.2.3",
                             outputs=(("stead.dev/tools/tool", "tool"),), source=source)


def test_a_local_module_is_built_from_a_copy_of_its_files_and_reused_until_they_change(
    tmp_path: Path, fake_go: Path
) -> None:
    tool = _local_tool(tmp_path)
    assert tool.source is not None
    root = tmp_path / "cache"
    first = tool.directory_name

    directory = build.ensure_component(tool, root)

    assert directory == root / first and first.startswith("tool-v1.2.3-")
    assert os.access(directory / "tool", os.X_OK)
    calls = fake_go.read_text()
    assert "mod download" not in calls and "mod tidy" not in calls  # its own go.mod and go.sum decide
    assert "build -mod=readonly" in calls and "stead.dev/tools/tool" in calls
    assert build.ensure_component(tool, root) == directory
    assert fake_go.read_text() == calls  # cached: go was not run again

    (tool.source / ".hidden").write_text("changed, still not the program")
    assert tool.directory_name == first
    (tool.source / "main.go").write_text("package main\n\nfunc main() { println() }\n")
    assert tool.directory_name != first  # an edited program is never answered by the old build
    assert build.ensure_component(tool, root) == root / tool.directory_name
    assert fake_go.read_text() != calls


def test_the_kstatus_module_requires_the_pinned_cli_utils() -> None:
    assert build.KSTATUS.source is not None
    go_mod = (build.KSTATUS.source / "go.mod").read_text()
    assert f"sigs.k8s.io/cli-utils {build.KSTATUS.version}" in go_mod
    assert build.KSTATUS.directory_name.startswith(f"kstatus-{build.KSTATUS.version}-")
