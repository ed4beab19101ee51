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
import grp
import hashlib
import os
import pwd
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pipelines.executors.base import (
    ParameterError,
    StepAborted,
    StepContext,
    StepFailed,
    StepResult,
    parameter,
)
from pipelines.kubeapi import KubeApi, KubeApiError

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


@dataclass(frozen=True)
class ScriptUser:
    """The unprivileged user local scripts run as, when the runner is root.

    A script running with the runner's own user could read whatever the runner can: the operator's
    keys and kubeconfig, other runs' credentials, the runner's environment and memory through
    /proc. Running it as another user (its own supplementary groups cleared) leaves it only what
    that user may read; its working directory is a fresh one it owns, outside the runner's state.
    """

    uid: int
    gid: int

    @classmethod
    def parse(cls, text: str) -> ScriptUser:
        """``NAME``, ``UID``, ``NAME:GROUP`` or ``UID:GID``; the group defaults to the user's own."""
        name, _, group = text.partition(":")
        try:
            entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
            uid, default_gid = entry.pw_uid, entry.pw_gid
        except KeyError:
            if not name.isdigit():
                raise ValueError(f"no user {name!r} on this host") from None
            uid = default_gid = int(name)  # a bare uid need not have a passwd entry (as in images)
        if not group:
            gid = default_gid
        elif group.isdigit():
            gid = int(group)
        else:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                raise ValueError(f"no group {group!r} on this host") from None
        if uid == 0 or gid == 0:
            raise ValueError("scripts must not run as root (uid or gid 0)")
        return cls(uid, gid)

    def __str__(self) -> str:
        return f"{self.uid}:{self.gid}"


