"""The caller's side of a run: what the operator calls to start, watch, abort and read runs.

Runs execute in their own process (``python -m pipelines run``), never in the operator's event
loop: Luigi's worker blocks, may fork, and installs signal handlers, none of which an asyncio
process with threads tolerates. The operator:

1. writes the workflow (`prepare_run`), sealing the secrets the run needs with a fresh run key
   (`pipelines.hooks.seal`);
2. starts the runner (`start_run`), with an environment built from nothing (`runner_environment`):
   no kubeconfig, no token, none of the operator's variables; the run key goes over stdin;
3. follows it by reading the JSON lines of its stdout (`RunProcess.events`: one line per step
   state change, each with ``done``/``total``), or, cheaper still when it was restarted and is no
   longer the runner's parent, by reading ``status.json`` (`read_progress`, bounded in size);
4. reads the full per-step status from the run store when it needs it (`read_status`), and the
   whole output of one step (`read_output`);
5. aborts by creating the abort file (`request_abort`; works whoever started the runner) or by
   SIGTERM to the runner (`RunProcess.abort`); retries with `clear_abort` and a new start under the
   same uid, which skips the steps that succeeded.

`is_running` tells whether a live runner holds the run (an flock that dies with the process);
`stop_runner` stops one and whatever its running steps started, without ending the run: the next
start resumes it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.executors.script import kill_leftover, kill_marked
from pipelines.model import Workflow
from pipelines.paths import RunPaths, private_dir, write_private
from pipelines.store import borrowed_store

SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
"""The only variables a runner inherits. Everything else (KUBECONFIG, KUBERNETES_SERVICE_HOST,
cloud credentials, the operator's settings) stays with the operator."""


def run_paths(state_dir: Path, uid: str) -> RunPaths:
    return RunPaths(state_dir, uid)


def prepare_run(state_dir: Path, uid: str, workflow: Workflow) -> RunPaths:
    """Write the workflow where the runner will read it; returns the run's paths."""
    paths = RunPaths(state_dir, uid)
    state_dir.mkdir(parents=True, exist_ok=True)
    private_dir(paths.run_dir, upto=state_dir)
    write_private(paths.workflow_file, workflow.model_dump_json(by_alias=True, exclude_defaults=True))
    return paths


def runner_command(
    paths: RunPaths, *, workflow_file: Path | None = None, scheduler_url: str | None = None,
    hooks: str | None = None, kube_api: str | None = None, exec_backend: str = "local",
    job_namespace: str | None = None, job_service_account: str | None = None, job_image: str | None = None,
    secret_key_stdin: bool = False, python: str = sys.executable, extra: Sequence[str] = (),
    http_allow: Sequence[str] = (), script_user: str | None = None,
) -> list[str]:
    """The argv of ``python -m pipelines run`` for this run."""
    argv = [
        python, "-m", "pipelines", "run", "--workflow", str(workflow_file or paths.workflow_file),
        "--run-id", paths.uid, "--state", str(paths.state_dir),
    ]
    if scheduler_url:
        argv += ["--scheduler-url", scheduler_url]
    if hooks:
        argv += ["--hooks", hooks]
    if kube_api:
        argv += ["--kube-api", kube_api]
    if exec_backend != "local":
        argv += ["--exec-backend", exec_backend]
    for flag, value in (("--job-namespace", job_namespace), ("--job-service-account", job_service_account),
                        ("--job-image", job_image), ("--script-user", script_user)):
        if value:
            argv += [flag, value]
    for network in http_allow:
        argv += ["--http-allow", network]
    if secret_key_stdin:
        argv.append("--secret-key-stdin")
    return [*argv, *extra]


def runner_environment(paths: RunPaths, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A scrubbed environment for the runner: see `SAFE_ENV`."""
    env = {k: v for k in SAFE_ENV if (v := os.environ.get(k)) is not None}
    env["HOME"] = str(paths.run_dir)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class RunProcess:
    """A runner started by this process (asyncio)."""

    paths: RunPaths
    process: asyncio.subprocess.Process

    @property
    def pid(self) -> int:
        return self.process.pid

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The runner's events, one per step state change and two per run, until it exits.

        Keep reading them (or start the runner with ``extra=["--events", "none"]``): a runner whose
        stdout pipe is full waits for its reader before it records the next state change.
        """
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(raw)
                if isinstance(event, dict):
                    yield event

    async def wait(self) -> int:
        """The runner's exit code: 0 succeeded, 1 failed, 3 aborted, 4 already running, 2 usage."""
        return await self.process.wait()

    def abort(self) -> None:
        """SIGTERM: the runner stops its running steps and marks the rest aborted."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)


async def start_run(
    paths: RunPaths, *, secret_key: bytes | None = None, env: Mapping[str, str] | None = None,
    stderr: int | None = None, **command: Any,
) -> RunProcess:
    """Start the runner in its own session (it outlives an operator restart), stdout piped."""
    argv = runner_command(paths, secret_key_stdin=secret_key is not None, **command)
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if secret_key is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=stderr, env=runner_environment(paths, env),
        cwd=str(paths.run_dir), start_new_session=True, limit=1 << 20,
    )
    if secret_key is not None:
        assert process.stdin is not None
        process.stdin.write(base64.b64encode(secret_key) + b"\n")
        await process.stdin.drain()
        process.stdin.close()
    return RunProcess(paths, process)


def request_abort(paths: RunPaths) -> None:
    """Ask the run to abort; the runner notices within a fraction of a second (or when it starts)."""
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    paths.abort_file.touch()


def clear_abort(paths: RunPaths) -> None:
    """Before running an aborted run again (a retry)."""
    with contextlib.suppress(FileNotFoundError):
        paths.abort_file.unlink()


def is_running(paths: RunPaths) -> bool:
    """True while a runner process holds the run's lock."""
    try:
        fd = os.open(paths.lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def runner_pid(paths: RunPaths) -> int | None:
    """The pid of the live runner that holds the run's lock (it writes it there), or None."""
    if not is_running(paths):
        return None
    with contextlib.suppress(OSError, ValueError):
        return int(paths.lock_file.read_text().strip())
    return None


def stop_runner(paths: RunPaths, grace: float = 5.0) -> bool:
    """Stop the run's live runner and every process its running steps started, and leave the run as
    it was: not aborted, its running steps still recorded as running, so that the next runner of the
    uid resumes it (running those steps again, as after a crash). True if a runner was stopped.

    The runner gets SIGKILL rather than SIGTERM: SIGTERM means abort (the run would end Aborted).
    Its steps' processes live in sessions (and, as root, cgroups) of their own, so they are found as
    a resumed runner finds its leftovers (`kill_leftover`), or by their marker when the step had not
    recorded its process group yet. Jobs and ssh sessions are not touched: a resumed run finds its
    Jobs again, and a remote command is ended by its host when the connection drops, or by the
    resumed step's own check."""
    pid = runner_pid(paths)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while is_running(paths) and time.monotonic() < deadline:
        time.sleep(0.02)
    status = read_status(paths) or {}
    for record in status.get("steps") or []:
        if record.get("state") != "running":
            continue
        key = f"{record['step']}@{record['target']}" if record.get("target") else str(record["step"])
        marker = f"{paths.uid}/{key}"
        pgid = record.get("pgid")
        if not (isinstance(pgid, int) and pgid > 1 and kill_leftover(pgid, marker)):
            kill_marked(marker)
    return True


def read_progress(paths: RunPaths) -> dict[str, Any] | None:
    """The run's summary (phase, done/total, counts, running and failed steps), or None before start.

    A small file rewritten atomically at most a few times a second: cheap to poll or watch.
    """
    try:
        data: dict[str, Any] = json.loads(paths.status_file.read_bytes())
    except FileNotFoundError:
        return None
    return data


def read_status(paths: RunPaths) -> dict[str, Any] | None:
    """The whole run from the store: the run record plus every step record (masked, bounded output)."""
    if not paths.store.exists():
        return None
    with borrowed_store(paths.store) as store:
        run = store.run(paths.uid)
        if run is None:
            return None
        run["steps"] = [record for _, record in store.steps(paths.uid)]
    counts: dict[str, int] = {}
    for record in run["steps"]:
        counts[record["state"]] = counts.get(record["state"], 0) + 1
    run["counts"] = counts
    run["progress"] = {"done": counts.get("success", 0), "total": run.get("total", len(run["steps"]))}
    return run


def read_output(paths: RunPaths, step: str, target: str = "") -> str:
    """The whole (masked) output of one instance, every attempt; empty if it printed nothing."""
    key = f"{step}@{target}" if target else step
    try:
        return paths.output_file(key).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def forget_run(paths: RunPaths) -> int:
    """Delete a finished run's records and Targets (its files are the caller's to remove)."""
    if is_running(paths):
        raise RuntimeError(f"run {paths.uid} is running")
    if not paths.store.exists():
        return 0
    with borrowed_store(paths.store) as store:
        return store.delete_run(paths.uid)
