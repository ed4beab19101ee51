"""The ssh step types against real OpenSSH servers: three nodes on 127.0.0.2-4 (`tests.sshd`).

Each test names a node by address and sees where a command ran through ``$NODE_DIR`` (that node's
directory, set by its sshd). Processes on the "nodes" are processes of this machine, so a test can
check that a stopped command is really gone. The egress policy refuses loopback by default: the
executors here are built with 127.0.0.0/8 allowed, as `stead operator --ssh-allow` does (passed on to the runner).
"""

from __future__ import annotations

import base64
import functools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.control import read_output, read_status
from pipelines.executors import StepAborted, StepContext, StepFailed, default_executors
from pipelines.executors.base import ParameterError
from pipelines.executors.ssh import SshSettings, ssh_executors
from pipelines.hooks import MASK, Hooks, SealedSecrets, new_run_key, seal, substitute
from pipelines.model import Workflow
from pipelines.paths import RunPaths
from pipelines.runner import run_workflow
from tests.polling import wait_until
from tests.sshd import SshNodes, available, ssh_nodes_in

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))

A, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"
LOOPBACK = ("127.0.0.0/8",)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNodes]:
    with ssh_nodes_in(tmp_path_factory.mktemp("sshd")) as running:
        yield running


@pytest.fixture
def files_root(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    return root


@dataclass
class Captured:
    lines: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, line: str, stream: str) -> str:
        with self.lock:
            self.lines.append((stream, line))
        return line

    def text(self, stream: str | None = None) -> str:
        with self.lock:
            return "\n".join(line for s, line in self.lines if stream is None or s == stream)


def make_ctx(
    tmp_path: Path, step_type: str, parameters: Mapping[str, Any], variables: Mapping[str, str], *,
    timeout: float | None = None, abort: threading.Event | None = None,
) -> tuple[StepContext, Captured]:
    out = Captured()
    ctx = StepContext(
        run_uid="run1", step_id="s1", step_type=step_type, target="n1", attempt=1, parameters=dict(parameters),
        variables=dict(variables), plain_variables=dict(variables), workdir=tmp_path / "work",
        deadline=None if timeout is None else time.monotonic() + timeout, timeout=timeout,
        abort=abort or threading.Event(), output=out, mask=lambda s: s, marker="run1/s1@n1",
    )
    return ctx, out


def run_step(
    tmp_path: Path, nodes: SshNodes, step_type: str, parameters: Mapping[str, Any], address: str = A, *,
    settings: SshSettings | None = None, variables: Mapping[str, str] | None = None, timeout: float | None = None,
    abort: threading.Event | None = None,
) -> tuple[Any, Captured]:
    executor = ssh_executors(settings or SshSettings(allow=LOOPBACK))[step_type]
    ctx, out = make_ctx(tmp_path, step_type, parameters, {**nodes.variables(address), **(variables or {})},
                        timeout=timeout, abort=abort)
    return executor.run(ctx), out


def fails(tmp_path: Path, nodes: SshNodes, step_type: str, parameters: Mapping[str, Any], address: str = A,
          **options: Any) -> tuple[StepFailed, Captured]:
    executor = ssh_executors(options.pop("settings", None) or SshSettings(allow=LOOPBACK))[step_type]
    ctx, out = make_ctx(tmp_path, step_type, parameters, {**nodes.variables(address), **options.pop("variables", {})},
                        **options)
    with pytest.raises(StepFailed) as info:
        executor.run(ctx)
    return info.value, out


