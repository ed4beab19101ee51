"""`exec` and `setvar`: run a shell or Python script, locally or as a Kubernetes Job.

Who runs a script is a deployment decision, not a workflow's: the same step runs through a
pluggable `ScriptBackend`. `LocalProcess` runs it on the runner's host (allowed by the operator
only for namespaces its configuration trusts); `KubernetesJob` runs it as a Job in the workflow's
namespace under that namespace's service account, through a client the caller injects, so the
runner never acts with the operator's rights.

Parameters (both types): ``script`` (text), ``interpreter`` (``sh`` | ``bash`` | ``python``, default
``sh``), ``env`` (name -> value, rendered like everything else), ``exportVariables`` (default true:
every non-secret variable whose name is a valid environment name is exported; secrets only reach a
script through ``env`` or a macro). `setvar` also takes ``variables``: the names its output lines
``name=value`` may set; every named variable must be set or the step fails.

The local backend never puts the script on disk or on a command line (both outlive or leak the
secrets a rendered script may hold): the interpreter reads it from a pipe (``/dev/fd/N``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from pipelines.executors.base import (
    ParameterError,
    StepAborted,
    StepContext,
    StepFailed,
    StepResult,
    parameter,
)
from pipelines.kubeapi import KubeApi

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SETVAR_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*=(.*)$")
_MAX_LINE = 64 * 1024
LineSink = Callable[[str, str], None]


class ScriptBackend(Protocol):
    """Runs one script to completion; returns the exit code; output goes to `on_line`."""

    def execute(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str], on_line: LineSink
    ) -> int: ...


def script_env(ctx: StepContext) -> dict[str, str]:
    """The script's own variables: exported variables, then the step's ``env``, then Stead's."""
    env: dict[str, str] = {}
    if parameter(ctx, "exportVariables", bool, True):
        env.update({k: v for k, v in ctx.plain_variables.items() if ENV_NAME.match(k)})
    extra = parameter(ctx, "env", dict, {})
    for name, value in extra.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ParameterError(f"exec step {ctx.step_id!r}: env name {name!r} is not a valid environment name")
        env[name] = value if isinstance(value, str) else str(value)
    env.update(
        STEAD_RUN=ctx.run_uid, STEAD_STEP=ctx.step_id, STEAD_TARGET=ctx.target, STEAD_ATTEMPT=str(ctx.attempt),
    )
    return env


class ScriptExecutor:
    """The `exec` step type."""

    def __init__(self, backend: ScriptBackend) -> None:
        self.backend = backend

    def run(self, ctx: StepContext) -> StepResult:
        code = self._run(ctx, lambda line, stream: None)
        if code != 0:
            raise StepFailed(f"script exited with code {code}", exit_code=code)
        return StepResult(exit_code=0)

    def _run(self, ctx: StepContext, on_line: LineSink) -> int:
        script = parameter(ctx, "script", str)
        interpreter = parameter(ctx, "interpreter", str, "sh")
        if interpreter not in INTERPRETERS:
            raise ParameterError(f"step {ctx.step_id!r}: interpreter must be one of {', '.join(INTERPRETERS)}")
        return self.backend.execute(ctx, interpreter, script, script_env(ctx), on_line)


class SetVarExecutor(ScriptExecutor):
    """The `setvar` step type: output lines ``name=value`` set the variables the step names."""

    def run(self, ctx: StepContext) -> StepResult:
        names = parameter(ctx, "variables", list)
        wanted = {str(n) for n in names}
        found: dict[str, str] = {}

        def collect(line: str, stream: str) -> None:
            if stream != "stdout":
                return
            match = SETVAR_LINE.match(line)
            if match and match.group(1) in wanted:
                found[match.group(1)] = match.group(2).strip()

        code = self._run(ctx, collect)
        if code != 0:
            raise StepFailed(f"script exited with code {code}", exit_code=code)
        missing = sorted(wanted - set(found))
        if missing:
            raise StepFailed(f"the script did not set {', '.join(missing)}", exit_code=0)
        return StepResult(exit_code=0, variables=found, message=f"set {', '.join(sorted(found))}")


INTERPRETERS: dict[str, list[str]] = {
    "sh": ["/bin/sh"],
    "bash": [shutil.which("bash") or "/bin/bash"],
    "python": [shutil.which("python3") or sys.executable],
}


