"""The runner as the operator runs it: its own process, killed, aborted, signalled, watched."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.control import (
    clear_abort,
    is_running,
    prepare_run,
    read_output,
    read_progress,
    read_status,
    start_run,
)
from pipelines.hooks import new_run_key, seal
from pipelines.model import Workflow
from pipelines.paths import RunPaths
from tests.polling import wait_until

PY = sys.executable




def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def processes_with(marker: str) -> list[int]:
    """Pids whose environment carries STEAD_MARKER=marker."""
    needle = f"STEAD_MARKER={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def pgid_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Runner:
    """``python -m pipelines run`` as a child process, its events in a file."""

    def __init__(self, state: Path, uid: str, workflow: Path, *extra: str) -> None:
        self.state, self.uid = state, uid
        self.events_file = state / f"events-{uid}-{time.monotonic_ns()}.jsonl"
        self.stderr_file = self.events_file.with_suffix(".err")
        with open(self.events_file, "wb") as out, open(self.stderr_file, "wb") as err:
            self.proc = subprocess.Popen(
                [PY, "-m", "pipelines", "run", "--workflow", str(workflow), "--run-id", uid, "--state", str(state),
                 *extra], stdout=out, stderr=err, start_new_session=True,
            )

    def wait(self, seconds: float = 60) -> int:
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"runner did not exit: {self.stderr_file.read_text()}") from None

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.events_file.read_text().splitlines()]


@pytest.fixture
def cleanup() -> Iterator[list[Runner]]:
    runners: list[Runner] = []
    yield runners
    for runner in runners:
        if runner.proc.poll() is None:
            runner.proc.kill()
            runner.proc.wait()


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def step_records(state: Path, uid: str) -> dict[str, dict[str, Any]]:
    status = read_status(RunPaths(state, uid))
    assert status is not None
    return {(f"{r['step']}@{r['target']}" if r["target"] else r["step"]): r for r in status["steps"]}


def test_a_killed_runner_started_again_repeats_no_finished_step(tmp_path: Path, cleanup: list[Runner]) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    workflow = write(tmp_path / "wf.yaml", {"steps": [
        {"id": "s1", "type": "exec", "parameters": {"script": f"echo x >> {marks}/s1"}},
        {"id": "s2", "type": "exec", "target": ["r1", "r2"], "dependsOn": ["s1"],
         "parameters": {"script": f"echo x >> {marks}/s2-$STEAD_TARGET"}},
        {"id": "s3", "type": "setvar", "dependsOn": ["s2"],
         "parameters": {"script": f"echo x >> {marks}/s3; echo color=blue", "variables": ["color"]}},
        {"id": "slow", "type": "exec", "dependsOn": ["s3"], "parameters": {"script": (
            f"echo x >> {marks}/slow.count; while [ ! -f {marks}/release ]; do sleep 0.05; done; "
            f"echo x >> {marks}/slow.done")}},
        {"id": "s5", "type": "exec", "dependsOn": ["slow"],
         "parameters": {"script": f"echo @@{{color}}@@ >> {marks}/s5"}},
    ]})
    hooks = ("--hooks", "pipelines.hooks:SUBSTITUTE")
    first = Runner(tmp_path, "k1", workflow, *hooks)
    cleanup.append(first)
    wait_until(lambda: (marks / "slow.count").exists(), what="the slow step to start")
    pgid = wait_until(lambda: step_records(tmp_path, "k1")["slow"].get("pgid"), what="the slow step's pgid")
    first.proc.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    assert pgid_alive(pgid), "a SIGKILLed runner leaves its script running: the next runner must stop it"
    assert step_records(tmp_path, "k1")["slow"]["state"] == "running"

    second = Runner(tmp_path, "k1", workflow, *hooks)
    cleanup.append(second)
    wait_until(lambda: lines(marks / "slow.count") == 2, what="the interrupted step to start again")
    wait_until(lambda: not pgid_alive(pgid), what="the leftover script to be stopped")
    (marks / "release").touch()
    assert second.wait() == 0, second.stderr_file.read_text()

    for name in ("s1", "s2-r1", "s2-r2", "s3", "slow.done"):
        assert lines(marks / name) == 1, name
    assert lines(marks / "slow.count") == 2
    assert (marks / "s5").read_text() == "blue\n"  # the variable set before the kill survived it
    recs = step_records(tmp_path, "k1")
    assert {r["state"] for r in recs.values()} == {"success"}
    assert recs["slow"]["attempts"] == 1  # the interrupted attempt was run again under its own number
    status = read_status(RunPaths(tmp_path, "k1"))
    assert status is not None and status["runs"] == 2
    resumed = second.events()
    assert resumed[0]["resumed"] is True
    assert {e["step"] for e in resumed if e["event"] == "step"} == {"slow", "s5"}


def test_abort_of_a_long_running_step(tmp_path: Path, cleanup: list[Runner]) -> None:
    workflow = write(tmp_path / "wf.yaml", {"steps": [
        {"id": "a", "type": "noop"},
        {"id": "long", "type": "exec", "dependsOn": ["a"], "target": ["r1", "r2"],
         "parameters": {"script": "sleep 120 & sleep 120; wait"}},
        {"id": "b", "type": "exec", "dependsOn": ["long"], "parameters": {"script": "touch b-ran"}},
    ]})
    runner = Runner(tmp_path, "ab1", workflow)
    cleanup.append(runner)
    paths = RunPaths(tmp_path, "ab1")
    wait_until(lambda: len((read_progress(paths) or {}).get("running", [])) == 2, what="both long steps to run")
    wait_until(lambda: processes_with("ab1/long@r1") and processes_with("ab1/long@r2"), what="the scripts")
    assert is_running(paths)
    started = time.monotonic()
    out = subprocess.run([PY, "-m", "pipelines", "abort", "--state", str(tmp_path), "--run-id", "ab1"], check=True)
    assert out.returncode == 0
    assert runner.wait(30) == 3
    assert time.monotonic() - started < 15
    recs = step_records(tmp_path, "ab1")
    assert [recs[k]["state"] for k in ("a", "long@r1", "long@r2", "b")] == ["success", "aborted", "aborted", "aborted"]
    assert recs["long@r1"]["finishedAt"] and recs["long@r1"]["message"] == "aborted while running"
    assert not processes_with("ab1/long@r1") and not processes_with("ab1/long@r2")
    assert not is_running(paths)
    progress = read_progress(paths)
    assert progress is not None and progress["phase"] == "Aborted"
    assert runner.events()[-1] == {**runner.events()[-1], "event": "run", "phase": "Aborted"}

    # a retry clears the abort and runs what did not succeed
    fast = write(tmp_path / "wf2.yaml", {"steps": [
        {"id": "a", "type": "noop"},
        {"id": "long", "type": "exec", "dependsOn": ["a"], "target": ["r1", "r2"], "parameters": {"script": "true"}},
        {"id": "b", "type": "exec", "dependsOn": ["long"], "parameters": {"script": "true"}},
    ]})
    clear_abort(paths)
    retry = Runner(tmp_path, "ab1", fast)
    cleanup.append(retry)
    assert retry.wait() == 0
    assert {e["step"] for e in retry.events() if e["event"] == "step"} == {"long", "b"}


def test_sigterm_aborts_the_run(tmp_path: Path, cleanup: list[Runner]) -> None:
    workflow = write(tmp_path / "wf.yaml", {"steps": [
        {"id": "long", "type": "exec", "parameters": {"script": "echo started; sleep 120"}},
    ]})
    runner = Runner(tmp_path, "t1", workflow)
    cleanup.append(runner)
    paths = RunPaths(tmp_path, "t1")
    wait_until(lambda: read_output(paths, "long") == "started\n", what="the step to start")
    runner.proc.send_signal(signal.SIGTERM)
    assert runner.wait(30) == 3
    assert step_records(tmp_path, "t1")["long"]["state"] == "aborted"


def test_status_commands(tmp_path: Path, cleanup: list[Runner]) -> None:
    workflow = write(tmp_path / "wf.yaml", {"name": "demo", "steps": [
        {"id": "hello", "type": "exec", "target": ["r1"], "parameters": {"script": "echo hello; echo warn >&2"}},
        {"id": "fail", "type": "exec", "dependsOn": ["hello"], "parameters": {"script": "exit 5"}},
    ]})
    runner = Runner(tmp_path, "st1", workflow)
    cleanup.append(runner)
    assert runner.wait() == 1

    def cli(*args: str) -> str:
        return subprocess.run([PY, "-m", "pipelines", "status", "--state", str(tmp_path), "--run-id", "st1", *args],
                              check=True, capture_output=True, text=True).stdout

    table = cli().splitlines()
    assert table[0].startswith("run st1  Failed  1/2  step fail failed: script exited with code 5")
    assert table[1].split() == ["STEP", "TARGET", "STATE", "ATTEMPTS", "EXIT", "STARTED", "FINISHED", "MESSAGE"]
    assert table[2].split()[:5] == ["fail", "-", "failure", "1", "5"]
    assert table[3].split()[:5] == ["hello", "r1", "success", "1", "0"]
    assert cli("--output", "hello@r1") == "hello\nwarn\n"
    assert json.loads(cli("--progress"))["progress"] == {"done": 1, "total": 2}
    assert {s["state"] for s in json.loads(cli("--json"))["steps"]} == {"success", "failure"}
    missing = subprocess.run([PY, "-m", "pipelines", "status", "--state", str(tmp_path), "--run-id", "nope"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "no run nope" in missing.stderr


def test_bad_input_is_refused_with_the_reason(tmp_path: Path) -> None:
    workflow = write(tmp_path / "wf.yaml", {"steps": [
        {"id": "a", "type": "noop", "dependsOn": ["b"]}, {"id": "b", "type": "noop", "dependsOn": ["a"]},
    ]})
    out = subprocess.run([PY, "-m", "pipelines", "run", "--workflow", str(workflow), "--run-id", "x",
                          "--state", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2 and "dependency cycle" in out.stderr
    out = subprocess.run([PY, "-m", "pipelines", "status", "--state", str(tmp_path), "--run-id", "../etc"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "run uid '../etc' must match" in out.stderr


def test_the_operator_api_starts_watches_and_reads_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", "/operator/kubeconfig")
    monkeypatch.setenv("STEAD_VAULT_KEY", "operator-only")
    key = new_run_key()
    workflow = Workflow.model_validate({
        "secrets": {"password": seal("pa55-word-xyz", key, "password")},
        "steps": [
            {"id": "env", "type": "exec",
             "parameters": {"script": 'echo "${KUBECONFIG:-none} ${STEAD_VAULT_KEY:-none} $HOME"'}},
            {"id": "login", "type": "exec", "dependsOn": ["env"],
             "parameters": {"script": "echo logging in with @@{password}@@"}},
        ],
    })
    paths = prepare_run(tmp_path, "op1", workflow)

    async def go() -> tuple[list[dict[str, Any]], int]:
        run = await start_run(paths, secret_key=key, hooks="pipelines.hooks:SUBSTITUTE")
        events = [event async for event in run.events()]
        return events, await run.wait()

    events, code = asyncio.run(go())
    assert code == 0
    assert events[0]["event"] == "run" and events[-1] == {**events[-1], "phase": "Succeeded", "done": 2, "total": 2}
    assert [(e["step"], e["state"]) for e in events if e["event"] == "step"] == [
        ("env", "running"), ("env", "success"), ("login", "running"), ("login", "success")]
    assert read_output(paths, "env") == f"none none {paths.instance_workdir('env')}\n"
    assert read_output(paths, "login") == "logging in with ********\n"
    assert "pa55" not in json.dumps(read_status(paths)) + json.dumps(events)


def test_the_runners_stderr_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator keeps the runner's stderr (runner.log) and quotes it on the run: log records and
    uncaught exceptions pass the run's masker first."""
    import io
    import logging
    import threading

    from pipelines import __main__ as cli

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [handler])
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(sys, "stderr", stream)
    cli._mask_stderr(lambda text: text.replace("hunter2", "********"))
    logging.getLogger("pipelines.test").warning("password %s", "hunter2")
    try:
        raise RuntimeError("bad value hunter2")
    except RuntimeError as error:
        sys.excepthook(RuntimeError, error, error.__traceback__)
    text = stream.getvalue()
    assert "hunter2" not in text and "password ********" in text and "RuntimeError: bad value ********" in text
