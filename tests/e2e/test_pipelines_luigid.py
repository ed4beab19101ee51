"""Workflows on a real central scheduler: `luigid` started on loopback by the test.

The runner takes ``--scheduler-url``; luigid then sees every instance as a task of family
``stead.StepTask`` with the run uid, step and target as parameters. A runner killed mid-run and
started again reconnects as the same worker (its id derives from the run uid), so luigid hands it
back the task its predecessor was running instead of leaving it RUNNING for a dead worker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.control import read_status
from pipelines.paths import RunPaths
from tests.polling import wait_until

LUIGID = Path(sys.executable).parent / "luigid"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])




class Luigid:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def api(self, method: str, **data: Any) -> Any:
        query = urllib.parse.urlencode({"data": json.dumps(data)})
        with urllib.request.urlopen(f"{self.url}api/{method}?{query}", timeout=5) as response:
            return json.loads(response.read())["response"]

    def tasks(self, status: str) -> dict[str, Any]:
        result: dict[str, Any] = self.api("task_list", status=status, upstream_status="", search="")
        return result


@pytest.fixture
def luigid(tmp_path: Path) -> Iterator[Luigid]:
    port = free_port()
    home = tmp_path / "luigid"
    (home / "logs").mkdir(parents=True)
    log = home / "luigid.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(LUIGID), "--address", "127.0.0.1", "--port", str(port),
             "--state-path", str(home / "state.pickle"), "--logdir", str(home / "logs")],
            cwd=home, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = Luigid(f"http://127.0.0.1:{port}/", proc, log)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"luigid exited: {log.read_text()}")
        try:
            server.api("ping", worker="probe")
        except OSError:
            return False
        return True

    try:
        wait_until(up, 30, "luigid to answer")
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_cli(state: Path, uid: str, workflow: Path, url: str) -> subprocess.Popen[bytes]:
    with open(state / f"{uid}.err", "ab") as err:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "pipelines", "run", "--workflow", str(workflow), "--run-id", uid,
             "--state", str(state), "--scheduler-url", url],
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )


def count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_run_uses_the_central_scheduler(tmp_path: Path, luigid: Luigid) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(yaml.safe_dump({"parallelism": 4, "steps": [
        {"id": "prepare", "type": "exec", "parameters": {"script": f"echo x >> {marks}/prepare"}},
        {"id": "install", "type": "exec", "target": ["n1", "n2", "n3"], "dependsOn": ["prepare"],
         "parameters": {"script": f"echo x >> {marks}/install-$STEAD_TARGET"}},
        {"id": "finish", "type": "noop", "dependsOn": ["install"]},
    ]}))
    proc = run_cli(tmp_path, "central-1", workflow, luigid.url)
    assert proc.wait(timeout=120) == 0, (tmp_path / "central-1.err").read_text()
    done = luigid.tasks("DONE")
    ours = {(t["params"]["step"], t["params"]["target"]) for t in done.values()
            if t["name"] == "stead.StepTask" and t["params"]["run_uid"] == "central-1"}
    assert ours == {("prepare", ""), ("install", "n1"), ("install", "n2"), ("install", "n3"), ("finish", "")}
    assert any(t["name"] == "stead.RunTask" for t in done.values())
    for name in ("prepare", "install-n1", "install-n2", "install-n3"):
        assert count(marks / name) == 1
    status = read_status(RunPaths(tmp_path, "central-1"))
    assert status is not None and status["phase"] == "Succeeded" and status["scheduler"] == luigid.url


def test_a_killed_runner_resumes_through_the_central_scheduler(tmp_path: Path, luigid: Luigid) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    workflow = tmp_path / "wf.yaml"
    workflow.write_text(yaml.safe_dump({"steps": [
        {"id": "one", "type": "exec", "parameters": {"script": f"echo x >> {marks}/one"}},
        {"id": "slow", "type": "exec", "dependsOn": ["one"], "parameters": {"script": (
            f"echo x >> {marks}/slow; while [ ! -f {marks}/release ]; do sleep 0.05; done")}},
        {"id": "three", "type": "exec", "dependsOn": ["slow"], "parameters": {"script": f"echo x >> {marks}/three"}},
    ]}))
    first = run_cli(tmp_path, "central-2", workflow, luigid.url)
    try:
        wait_until(lambda: count(marks / "slow") == 1, 60, "the slow step to start")
        wait_until(lambda: any(t["params"].get("step") == "slow" for t in luigid.tasks("RUNNING").values()), 30,
                   "luigid to show the slow step running")
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    second = run_cli(tmp_path, "central-2", workflow, luigid.url)
    try:
        wait_until(lambda: count(marks / "slow") == 2, 60, "luigid to hand the interrupted step back")
        (marks / "release").touch()
        assert second.wait(timeout=120) == 0, (tmp_path / "central-2.err").read_text()
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert count(marks / "one") == 1 and count(marks / "three") == 1