class LocalProcess:
    """Runs scripts as child processes of the runner, each in its own session and process group.

    The environment is built from nothing (PATH, LANG, HOME = the step's working directory, the
    step's variables), never inherited: whatever the runner's own environment holds stays there.
    A timeout or an abort sends SIGTERM to the whole group, then SIGKILL after `kill_grace`.
    When a step ends, however it ends, nothing it started outlives it: its process group is
    killed, and so is every process that still carries the step's marker in its environment
    (a daemon that called setsid() left the group, not the environment it inherited).

    With a `user`, scripts run as that user (see `ScriptUser`), each attempt in a fresh working
    directory of its own under a private root (mode 0711: enterable, not listable), removed when
    the attempt ends.
    """

    def __init__(self, kill_grace: float = 3.0, path: str | None = None, user: ScriptUser | None = None) -> None:
        self.kill_grace = kill_grace
        self.path = path or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        self.user = user
        self._homes: Path | None = None

    def execute(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str], on_line: LineSink
    ) -> int:
        ctx.check()
        workdir = self._workdir(ctx)
        full_env = {"PATH": self.path, "LANG": "C.UTF-8", "HOME": str(workdir), "STEAD_MARKER": ctx.marker}
        full_env.update(env)
        read_fd, write_fd = os.pipe()
        as_user: dict[str, Any] = {}
        if self.user is not None:
            os.fchown(read_fd, self.user.uid, self.user.gid)  # the script opens it by /dev/fd: it must be its own
            as_user = {"user": self.user.uid, "group": self.user.gid, "extra_groups": []}
        try:
            proc = subprocess.Popen(
                [*INTERPRETERS[interpreter], f"/dev/fd/{read_fd}"],
                cwd=workdir, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(read_fd,), start_new_session=True, close_fds=True, **as_user,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            self._drop(workdir)
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
            self._drop(workdir)

    def _workdir(self, ctx: StepContext) -> Path:
        if self.user is None:
            ctx.workdir.mkdir(parents=True, exist_ok=True)
            return ctx.workdir
        if self._homes is None:
            self._homes = Path(tempfile.mkdtemp(prefix="stead-scripts-"))
            self._homes.chmod(0o711)
        workdir = Path(tempfile.mkdtemp(prefix="step-", dir=self._homes))
        os.chown(workdir, self.user.uid, self.user.gid)
        return workdir

    def _drop(self, workdir: Path) -> None:
        if self.user is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def close(self) -> None:
        """Remove the private root of the scripts' working directories (with a `user`)."""
        if self._homes is not None:
            shutil.rmtree(self._homes, ignore_errors=True)
            self._homes = None

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

    The pod passes the Pod Security "restricted" profile: a non-root user, group and fsGroup
    (`run_as_user`, 65532 by default), the RuntimeDefault seccomp profile, no privilege escalation,
    every capability dropped, a read-only root filesystem with size-limited emptyDirs at /work (the
    working directory and ``HOME``) and /tmp, and requests and limits of cpu, memory and ephemeral
    storage (`requests`, `limits`; a namespace's ResourceQuota may demand them). No service-account
    token is mounted (`automount_token`): the runner talks to the API server, the script does not.

    A Job whose pods cannot be created (refused by Pod Security admission, a ResourceQuota, a
    missing service account...) never fails by itself: the Job controller records FailedCreate
    Events on it and retries forever. So once the Job has had no pod for `failed_create_grace`
    seconds, its FailedCreate Events fail the step with Kubernetes' message and the Job is deleted;
    when the runner may not read Events (they need ``list`` on ``events``), the step fails after
    `no_pod_timeout` seconds without a pod, saying so. The pod's log is read with ``limitBytes``
    (`log_limit_bytes`); a log that was cut is said to be on stderr.
    """

    DEFAULT_REQUESTS: Mapping[str, str] = {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"}
    DEFAULT_LIMITS: Mapping[str, str] = {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"}

    def __init__(
        self, api: KubeApi, namespace: str, service_account: str = "default",
        image: str = "python:3.11-slim", poll_interval: float = 1.0, ttl_seconds: int = 3600, *,
        run_as_user: int = 65532, requests: Mapping[str, str] | None = None,
        limits: Mapping[str, str] | None = None, work_size_limit: str = "1Gi", tmp_size_limit: str = "256Mi",
        automount_token: bool = False, failed_create_grace: float = 20.0, no_pod_timeout: float = 60.0,
        log_limit_bytes: int = 1024 * 1024,
    ) -> None:
        if run_as_user <= 0:
            raise ValueError("run_as_user must be a non-root id (> 0): the restricted profile refuses root")
        if log_limit_bytes <= 0:
            raise ValueError("log_limit_bytes must be positive")
        self.api = api
        self.namespace = namespace
        self.service_account = service_account
        self.image = image
        self.poll_interval = poll_interval
        self.ttl_seconds = ttl_seconds
        self.run_as_user = run_as_user
        self.requests = dict(self.DEFAULT_REQUESTS if requests is None else requests)
        self.limits = dict(self.DEFAULT_LIMITS if limits is None else limits)
        self.work_size_limit = work_size_limit
        self.tmp_size_limit = tmp_size_limit
        self.automount_token = automount_token
        self.failed_create_grace = failed_create_grace
        self.no_pod_timeout = max(no_pod_timeout, failed_create_grace)
        self.log_limit_bytes = log_limit_bytes

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
                        "automountServiceAccountToken": self.automount_token,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": self.run_as_user,
                            "runAsGroup": self.run_as_user,
                            "fsGroup": self.run_as_user,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [{
                            "name": "step",
                            "image": self.image,
                            "command": [command, "/stead/script"],
                            "workingDir": "/work",
                            "env": [
                                *([] if "HOME" in env else [{"name": "HOME", "value": "/work"}]),
                                *({"name": k, "valueFrom": {"secretKeyRef": {"name": name, "key": f"env-{k}"}}}
                                  for k in env),
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                            },
                            "resources": {"requests": dict(self.requests), "limits": dict(self.limits)},
                            "volumeMounts": [
                                {"name": "script", "mountPath": "/stead", "readOnly": True},
                                {"name": "work", "mountPath": "/work"},
                                {"name": "tmp", "mountPath": "/tmp"},
                            ],
                        }],
                        "volumes": [
                            {"name": "script", "secret": {"secretName": name, "defaultMode": 0o555,
                                                          "items": [{"key": "script", "path": "script"}]}},
                            {"name": "work", "emptyDir": {"sizeLimit": self.work_size_limit}},
                            {"name": "tmp", "emptyDir": {"sizeLimit": self.tmp_size_limit}},
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
        no_pod_since: float | None = None
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
            if _job_has_pods(current):
                no_pod_since = None
            else:
                now = time.monotonic()
                no_pod_since = now if no_pod_since is None else no_pod_since
                if now - no_pod_since >= self.failed_create_grace:
                    self._fail_if_pods_cannot_be_created(current, now - no_pod_since)
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
            pod_name = pod["metadata"]["name"]
            # one byte more than kept: a log longer than the limit is then known to have been cut
            text = self.api.logs(self.namespace, pod_name, limit_bytes=self.log_limit_bytes + 1)
            raw = text.encode("utf-8", errors="replace")
            cut = len(raw) > self.log_limit_bytes
            if cut:
                text = raw[: self.log_limit_bytes].decode("utf-8", errors="ignore")
            for line in text.splitlines():
                on_line(ctx.output(line, "stdout"), "stdout")
            if cut:
                ctx.output(f"the log of pod {pod_name} was cut: only its first {self.log_limit_bytes} bytes "
                           "were read", "stderr")
        return code

    def _fail_if_pods_cannot_be_created(self, job: Mapping[str, Any], waited: float) -> None:
        """Raise `StepFailed` (deleting the Job) when the Job's FailedCreate Events say why it has no
        pod, or when it has had none for `no_pod_timeout` seconds and its Events cannot be read."""

        meta = job.get("metadata") or {}
        name, uid = str(meta.get("name", "")), meta.get("uid")
        try:
            events = self.api.events(self.namespace, "Job", name)
        except KubeApiError as error:
            if waited < self.no_pod_timeout:
                return
            reason = (f"Job {name}: no pod was created in {waited:.0f}s and the runner cannot read the Job's "
                      f"events to tell why ({_clip(str(error), 300)}; it needs get and list on events)")
        else:
            refused = [e for e in events if e.get("reason") == "FailedCreate"
                       and (e.get("involvedObject") or {}).get("uid") in (None, "", uid)]
            if not refused:
                return
            message = str(max(refused, key=_event_time).get("message") or "").removeprefix("Error creating: ")
            reason = f"Job {name}: pods cannot be created: FailedCreate: {_clip(message, 1000)}"
        try:
            self.api.delete("batch/v1", "Job", self.namespace, name)
        except KubeApiError as error:
            raise StepFailed(f"{reason} (deleting the Job failed: {_clip(str(error), 300)})") from None
        raise StepFailed(f"{reason} (Job deleted)")


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


def _job_has_pods(job: Mapping[str, Any]) -> bool:
    """Whether the Job controller reports any pod of the Job (running, pending, ended or ending)."""
    status = job.get("status") or {}
    if any(status.get(key) for key in ("active", "ready", "succeeded", "failed", "terminating")):
        return True
    uncounted = status.get("uncountedTerminatedPods") or {}
    return bool(uncounted.get("succeeded") or uncounted.get("failed"))


def _event_time(event: Mapping[str, Any]) -> str:
    series = event.get("series") or {}
    return str(series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
               or event.get("firstTimestamp") or (event.get("metadata") or {}).get("creationTimestamp") or "")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