def banner_or_port(address: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((address, port)) == 0


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


# -- shell -------------------------------------------------------------------------------------


def test_shell_runs_on_the_addressed_node_with_cwd_and_streams(tmp_path: Path, nodes: SshNodes) -> None:
    for address in (A, B, C):
        result, out = run_step(tmp_path, nodes, "ssh.shell", {
            "cmd": 'echo "ran on $NODE_DIR" >> "$NODE_DIR/log"; echo out1; echo err1 >&2; pwd; echo out2',
            "cwd": "/tmp"}, address)
        assert result.exit_code == 0 and address in result.message
        assert out.text("stdout") == "out1\n/tmp\nout2" and out.text("stderr") == "err1"
    for address in (A, B, C):
        assert (nodes.node(address).dir / "log").read_text().strip().endswith(f"ran on {nodes.node(address).dir}")


def test_shell_failure_names_the_exit_code_and_last_lines(tmp_path: Path, nodes: SshNodes) -> None:
    failure, _ = fails(tmp_path, nodes, "ssh.shell", {"cmd": "echo before; echo oops >&2; exit 7"}, B)
    assert failure.exit_code == 7
    assert f"on {B} exited with code 7" in failure.message
    assert "before" in failure.message and "oops" in failure.message
    assert failure.details["lastLines"] == ["before", "oops"]


def test_shell_output_arrives_while_the_command_runs(tmp_path: Path, nodes: SshNodes) -> None:
    go = nodes.node(A).dir / "go"
    go.unlink(missing_ok=True)
    executor = ssh_executors(SshSettings(allow=LOOPBACK))["ssh.shell"]
    ctx, out = make_ctx(tmp_path, "ssh.shell", {
        "cmd": 'echo first; while [ ! -f "$NODE_DIR/go" ]; do sleep 0.05; done; echo second'}, nodes.variables(A))
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(executor.run(ctx)))
    worker.start()
    wait_until(lambda: "first" in out.text(), 60, what="the first line before the command ends")
    assert "second" not in out.text()
    go.touch()
    worker.join(60)
    assert results and out.text("stdout") == "first\nsecond"


def test_shell_timeout_stops_the_remote_process_group(tmp_path: Path, nodes: SshNodes) -> None:
    pids = nodes.node(B).dir / "timeout.pids"
    pids.unlink(missing_ok=True)
    started = time.monotonic()
    failure, _ = fails(tmp_path, nodes, "ssh.shell", {
        "cmd": 'sleep 300 & echo "$$ $!" > "$NODE_DIR/timeout.pids"; echo waiting; wait', "timeout": "2"}, B)
    assert "timed out" in failure.message and B in failure.message and "waiting" in failure.message
    assert time.monotonic() - started < 30  # 1 s, plus connecting and the login shell on a loaded machine
    for pid in map(int, pids.read_text().split()):
        wait_until(functools.partial(gone, pid), 30, what=f"remote process {pid} killed")


def test_abort_stops_the_remote_command(tmp_path: Path, nodes: SshNodes) -> None:
    pids = nodes.node(C).dir / "abort.pids"
    pids.unlink(missing_ok=True)
    abort = threading.Event()
    executor = ssh_executors(SshSettings(allow=LOOPBACK))["ssh.shell"]
    ctx, _ = make_ctx(tmp_path, "ssh.shell", {
        "cmd": 'trap "" TERM; sleep 300 & echo "$$ $!" > "$NODE_DIR/abort.pids"; wait; wait'},
        nodes.variables(C), abort=abort)
    raised: list[BaseException] = []

    def work() -> None:
        try:
            executor.run(ctx)
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, 60, what="the remote command started")
    abort.set()
    worker.join(60)
    assert raised and isinstance(raised[0], StepAborted)
    for pid in map(int, pids.read_text().split()):  # the shell ignores TERM: KILL after the grace period
        wait_until(functools.partial(gone, pid), 30, what=f"remote process {pid} killed")


def test_step_deadline_bounds_the_command(tmp_path: Path, nodes: SshNodes) -> None:
    failure, _ = fails(tmp_path, nodes, "ssh.shell", {"cmd": "sleep 60"}, A, timeout=1.5)
    assert "timed out" in failure.message