class LocalProcess:
    """Runs scripts as child processes of the runner, each in its own session and process group.

    The environment is built from nothing (PATH, LANG, HOME = the step's working directory, the
    step's variables), never inherited: whatever the runner's own environment holds stays there.
    A timeout or an abort sends SIGTERM to the whole group, then SIGKILL after `kill_grace`.
    When a step ends, however it ends, nothing it started outlives it: its process group is
    killed, and so is every process that still carries the step's marker in its environment
    (a daemon that called setsid() left the group, not the environment it inherited).
    """

    def __init__(self, kill_grace: float = 3.0, path: str | None = None) -> None:
        self.kill_grace = kill_grace
        self.path = path or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")

    def execute(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str], on_line: LineSink
    ) -> int:
        ctx.check()
        ctx.workdir.mkdir(parents=True, exist_ok=True)
        full_env = {"PATH": self.path, "LANG": "C.UTF-8", "HOME": str(ctx.workdir), "STEAD_MARKER": ctx.marker}
        full_env.update(env)
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                [*INTERPRETERS[interpreter], f"/dev/fd/{read_fd}"],
                cwd=ctx.workdir, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(read_fd,), start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            raise StepFailed(f"cannot start {interpreter}: {exc}") from exc
        os.close(read_fd)
        ctx.note_process(proc.pid)
        feeder = threading.Thread(target=_feed, args=(write_fd, script.encode()), daemon=True)
        feeder.start()
        try:
            return self._watch(ctx, proc, on_line)
        finally:
            _kill_group(proc, 0.0)  # the script's background children, even when the script itself is done
            if ctx.marker:
                kill_marked(ctx.marker)
            feeder.join(timeout=1.0)

    def _watch(self, ctx: StepContext, proc: subprocess.Popen[bytes], on_line: LineSink) -> int:
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        buffers: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        exited_at: float | None = None
        stop: str | None = None

        def emit(stream: str, raw: bytes) -> None:
            line = ctx.output(raw.decode("utf-8", errors="replace"), stream)
            on_line(line, stream)

        try:
            while sel.get_map():
                for key, _ in sel.select(timeout=0.1):
                    stream = str(key.data)
                    chunk = os.read(key.fd, 65536)
                    buf = buffers[stream]
                    if not chunk:
                        sel.unregister(key.fileobj)
                        if buf:
                            emit(stream, bytes(buf))
                            buf.clear()
                        continue
                    buf += chunk
                    while True:
                        cut = buf.find(b"\n")
                        if cut < 0:
                            if len(buf) > _MAX_LINE + ctx.mask_reach:
                                emit(stream, _long_line_piece(ctx, buf))
                            break
                        emit(stream, bytes(buf[:cut]))
                        del buf[: cut + 1]
                if stop is None:
                    if ctx.abort.is_set():
                        stop = "aborted"
                    elif ctx.timed_out():
                        stop = "timeout"
                    if stop is not None:
                        _kill_group(proc, self.kill_grace)
                if exited_at is None and proc.poll() is not None:
                    exited_at = time.monotonic()
                if exited_at is not None and time.monotonic() - exited_at > 1.0:
                    break  # a background child keeps the pipes open: do not wait for it
        finally:
            sel.close()
            for stream, buf in buffers.items():
                if buf:
                    emit(stream, bytes(buf))
        code = proc.wait()
        if stop == "aborted":
            raise StepAborted(f"{ctx.key}: aborted")
        if stop == "timeout":
            raise StepFailed(f"timed out after {ctx.timeout:g}s", exit_code=_exit_code(code))
        return _exit_code(code)


