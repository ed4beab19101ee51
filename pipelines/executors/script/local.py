"""`LocalProcess`: scripts as child processes of the runner (optionally as another user), and
ending everything a step started."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.executors.base import (
    StepAborted,
    StepContext,
    StepFailed,
)
from pipelines.executors.script.cgroup import StepCgroup
from pipelines.executors.script.steps import INTERPRETERS, LineSink

_MAX_LINE = 64 * 1024


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
    killed, and so is everything in the step's own cgroup (`StepCgroup`: a process can leave its
    group with setsid() and drop any environment variable, not its cgroup). Where cgroups cannot
    be used (a runner that is not root, no cgroup v1 freezer) the fallback is every process that
    still carries the step's marker in its environment, which a script that means to escape can
    drop (``setsid env -u STEAD_MARKER ...``).

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
        group = StepCgroup.create(ctx.marker) if ctx.marker else None
        try:
            proc = subprocess.Popen(
                [*INTERPRETERS[interpreter], f"/dev/fd/{read_fd}"],
                cwd=workdir, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, pass_fds=(read_fd,), start_new_session=True, close_fds=True, umask=0o022,
                **as_user,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            self._drop(workdir)
            if group is not None:
                group.kill()
            raise StepFailed(f"cannot start {interpreter}: {exc}") from exc
        os.close(read_fd)
        if group is not None:
            try:  # before the script is fed: the interpreter waits for it, so nothing has forked yet
                group.add(proc.pid)
            except OSError:
                group.kill()
                group = None
        ctx.note_process(proc.pid)
        feeder = threading.Thread(target=_feed, args=(write_fd, script.encode()), daemon=True)
        feeder.start()
        try:
            return self._watch(ctx, proc, on_line)
        finally:
            _kill_group(proc, 0.0)  # the script's background children, even when the script itself is done
            if group is not None:
                group.kill()  # and whatever left the group and dropped the marker (setsid env -u ...)
            elif ctx.marker:
                kill_marked(ctx.marker)
            feeder.join(timeout=1.0)
            self._drop(workdir)

    def runs_as(self) -> str:
        """``uid N (name)``: `user`, or the runner's own user."""
        return describe_uid(self.user.uid if self.user is not None else os.geteuid())

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


def describe_uid(uid: int) -> str:
    """``uid 1000 (alice)``; a uid without a passwd entry (the per-namespace script uids) says so."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid} (no user of that uid on this host)"


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
    steps that were running, before running them again. The step's cgroup, when it had one, holds
    exactly its processes; otherwise the marker check makes a recycled pgid that now belongs to
    someone else safe.
    """
    if sum(cgroup.kill() for cgroup in StepCgroup.existing(marker)):
        return True
    found = any(group == pgid for _, group in _marked(marker))
    if found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return found