def test_exec_runs_a_calm_script_with_its_variables(tmp_path: Path, nodes: SshNodes) -> None:
    _, out = run_step(tmp_path, nodes, "ssh.exec", {
        "script": 'echo "greeting=$GREETING node=$(basename $NODE_DIR) step=$STEAD_STEP"; read x || echo no-stdin',
        "env": {"GREETING": "it's hello"}}, B)
    assert out.text("stdout") == f"greeting=it's hello node={B} step=s1\nno-stdin"
    _, out = run_step(tmp_path, nodes, "ssh", {"shell": "python", "script": "import os\nprint(os.environ['G'])",
                                               "env": {"G": "py"}}, C)
    assert out.text("stdout") == "py"
    failure, _ = fails(tmp_path, nodes, "ssh.exec", {"script": "exit 4"}, A)
    assert failure.exit_code == 4
    result, _ = run_step(tmp_path, nodes, "ssh.setvar", {
        "script": 'echo "where=$(basename $NODE_DIR)"; echo other=1; echo "where=ignored" >&2',
        "variables": ["where"]}, C)
    assert result.variables == {"where": C}
    failure, _ = fails(tmp_path, nodes, "ssh.setvar", {"script": "true", "variables": ["x"]}, C)
    assert "did not set x" in failure.message


# -- connection safety -------------------------------------------------------------------------


def _fingerprint(nodes: SshNodes, address: str) -> str:
    pub = nodes.node(address).dir / "ssh_host_ed25519_key.pub"
    return subprocess.run(["ssh-keygen", "-lf", str(pub)], check=True, capture_output=True, text=True).stdout.split()[1]


def test_unknown_host_key_is_refused_naming_host_and_fingerprint(tmp_path: Path, nodes: SshNodes) -> None:
    others = "".join(n.host_key_line + "\n" for n in nodes.nodes if n.address != B)
    marker = nodes.node(B).dir / "unknown-ran"
    for known in (others, ""):
        failure, _ = fails(tmp_path, nodes, "ssh.shell", {"cmd": f"touch {marker}"}, B,
                           variables={"ssh_known_hosts": known})
        assert B in failure.message and _fingerprint(nodes, B) in failure.message
        assert "does not list" in failure.message
    assert not marker.exists()


def test_a_key_the_node_does_not_accept_fails_without_showing_it(tmp_path: Path, nodes: SshNodes) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key = other.read_text()
    failure, out = fails(tmp_path, nodes, "ssh.shell", {"cmd": "true"}, A, variables={"ssh_private_key": key})
    assert "authentication failed" in failure.message and A in failure.message
    body = "".join(key.strip().splitlines()[1:-1])
    assert body[:20] not in failure.message and body[:20] not in out.text()


def test_bad_key_format_is_a_parameter_error_without_the_text(tmp_path: Path, nodes: SshNodes) -> None:
    text = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key-TOPSECRET\n-----END OPENSSH PRIVATE KEY-----\n"
    executor = ssh_executors(SshSettings(allow=LOOPBACK))["ssh.shell"]
    ctx, _ = make_ctx(tmp_path, "ssh.shell", {"cmd": "true"}, {**nodes.variables(A), "ssh_private_key": text})
    with pytest.raises(ParameterError) as info:
        executor.run(ctx)
    assert "ssh_private_key" in info.value.message and "TOPSECRET" not in info.value.message


def test_missing_inputs_and_bad_port(tmp_path: Path, nodes: SshNodes) -> None:
    executor = ssh_executors(SshSettings(allow=LOOPBACK))["ssh.shell"]
    variables = {k: v for k, v in nodes.variables(A).items() if k != "ssh_address"}
    ctx, _ = make_ctx(tmp_path, "ssh.shell", {"cmd": "true"}, variables)
    with pytest.raises(ParameterError, match="ssh_address"):
        executor.run(ctx)
    ctx, _ = make_ctx(tmp_path, "ssh.shell", {"cmd": "true"}, {**nodes.variables(A), "ssh_port": "http"})
    with pytest.raises(ParameterError, match="not a TCP port"):
        executor.run(ctx)