def _long_line_piece(ctx: StepContext, buf: bytearray) -> bytes:
    """Take the first ~64 KiB of an overlong line off `buf`, cut where no secret is split (a secret
    straddling the cut would be in clear in both halves, each too short to be recognised)."""
    text = bytes(buf).decode("utf-8", "surrogateescape")  # round-trips any bytes exactly
    at = len(bytes(buf[:_MAX_LINE]).decode("utf-8", "surrogateescape"))
    piece = text[:ctx.safe_cut(text, at) or at].encode("utf-8", "surrogateescape")
    del buf[:len(piece)]
    return piece


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _feed(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError:
        pass  # the interpreter exited without reading all of it
    finally:
        os.close(fd)


def _kill_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, wait up to `grace`, then SIGKILL what is left of it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _marked(marker: str) -> Iterator[tuple[int, int]]:
    """(pid, pgid) of every process whose environment holds ``STEAD_MARKER=marker``."""
    needle = f"STEAD_MARKER={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            yield int(entry), int(fields[2])
        except (OSError, IndexError, ValueError):
            continue


def kill_marked(marker: str) -> int:
    """SIGKILL every process that carries `marker`; how many there were. Repeated until none is
    left (a process may fork while it is being killed), at most a few rounds."""
    killed = 0
    for _ in range(5):
        found = [pid for pid, _ in _marked(marker) if pid != os.getpid()]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
    return killed


def kill_leftover(pgid: int, marker: str) -> bool:
    """Kill the process group `pgid` if its processes carry ``STEAD_MARKER=marker``.

    A runner killed with SIGKILL leaves its scripts running; the restarted run calls this for the
    steps that were running, before running them again. The marker check makes a recycled pgid
    that now belongs to someone else safe.
    """
    found = any(group == pgid for _, group in _marked(marker))
    if found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return found


class KubernetesJob:
    """Runs scripts as Jobs in one namespace, under that namespace's service account.

    The script and the environment travel in a Secret (never in the Job's spec, which anyone who
    can list Jobs reads), owned by the Job so Kubernetes collects both. The Job name is derived
    from the run, the instance and the attempt: a restarted runner finds the Job of the attempt it
    was waiting for and waits again instead of starting the script a second time.
    """

    def __init__(
        self, api: KubeApi, namespace: str, service_account: str = "default",
        image: str = "python:3.11-slim", poll_interval: float = 1.0, ttl_seconds: int = 3600,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.service_account = service_account
        self.image = image
        self.poll_interval = poll_interval
        self.ttl_seconds = ttl_seconds

    def job_name(self, ctx: StepContext) -> str:
        digest = hashlib.sha256(f"{ctx.run_uid}/{ctx.key}/{ctx.attempt}".encode()).hexdigest()[:24]
        return f"stead-step-{digest}"

    def manifests(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Job and its Secret (without the owner reference, known only once the Job exists)."""
        name = self.job_name(ctx)
        labels = {"app.kubernetes.io/managed-by": "stead", "stead.dev/step": name}
        command = {"sh": "/bin/sh", "bash": "bash", "python": "python3"}[interpreter]
        secret: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
            "type": "Opaque",
            "stringData": {"script": script, **{f"env-{k}": v for k, v in env.items()}},
        }
        job: dict[str, Any] = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": name, "namespace": self.namespace, "labels": labels,
                "annotations": {"stead.dev/run": ctx.run_uid, "stead.dev/instance": ctx.key},
            },
            "spec": {
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": self.ttl_seconds,
                **({"activeDeadlineSeconds": max(1, int(ctx.timeout))} if ctx.timeout else {}),
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": self.service_account,
                        "containers": [{
                            "name": "step",
                            "image": self.image,
                            "command": [command, "/stead/script"],
                            "workingDir": "/work",
                            "env": [
                                {"name": k, "valueFrom": {"secretKeyRef": {"name": name, "key": f"env-{k}"}}}
                                for k in env
                            ],
                            "volumeMounts": [
                                {"name": "script", "mountPath": "/stead", "readOnly": True},
                                {"name": "work", "mountPath": "/work"},
                            ],
                        }],
                        "volumes": [
                            {"name": "script", "secret": {"secretName": name, "defaultMode": 0o555,
                                                          "items": [{"key": "script", "path": "script"}]}},
                            {"name": "work", "emptyDir": {}},
                        ],
                    },
                },
            },
        }
        return job, secret

    def execute(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str], on_line: LineSink
    ) -> int:
        ctx.check()
        job, secret = self.manifests(ctx, interpreter, script, env)
        name = job["metadata"]["name"]
        existing = self.api.get("batch/v1", "Job", self.namespace, name)
        if existing is None:
            created = self.api.create(job)
            secret["metadata"]["ownerReferences"] = [{
                "apiVersion": "batch/v1", "kind": "Job", "name": name,
                "uid": created["metadata"]["uid"], "controller": False,
            }]
            self.api.create(secret)
        else:
            ctx.output(f"waiting again for Job {self.namespace}/{name} of this attempt", "stderr")
        while True:
            current = self.api.get("batch/v1", "Job", self.namespace, name)
            if current is None:
                raise StepFailed(f"Job {self.namespace}/{name} disappeared")
            outcome = _job_outcome(current)
            if outcome is not None:
                break
            if ctx.abort.is_set():
                self.api.delete("batch/v1", "Job", self.namespace, name)
                raise StepAborted(f"{ctx.key}: aborted (Job {name} deleted)")
            if ctx.timed_out():
                self.api.delete("batch/v1", "Job", self.namespace, name)
                raise StepFailed(f"timed out after {ctx.timeout:g}s (Job {name} deleted)")
            ctx.abort.wait(self.poll_interval)
        code = 0 if outcome == "Complete" else 1
        if outcome == "Failed":  # why Kubernetes gave up (BackoffLimitExceeded, DeadlineExceeded, ...)
            for cond in (current.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Failed" and cond.get("status") == "True":
                    ctx.output(f"Job {name} failed: {cond.get('reason', '')}: {cond.get('message', '')}", "stderr")
        pods = self.api.list("v1", "Pod", self.namespace, f"job-name={name}")
        if pods:
            pod = max(pods, key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")))
            code = _container_exit_code(pod, default=code)
            for line in self.api.logs(self.namespace, pod["metadata"]["name"]).splitlines():
                on_line(ctx.output(line, "stdout"), "stdout")
        return code


def _job_outcome(job: Mapping[str, Any]) -> str | None:
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    if status.get("succeeded"):
        return "Complete"
    if status.get("failed"):
        return "Failed"
    return None


def _container_exit_code(pod: Mapping[str, Any], default: int) -> int:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and "exitCode" in terminated:
            return int(terminated["exitCode"])
    return default
