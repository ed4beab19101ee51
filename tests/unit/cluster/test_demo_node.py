"""The local plane's demo SSH node (operators/cluster/sshd.py, issue 27): a real sshd on loopback that the
printed Secret and Environment reach, stopped with everything its sessions started; the local plane's
operator may reach it, and nothing else of loopback, without `--ssh-allow`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import operators.cluster
import operators.cluster.sshd
import operators.runtime.process
from operators.cli import main
from operators.cli.operator import ssh_allow
from operators.cluster.processes import marked_processes, process_is_running
from operators.cluster.sshd import DEMO_ADDRESS, DemoNode, DemoNodeInfo, sshd_unavailable_reason
from pipelines.executors.egress import EgressPolicy
from tests.polling import wait_until


def test_the_demo_nodes_address_is_allowed_and_nothing_else_of_loopback() -> None:
    assert ssh_allow([], None) == ()
    assert ssh_allow(["10.1.0.0/16"], "127.0.0.10") == ("10.1.0.0/16", "127.0.0.10/32")
    assert ssh_allow(["127.0.0.10/32"], "127.0.0.10") == ("127.0.0.10/32",)  # said once
    policy = EgressPolicy(allow=ssh_allow([], DEMO_ADDRESS), own=lambda: set())
    assert policy.refusal(DEMO_ADDRESS) is None
    for other in ("127.0.0.1", "127.0.0.11", "::1"):  # the operator's own ports listen on 127.0.0.1
        assert "loopback" in (policy.refusal(other) or ""), other


@pytest.mark.parametrize(("local", "reachable", "allowed"), [
    ("always", False, ("10.1.0.0/16", "127.0.0.10/32")),  # the plane Stead starts: its demo node
    ("auto", True, ("10.1.0.0/16",)),  # a real cluster: nothing of this host
    ("never", False, ("10.1.0.0/16",)),
])
def test_the_operator_of_the_local_plane_reaches_its_demo_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local: str, reachable: bool, allowed: tuple[str, ...],
) -> None:
    import operators.cli.local as cli

    seen: list[operators.runtime.process.OperatorOptions] = []

    async def fake_run_operator(kinds: object, options: operators.runtime.process.OperatorOptions,
                                addons: object = ()) -> None:
        seen.append(options)

    class Plane:
        home = tmp_path

        def status(self) -> object:
            return type("S", (), {"running": True})()

        def up(self) -> object:
            return type("I", (), {"server": "https://127.0.0.1:1", "kubeconfig": tmp_path / "kubeconfig"})()

    monkeypatch.setattr(operators.cluster, "reaches_cluster", lambda kubeconfig: reachable)
    monkeypatch.setattr(operators.runtime.process, "run_operator", fake_run_operator)
    monkeypatch.setattr(cli, "local_plane", lambda given=None: Plane())
    monkeypatch.setattr(cli, "start_node", lambda plane, policy: None)
    monkeypatch.setattr(cli, "start_demo_node", lambda plane: DemoNodeInfo(DEMO_ADDRESS, 2222, "root"))
    monkeypatch.setenv("STEAD_HOME", str(tmp_path))
    assert main(["run", "--local", local, "--config-api-port", "0", "--webhook", "off", "--store",
                 str(tmp_path / "s"), "--ssh-allow", "10.1.0.0/16"]) == 0
    (options,) = seen
    assert options.runs is not None and options.runs.ssh.allow == allowed


needs_sshd = pytest.mark.skipif(sshd_unavailable_reason() is not None, reason=str(sshd_unavailable_reason()))


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[DemoNode]:
    node = DemoNode(tmp_path / "home")
    try:
        yield node
    finally:
        node.down()


def _ssh(node: DemoNode, manifest: str, tmp_path: Path, command: str, **popen: object) -> subprocess.Popen[str]:
    """OpenSSH's client with exactly what the printed Secret and Environment hold (strict host key)."""
    secret, environment = yaml.safe_load_all(manifest)
    key, known = tmp_path / "key", tmp_path / "known_hosts"
    key.write_text(secret["stringData"]["id_ed25519"])
    key.chmod(0o600)
    known.write_text(secret["stringData"]["known_hosts"])
    spec = environment["spec"]
    return subprocess.Popen(
        ["ssh", "-F", "none", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes", "-p", str(spec["ssh"]["port"]),
         f"{spec['ssh']['user']}@{spec['nodes'][0]['address']}", command],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)  # type: ignore[call-overload]