def test_egress_to_loopback_is_refused_unless_allowed(tmp_path: Path, nodes: SshNodes) -> None:
    marker = nodes.node(A).dir / "egress-ran"
    failure, _ = fails(tmp_path, nodes, "ssh.shell", {"cmd": f"touch {marker}"}, A, settings=SshSettings())
    assert "refused to connect to 127.0.0.2" in failure.message and "loopback" in failure.message
    # the flag the user can set, not the runner's own (issue 27)
    assert "`stead operator --ssh-allow CIDR` (the chart's actions.ssh.allow)" in failure.message
    assert not marker.exists()
    # the default registry carries the same rule
    executor = default_executors()["ssh.shell"]
    ctx, _ = make_ctx(tmp_path, "ssh.shell", {"cmd": f"touch {marker}"}, nodes.variables(A))
    with pytest.raises(StepFailed, match="loopback"):
        executor.run(ctx)
    assert not marker.exists()


def test_a_service_network_is_refused_inside_an_allowed_one_before_any_packet(tmp_path: Path, nodes: SshNodes) -> None:
    marker = nodes.node(A).dir / "egress-ran"
    denied = SshSettings(allow=LOOPBACK, deny=("127.0.0.2/32",))  # 127.0.0.2 stands for a ClusterIP
    for port in (nodes.variables(A)["ssh_port"], "1"):  # an open port and a closed one: told apart by nothing
        failure, _ = fails(tmp_path, nodes, "ssh.shell", {"cmd": f"touch {marker}"}, A, settings=denied,
                           variables={"ssh_port": port})
        assert "127.0.0.2 is in the cluster's Service network" in failure.message, failure.message
    assert not marker.exists()


def test_unreachable_node_fails_quickly(tmp_path: Path, nodes: SshNodes) -> None:
    failure, _ = fails(tmp_path, nodes, "ssh.shell", {"cmd": "true"}, A, variables={"ssh_port": "1"})
    assert "cannot connect to 127.0.0.2 port 1" in failure.message


# -- files -------------------------------------------------------------------------------------


def test_upload_file_writes_content_and_mode(tmp_path: Path, nodes: SshNodes) -> None:
    target = nodes.node(B).dir / "etc" / "deep" / "config.yaml"
    result, _ = run_step(tmp_path, nodes, "ssh.upload_file", {
        "path": str(target), "data": "key: value\nü\n", "permissions": "0600"}, B)
    assert target.read_text() == "key: value\nü\n" and (target.stat().st_mode & 0o7777) == 0o600
    assert "bytes" in result.message
    run_step(tmp_path, nodes, "ssh.upload_file", {"path": str(target), "data": "v2"}, B)
    assert target.read_text() == "v2" and (target.stat().st_mode & 0o7777) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["config.yaml"]  # no temporary file left
    with pytest.raises(ParameterError, match="octal"):
        run_step(tmp_path, nodes, "ssh.upload_file", {"path": str(target), "data": "x", "permissions": "rwx"}, B)


def test_copy_files_with_permissions(tmp_path: Path, nodes: SshNodes, files_root: Path) -> None:
    (files_root / "sub").mkdir()
    (files_root / "a.conf").write_text("alpha\n")
    (files_root / "sub" / "b.bin").write_bytes(bytes(range(256)) * 20_000)  # 5 MB: several writes with flow control
    dest = nodes.node(C).dir / "copied"
    owner = subprocess.run(["id", "-un"], check=True, capture_output=True, text=True).stdout.strip()
    group = subprocess.run(["id", "-gn"], check=True, capture_output=True, text=True).stdout.strip()
    result, out = run_step(tmp_path, nodes, "ssh.copy_files", {
        "files": [{"src": "a.conf", "dst": str(dest / "a.conf")}, {"src": "sub/b.bin", "dst": str(dest / "b.bin")}],
        "permissions": {"owner": owner, "group": group, "mode": "0640"}}, C,
        settings=SshSettings(allow=LOOPBACK, files_root=files_root))
    assert (dest / "a.conf").read_text() == "alpha\n" and (dest / "b.bin").read_bytes() == bytes(range(256)) * 20_000
    for name in ("a.conf", "b.bin"):
        assert ((dest / name).stat().st_mode & 0o7777) == 0o640
    assert "a.conf ->" in out.text() and "2 file(s)" in result.message


