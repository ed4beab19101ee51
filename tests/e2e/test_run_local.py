"""`make run`: `stead run --local always` starts a control plane (and its local node where the machine allows
one), the operators; Ctrl-C stops all it started, the runs in flight included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import IO

from operators.cli.cluster import PORT_VARIABLES
from operators.cluster import Binaries, LocalControlPlane, LocalNode
from operators.cluster.node import node_unavailable_reason
from operators.cluster.processes import marked_processes
from operators.cluster.sshd import DemoNode, sshd_unavailable_reason
from tests.e2e.conftest import STEAD, free_port, wait_until


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _start(tmp_path: Path, output: int | IO[bytes]) -> tuple[subprocess.Popen[bytes], Path, dict[str, str], int]:
    home = tmp_path / "home"
    health = free_port()
    env = {**os.environ, "STEAD_HOME": str(home), **{var: str(free_port()) for var in PORT_VARIABLES.values()},
           "STEAD_NODE_BRIDGE": "steadr0", "STEAD_NODE_SUBNET": "10.93.0.0/16"}  # beside the session's node
    env.pop("KUBECONFIG", None)
    env.pop("STEAD_NODE", None)
    proc = subprocess.Popen(
        [str(STEAD), "run", "--local", "always", "--webhook-port", str(free_port()), "--health-port", str(health),
         "--config-api-port", str(free_port())],
        env=env, stdout=output, stderr=subprocess.STDOUT,
    )

    def ready() -> bool:
        assert proc.poll() is None, f"stead run exited {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:  # refused while starting, 503 until ready
            return False

    try:
        wait_until(ready, 120, "stead run --local to be ready")
    except BaseException:
        proc.kill()
        raise
    return proc, home, env, health


def _plane_pids(home: Path, env: dict[str, str]) -> list[int]:
    """The plane's processes, and its node's where this machine runs one (then Ready), and its demo SSH
    node's where sshd is installed (then answering)."""
    plane = LocalControlPlane(home, **{arg: int(env[var]) for arg, var in PORT_VARIABLES.items()})
    pids = list(plane.status().pids.values())
    assert len(pids) == 3 and all(_pid_alive(p) for p in pids)
    if sshd_unavailable_reason() is None:
        demo = DemoNode(home)
        assert demo.running() is not None, demo.status_row()
        pids.append(json.loads((demo.dir / "run" / "sshd.json").read_text())["pid"])
    if node_unavailable_reason() is None:
        node = LocalNode(plane).status()
        assert node.ready and len(node.pids) == 3, node
        pids += node.pids.values()
    return pids


SLEEPER = {
    "apiVersion": "stead.dev/v1alpha1", "kind": "Blueprint", "metadata": {"name": "sleeper"},
    "spec": {"active": True, "substrates": [{"name": "host", "type": "Local"}],
             "services": [{"name": "S", "actions": [
                 {"name": "create", "tasks": [{"name": "nap", "type": "exec", "script": "sleep 600"}]}]}],
             "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}]}}


def _run_processes(run_uid: str) -> list[int]:
    """The processes of a run's scripts: those whose environment carries the run's uid (STEAD_RUN)."""
    return [pid for pid in marked_processes(f"STEAD_RUN={run_uid}".encode()) if _pid_alive(pid)]


def test_run_local_starts_everything_and_ctrl_c_stops_it(tmp_path: Path, binaries: Binaries) -> None:
    """Issue 27: Ctrl-C left a run's runner and its script running after the control plane was gone."""
    log = (tmp_path / "run.log").open("wb")
    proc, home, env, _ = _start(tmp_path, log)
    try:
        kubeconfig = home / "kubeconfig"
        kubectl = [str(binaries.kubectl), "--kubeconfig", str(kubeconfig)]
        subprocess.run([*kubectl, "apply", "-f", "examples/environment.yaml"], check=True, capture_output=True)
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(SLEEPER).encode(), check=True,
                       capture_output=True)
        subprocess.run([*kubectl, "wait", "--for=condition=Ready", "environment/demo", "bp/sleeper",
                        "--timeout=30s"], check=True, capture_output=True)
        subprocess.run([*kubectl, "apply", "-f", "-"], check=True, capture_output=True, input=json.dumps({
            "apiVersion": "stead.dev/v1alpha1", "kind": "App", "metadata": {"name": "napper"},
            "spec": {"blueprint": "sleeper"}}).encode())

        def run_in_flight() -> tuple[int, list[int]] | None:
            uid = subprocess.run([*kubectl, "get", "actionrun", "napper-create", "-o", "jsonpath={.metadata.uid}"],
                                 capture_output=True, text=True).stdout.strip()
            lock = home / "store-runs" / "runs" / uid / "lock"
            scripts = _run_processes(uid) if uid else []
            return (int(lock.read_text()), scripts) if scripts and lock.exists() else None

        runner, scripts = wait_until(run_in_flight, 60, "the create run's script running", interval=0.5)
        pids = _plane_pids(home, env)
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        log.close()
    assert code == 0
    assert not any(_pid_alive(p) for p in pids), "Ctrl-C left control-plane processes running"
    assert not _pid_alive(runner), "Ctrl-C left the run's runner running"
    assert not any(_pid_alive(p) for p in scripts), "Ctrl-C left the run's script running"


def test_run_local_stops_what_it_started_when_its_output_pipe_is_gone(tmp_path: Path) -> None:
    """`make run | tee log`, then Ctrl-C: tee dies first, so every line the operator writes on its
    way out meets a closed pipe. Before, the first one raised and the control plane stayed up."""
    proc, home, env, _ = _start(tmp_path, subprocess.PIPE)
    try:
        pids = _plane_pids(home, env)
    finally:
        assert proc.stdout is not None
        proc.stdout.close()  # the reader (tee) is gone
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert not any(_pid_alive(p) for p in pids), "a closed output pipe left control-plane processes running"