@needs_sshd
def test_the_demo_node_answers_with_its_printed_key_and_stops_with_all_its_sessions_started(
    demo: DemoNode, tmp_path: Path,
) -> None:
    info = demo.up()
    assert info.address == DEMO_ADDRESS and demo.up() == info  # idempotent
    manifest = demo.manifest("team", "demo-node", "mitaka-9.0", ["controller", "compute"])
    secret, environment = yaml.safe_load_all(manifest)
    assert secret["metadata"] == {"name": "demo-node", "namespace": "team"}
    assert environment["spec"]["ssh"]["privateKey"] == {"name": "demo-node", "key": "id_ed25519"}
    assert environment["spec"]["nodes"] == [{"name": "demo-node", "roles": ["controller", "compute"],
                                             "address": DEMO_ADDRESS}]
    row = demo.status_row()[1]
    assert f"{DEMO_ADDRESS}:{info.port}" in row and "PRIVATE KEY" not in row
    assert "PRIVATE KEY" not in demo.log.read_text()

    done = _ssh(demo, manifest, tmp_path, "echo ran as $(id -un) at shell level $SHLVL; "
                "setsid nohup sleep 300 >/dev/null 2>&1 & echo $!")
    out, _ = done.communicate(timeout=30)
    assert done.returncode == 0, out
    # level 2: bash did not read the user's ~/.bashrc (read at level 1 only), which is this machine's, not the node's
    assert f"ran as {info.user} at shell level 2" in out
    daemon = int(out.split()[-1])  # left its session: only the node's mark in its environment finds it
    running = _ssh(demo, manifest, tmp_path, "sleep 300")  # a task still running
    try:
        wait_until(lambda: len(marked_processes(_mark(demo))) >= 2, 10,
                   "the running session's command")
        listener = demo.running()
        assert listener is not None
        DemoNode(demo.dir.parent).down()  # another process: `stead cluster down`
        wait_until(lambda: not process_is_running(daemon), 10, "the daemon a session left behind to be gone")
        assert not marked_processes(_mark(demo))
        running.wait(timeout=10)  # its connection is gone with the server
    finally:
        running.kill()
    assert demo.running() is None and demo.status_row() == ("demo node", "not running")
    with pytest.raises(RuntimeError, match="make run"):
        demo.manifest("team", "demo-node", "r", ["a"])
    again = demo.up()  # the same host key and, free still, the same port: the applied Secret stays right
    assert again.port == info.port
    assert yaml.safe_load_all(demo.manifest("team", "demo-node", "mitaka-9.0", ["controller", "compute"])).__next__() \
        == secret


def _mark(node: DemoNode) -> bytes:
    return f"STEAD_DEMO_NODE={node.dir}".encode()


def test_without_sshd_the_plane_says_why_and_runs_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from operators.cli.local import start_demo_node as _start_demo_node

    monkeypatch.setattr(operators.cluster.sshd, "SSHD", str(tmp_path / "no-sshd"))
    plane = type("Plane", (), {"home": tmp_path})()
    assert _start_demo_node(plane) is None  # type: ignore[arg-type]
    assert capsys.readouterr().err == (f"no demo SSH node: {tmp_path / 'no-sshd'} is missing: `make ssh-tools` "
                                       "installs openssh-server (as root)\n")
    assert DemoNode(tmp_path).status_row() == (
        "demo node", f"none: {tmp_path / 'no-sshd'} is missing: `make ssh-tools` installs openssh-server (as root)")
    monkeypatch.setenv("STEAD_HOME", str(tmp_path))
    assert main(["cluster", "demo-node", "-n", "team"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stead cluster demo-node: none: ") and "`make run` (or `stead cluster up`) starts it" in err