def test_copy_files_sources_stay_under_the_files_root(tmp_path: Path, nodes: SshNodes, files_root: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("service-account-token")
    (files_root / "link").symlink_to(secret)
    (files_root / "dirlink").symlink_to(tmp_path)
    settings = SshSettings(allow=LOOPBACK, files_root=files_root)
    dest = str(nodes.node(A).dir / "stolen")
    for src in ("../token", str(secret), "link", "dirlink/token", "/etc/passwd"):
        failure, _ = fails(tmp_path, nodes, "ssh.copy_files", {"files": [{"src": src, "dst": dest}]}, A,
                           settings=settings)
        assert "outside the files root" in failure.message or "'..'" in failure.message, failure.message
    assert not Path(dest).exists()
    failure, _ = fails(tmp_path, nodes, "ssh.copy_files", {"files": [{"src": "a", "dst": dest}]}, A,
                       variables={"ssh_port": "1"})  # judged before connecting: port 1 is never tried
    assert "need a files root" in failure.message
    failure, _ = fails(tmp_path, nodes, "ssh.sync", {"src": "x", "dst": dest}, A)
    assert "need a files root" in failure.message


def test_sync_rsyncs_a_directory_and_leaves_no_key_behind(tmp_path: Path, nodes: SshNodes, files_root: Path) -> None:
    tree = files_root / "modules"
    (tree / "nova" / "manifests").mkdir(parents=True)
    (tree / "nova" / "manifests" / "init.pp").write_text("class nova {}\n")
    (tree / "top.txt").write_text("top\n")
    dest = nodes.node(B).dir / "puppet" / "modules"
    dest.mkdir(parents=True)
    (dest / "stale").write_text("old")
    settings = SshSettings(allow=LOOPBACK, files_root=files_root)
    result, out = run_step(tmp_path, nodes, "ssh.sync", {"src": "modules/", "dst": str(dest)}, B, settings=settings)
    assert (dest / "nova" / "manifests" / "init.pp").read_text() == "class nova {}\n"
    assert (dest / "top.txt").read_text() == "top\n" and not (dest / "stale").exists()
    assert "init.pp" in out.text() and "synced" in result.message
    assert not (tmp_path / "work" / "ssh").exists()
    leftovers = [p for p in (tmp_path / "work").rglob("*") if p.is_file()] if (tmp_path / "work").exists() else []
    assert leftovers == []
    failure, _ = fails(tmp_path, nodes, "ssh.sync", {"src": "../", "dst": str(dest)}, B, settings=settings)
    assert "'..'" in failure.message


def test_sync_without_rsync_on_the_node_says_so(tmp_path: Path, nodes: SshNodes, files_root: Path) -> None:
    node = nodes.node(C)
    (files_root / "x").mkdir()
    node.set_path(str(node.bin))  # sessions on C find nothing but its bin directory
    try:
        failure, _ = fails(tmp_path, nodes, "ssh.sync", {"src": "x", "dst": "/tmp/x"}, C,
                           settings=SshSettings(allow=LOOPBACK, files_root=files_root))
        assert "has no rsync" in failure.message and C in failure.message
    finally:
        node.set_path(None)


def test_sync_from_an_rsync_url_is_pulled_by_the_node(tmp_path: Path, nodes: SshNodes) -> None:
    module = tmp_path / "module"
    (module / "manifests").mkdir(parents=True)
    (module / "manifests" / "site.pp").write_text("node default {}\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.5", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "rsyncd.conf"
    config.write_text(f"use chroot = no\n[puppet]\npath = {module}\nread only = yes\n")
    daemon = subprocess.Popen(["rsync", "--daemon", "--no-detach", f"--config={config}", "--address=127.0.0.5",
                               f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: banner_or_port("127.0.0.5", port), what="rsync daemon")
        dest = nodes.node(A).dir / "pulled"
        result, _ = run_step(tmp_path, nodes, "ssh.sync", {"src": f"rsync://127.0.0.5:{port}/puppet/",
                                                           "dst": str(dest)}, A)
        assert (dest / "manifests" / "site.pp").read_text() == "node default {}\n"
        assert "pulled" in result.message
    finally:
        daemon.kill()
        daemon.wait()


# -- puppet ------------------------------------------------------------------------------------


def test_puppet_missing_on_the_node_fails_saying_so(tmp_path: Path, nodes: SshNodes) -> None:
    assert subprocess.run(["sh", "-c", "command -v puppet"], capture_output=True).returncode != 0
    failure, _ = fails(tmp_path, nodes, "ssh.puppet", {
        "puppet_manifest": "/etc/puppet/site.pp", "puppet_modules": "/etc/puppet/modules", "timeout": "60"}, A)
    assert "has no puppet" in failure.message and A in failure.message


def test_puppet_apply_arguments_noop_and_exit_codes(tmp_path: Path, nodes: SshNodes) -> None:
    fake = nodes.node(B).bin / "puppet"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$NODE_DIR/puppet.args"\necho "Notice: applied"\n'
                    "echo \"Notice: /Stage[main]/Main/File[/etc/motd]/content: current_value '{md5}a', should be "
                    "'{md5}b' (noop)\"\n"
                    'exit "${PUPPET_EXIT:-2}"\n')
    fake.chmod(0o755)
    try:
        params = {"puppet_manifest": "/etc/puppet/modular/netconfig.pp", "puppet_modules": "/etc/puppet/modules",
                  "timeout": "60", "noop": "true"}
        result, out = run_step(tmp_path, nodes, "ssh.puppet", params, B)
        args = (nodes.node(B).dir / "puppet.args").read_text().split("\n")
        assert args[0] == "apply" and "--modulepath=/etc/puppet/modules" in args and "--noop" in args
        assert "--detailed-exitcodes" in args and args[-2] == "/etc/puppet/modular/netconfig.pp"
        assert "Notice: applied" in out.text() and "1 resource(s) would change" in result.message
        assert result.details["noop"] == {"wouldChange": 1, "refreshes": 0, "resources": ["File[/etc/motd] (content)"]}
        result, _ = run_step(tmp_path, nodes, "ssh.puppet", {**params, "noop": False}, B)
        assert "--noop" not in (nodes.node(B).dir / "puppet.args").read_text()
        assert "changes applied" in result.message and not result.details
        fake.write_text('#!/bin/sh\necho "Error: boom" >&2\nexit 6\n')
        failure, _ = fails(tmp_path, nodes, "ssh.puppet", params, B)
        assert failure.exit_code == 6 and "reported failures" in failure.message and "boom" in failure.message
    finally:
        fake.unlink()


# -- reboot ------------------------------------------------------------------------------------


def test_reboot_waits_for_the_node_to_come_back(tmp_path: Path, nodes: SshNodes) -> None:
    node = nodes.node(C)
    request = node.dir / "reboot-requested"
    request.unlink(missing_ok=True)
    settings = SshSettings(allow=LOOPBACK, reboot_command='touch "$NODE_DIR/reboot-requested"', reboot_poll=0.1)
    restarted = threading.Event()

    def operator() -> None:  # plays the node: "reboots" (restarts its sshd) once asked
        wait_until(request.exists, 60, what="the reboot command ran on the node")
        node.restart()
        restarted.set()

    helper = threading.Thread(target=operator)
    helper.start()
    result, out = run_step(tmp_path, nodes, "ssh.reboot", {"timeout": "30"}, C, settings=settings)
    helper.join(30)
    assert restarted.is_set()
    assert "is back" in result.message or "back after" in result.message
    assert "going down" in out.text() or "is down" in out.text()


def test_reboot_that_never_happens_times_out(tmp_path: Path, nodes: SshNodes) -> None:
    settings = SshSettings(allow=LOOPBACK, reboot_command="true", reboot_poll=0.1)
    failure, _ = fails(tmp_path, nodes, "ssh.reboot", {"timeout": "1"}, A, settings=settings)
    assert "did not go down" in failure.message


# -- secrets through the engine ----------------------------------------------------------------


def test_the_private_key_never_appears_in_output_records_or_errors(tmp_path: Path, nodes: SshNodes) -> None:
    key = new_run_key()
    targets = {}
    for address in (A, B, C):
        values = nodes.variables(address)
        values.pop("ssh_private_key")
        targets[f"node-{address.rsplit('.', 1)[1]}"] = values
    targets["node-4"]["ssh_known_hosts"] = ""
    files_root = tmp_path / "root"
    (files_root / "d").mkdir(parents=True)
    (files_root / "d" / "f").write_text("f")
    workflow = Workflow.model_validate({
        "targets": targets,
        "secrets": {"ssh_private_key": seal(nodes.private_key, key, "ssh_private_key")},
        "continue_on_failure": True,
        "steps": [
            {"id": "leak", "type": "ssh.shell", "target": list(targets),
             "parameters": {"cmd": "echo '@@{ssh_private_key}@@'; echo '@@{ssh_private_key}@@' >&2; exit 3"}},
            {"id": "upload", "type": "ssh.upload_file", "target": ["node-2"],
             "parameters": {"path": str(nodes.node(A).dir / "leak.txt"), "data": "ok"}},
            {"id": "badhost", "type": "ssh.shell", "target": ["node-4"], "parameters": {"cmd": "true"}},
            {"id": "sync", "type": "ssh.sync", "target": ["node-2"],
             "parameters": {"src": "d/", "dst": str(nodes.node(A).dir / "synced")}},
        ],
    })
    events: list[dict[str, Any]] = []
    hooks = Hooks(render=substitute, secret=SealedSecrets(key))
    executors = default_executors(ssh=SshSettings(allow=LOOPBACK, files_root=files_root))
    state = tmp_path / "state"
    outcome = run_workflow(workflow, "r1", state, hooks=hooks, executors=executors, events=events.append)
    assert outcome.phase == "Failed"
    paths = RunPaths(state, "r1")
    status = read_status(paths)
    assert status is not None
    records = {rec["step"] + "@" + rec["target"]: rec for rec in status["steps"]}
    assert records["upload@node-2"]["state"] == "success" and records["sync@node-2"]["state"] == "success"
    assert records["leak@node-3"]["exitCode"] == 3 and "does not list" in records["badhost@node-4"]["message"]
    everything = json.dumps(status) + json.dumps(events)
    for target in targets:
        everything += read_output(paths, "leak", target)
    for path in state.rglob("*"):
        if path.is_file():
            everything += path.read_bytes().decode("utf-8", errors="replace")
    lines = [line for line in nodes.private_key.strip().splitlines()[1:-1] if len(line) >= 8]
    assert lines and not any(line in everything for line in lines)
    assert "BEGIN OPENSSH PRIVATE KEY" not in everything
    assert (nodes.node(A).dir / "synced" / "f").read_text() == "f"


# -- the runner's options ----------------------------------------------------------------------


def test_runner_process_runs_ssh_steps_with_its_options(tmp_path: Path, nodes: SshNodes) -> None:
    key = new_run_key()
    shared = tmp_path / "order.log"
    root = tmp_path / "files"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "app.ini").write_text("x=1\n")
    targets = {f"node-{n.address.rsplit('.', 1)[1]}": {k: v for k, v in nodes.variables(n.address).items()
                                                        if k != "ssh_private_key"} for n in nodes.nodes}
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(yaml.safe_dump({
        "targets": targets,
        "secrets": {"ssh_private_key": seal(nodes.private_key, key, "ssh_private_key")},
        "steps": [
            {"id": "first", "type": "ssh.shell", "target": list(targets),
             "parameters": {"cmd": f'echo "first $(basename $NODE_DIR)" >> {shared}'}},
            {"id": "copy", "type": "ssh.copy_files", "target": list(targets), "dependsOn": ["first"],
             "parameters": {"files": [{"src": "conf/app.ini", "dst": f"{tmp_path}/@@{{ssh_address}}@@.ini"}],
                            "permissions": {"mode": "0600"}}},
            {"id": "second", "type": "ssh.exec", "target": list(targets), "dependsOn": ["copy"],
             "parameters": {"script": f'echo "second $(basename $NODE_DIR)" >> {shared}'}},
        ],
    }))

    def run(uid: str, *options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipelines", "run", "--workflow", str(workflow), "--run-id", uid,
             "--state", str(tmp_path / "state"), "--secret-key-stdin", "--hooks", "pipelines.hooks:SUBSTITUTE",
             *options], input=base64.b64encode(key).decode() + "\n", capture_output=True, text=True, timeout=300)

    refused = run("no-allow")
    assert refused.returncode == 1 and "loopback" in refused.stdout and not shared.exists()
    done = run("ok", "--ssh-allow", "127.0.0.0/8", "--ssh-files-root", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    order = shared.read_text().split("\n")[:-1]
    assert sorted(order[:3]) == [f"first {n.address}" for n in nodes.nodes]
    assert sorted(order[3:]) == [f"second {n.address}" for n in nodes.nodes]
    for n in nodes.nodes:
        copied = tmp_path / f"{n.address}.ini"
        assert copied.read_text() == "x=1\n" and (copied.stat().st_mode & 0o777) == 0o600
    assert nodes.private_key.splitlines()[1] not in done.stdout + done.stderr + refused.stdout + refused.stderr
    bad = run("bad", "--ssh-allow", "not-a-network")
    assert bad.returncode == 2 and "--ssh-allow" in bad.stderr


def test_a_secret_across_the_64_kib_cut_of_a_long_line_is_masked_whole(tmp_path: Path, nodes: SshNodes) -> None:
    """The ssh pump cuts a long line into 64 KiB pieces only with the masker's reach of text after
    the cut (as local processes do): the node prints part of the secret, pauses, prints the rest,
    so that without the look-ahead the cut falls inside the secret and its head is left in clear."""
    key = new_run_key()
    token = "tok-Zq81-0123456789abcdef"
    targets = {"node-2": {k: v for k, v in nodes.variables(A).items() if k != "ssh_private_key"}}
    steps = []
    for before in (1, 3, 7):  # characters of the token before the 64 KiB cut
        cmd = (f"head -c {65536 - before} /dev/zero | tr '\\0' x; printf %s '@@{{token}}@@' | head -c {before + 2}; "
               f"sleep 0.5; printf '%s done\\n' \"$(printf %s '@@{{token}}@@' | tail -c +{before + 3})\"")
        steps.append({"id": f"cut{before}", "type": "ssh.shell", "target": ["node-2"], "parameters": {"cmd": cmd}})
    workflow = Workflow.model_validate({
        "targets": targets, "steps": steps, "continue_on_failure": True,
        "secrets": {"ssh_private_key": seal(nodes.private_key, key, "ssh_private_key"),
                    "token": seal(token, key, "token")},
    })
    state = tmp_path / "state"
    outcome = run_workflow(workflow, "r1", state, hooks=Hooks(render=substitute, secret=SealedSecrets(key)),
                           executors=default_executors(ssh=SshSettings(allow=LOOPBACK)))
    assert outcome.phase == "Succeeded"
    for before in (1, 3, 7):
        output = read_output(RunPaths(state, "r1"), f"cut{before}", "node-2")
        assert output.replace("\n", "") == "x" * (65536 - before) + MASK + " done", (before, output[-80:])
