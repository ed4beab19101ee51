"""The ssh step types: Fuel's deployment task types on a node, and Calm's scripts on an existing machine.

Each step opens its own connection (`connection.connect`), does its work and closes it; the
blocking `Executor.run` is one ``asyncio.run`` in the engine's worker thread, so steps on many
nodes run concurrently as the engine's workers allow and share no state.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import shlex
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import asyncssh

from pipelines.executors.base import (
    ParameterError,
    StepAborted,
    StepContext,
    StepFailed,
    StepResult,
    number,
    parameter,
)
from pipelines.executors.egress import EgressPolicy
from pipelines.executors.script.steps import SETVAR_LINE, script_env
from pipelines.executors.ssh import files
from pipelines.executors.ssh.connection import POLL, Remote, Unreachable, connect, guard, tail
from pipelines.executors.ssh.noop import NoopReport


@dataclass(frozen=True)
class SshSettings:
    """The runner's options for every ssh step (``python -m pipelines run --ssh-...``)."""

    allow: tuple[str, ...] = ()
    """Networks ssh steps may reach although not public (tests: 127.0.0.0/8); see `egress`."""
    deny: tuple[str, ...] = ()
    """Networks ssh steps never reach, allowed or not: the cluster's Service CIDRs."""
    files_root: Path | None = None
    """Where copy_files and sync may read on the runner's host; None: those steps fail."""
    connect_timeout: float = 20.0
    """Bound of the TCP connect plus the SSH handshake and authentication."""
    keepalive: float = 15.0
    """Seconds between keepalives: a node gone silent is noticed after three unanswered ones."""
    reboot_command: str = "shutdown -r now"
    """What ssh.reboot runs on the node (tests replace it: they cannot reboot the machine)."""
    reboot_poll: float = 2.0
    """Seconds between attempts to reach a rebooting node."""
    copy_limit: int = 64 * 1024 * 1024
    """The largest file copy_files sends (it is read into memory); bigger trees go by sync."""


_MODE = re.compile(r"^[0-7]{3,4}$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$")
_INTERPRETERS = {"sh": ["/bin/sh"], "bash": ["bash"], "python": ["python3"], "python3": ["python3"]}

# $1 destination, $2 mode, $3 owner, $4 group; the content on stdin. Written to a temporary file
# beside the destination and renamed over it: a reader never sees half a file.
_UPLOAD = (
    'set -e; dst=$1; mode=$2; owner=$3; group=$4; dir=$(dirname -- "$dst"); mkdir -p -- "$dir"; '
    'tmp=$(mktemp "$dir/.stead-upload.XXXXXX"); trap \'rm -f -- "$tmp"\' EXIT; cat > "$tmp"; '
    'if [ -n "$owner$group" ]; then chown -- "$owner${group:+:$group}" "$tmp"; fi; '
    'chmod -- "$mode" "$tmp"; mv -f -- "$tmp" "$dst"; trap - EXIT'
)


P = TypeVar("P")


@dataclass(frozen=True)
class _Script:
    argv: list[str]
    script: bytes
    cwd: str
    variables: set[str]


@dataclass(frozen=True)
class _Sync:
    raw_src: str
    src: str | None
    """The resolved runner path; None for an rsync:// source (the node pulls it)."""
    dst: str
    timeout: float
    rsync: str = ""
    ssh: str = ""


def flag(ctx: StepContext, name: str, default: bool) -> bool:
    """A boolean that may arrive as text after macro rendering ("true", "false", "1", "0"...)."""
    value = ctx.parameters.get(name, default)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off", ""):
        return False
    raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: parameter {name!r} must be true or false")


def _mode(ctx: StepContext, value: Any) -> str:
    """An octal mode: text ("0644", "644") as chmod reads it; a number is the mode's value (a YAML
    0644 is already 420)."""
    if isinstance(value, bool):
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: mode must be octal text such as '0644'")
    if isinstance(value, int):
        if not 0 <= value <= 0o7777:
            raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: mode {value} is not a file mode")
        return f"{value:04o}"
    text = str(value).strip()
    if not _MODE.match(text):
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: mode {text!r} must be octal such as '0644'")
    return text


def _permissions(ctx: StepContext, value: Any) -> tuple[str, str, str]:
    """(mode, owner, group) from ``{owner, group, mode}`` or a bare mode; 0644 and the login's user."""
    if value is None or value == "":
        return "0644", "", ""
    if not isinstance(value, dict):
        return _mode(ctx, value), "", ""
    owner, group = str(value.get("owner") or ""), str(value.get("group") or "")
    for label, name in (("owner", owner), ("group", group)):
        if name and not _NAME.match(name):
            raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: {label} {name!r} is not a user or group name")
    return _mode(ctx, value.get("mode", "0644")), owner, group


def _remote_path(ctx: StepContext, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: {name} must be a path on the node")
    if "\n" in value or "\0" in value:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: {name} {value!r} is not a path")
    return value


class SshStep(Generic[P]):
    """Checks the parameters (`prepare`, before any connection: a wrong step fails without touching
    the network), connects to the step's target, runs `main` with what `prepare` made, closes."""

    def __init__(self, settings: SshSettings | None = None) -> None:
        self.settings = settings or SshSettings()
        self.policy = EgressPolicy(self.settings.allow, deny=self.settings.deny)

    def run(self, ctx: StepContext) -> StepResult:
        return asyncio.run(self._run(ctx))

    async def _connect(self, ctx: StepContext) -> Remote:
        return await connect(ctx, self.policy, self.settings.connect_timeout, self.settings.keepalive)

    async def _run(self, ctx: StepContext) -> StepResult:
        plan = self.prepare(ctx)
        ctx.check()
        remote = await self._connect(ctx)
        try:
            return await self.main(ctx, remote, plan)
        finally:
            await remote.close()

    def prepare(self, ctx: StepContext) -> P:
        raise NotImplementedError

    async def main(self, ctx: StepContext, remote: Remote, plan: P) -> StepResult:
        raise NotImplementedError

    async def _upload(self, ctx: StepContext, remote: Remote, path: str, data: bytes,
                      permissions: tuple[str, str, str]) -> None:
        mode, owner, group = permissions
        outcome = await remote.run(ctx, ["/bin/sh", "-c", _UPLOAD, "stead-upload", path, mode, owner, group],
                                   stdin=data, what=f"writing {path}")
        if outcome.exit_code != 0:
            raise outcome.failure(f"writing {path}", remote.target.address)


class ShellStep(SshStep[tuple[str, str, float]]):
    """``ssh.shell`` {cmd, cwd?, timeout?, interval?}: Fuel's shell task, run by /bin/sh on the node.

    ``timeout`` (seconds, 0 or absent: the step's own timeout only) stops the command's process
    group. Retries and their ``interval`` are the engine's (the step's retries), not repeated here.
    """

    def prepare(self, ctx: StepContext) -> tuple[str, str, float]:
        return parameter(ctx, "cmd", str), parameter(ctx, "cwd", str, "/"), number(ctx, "timeout", 0)

    async def main(self, ctx: StepContext, remote: Remote, plan: tuple[str, str, float]) -> StepResult:
        cmd, cwd, timeout = plan
        outcome = await remote.run(ctx, ["/bin/sh"], script=cmd.encode(), cwd=cwd, time_limit=timeout, what="cmd")
        if outcome.exit_code != 0:
            raise outcome.failure("cmd", remote.target.address)
        return StepResult(exit_code=0, message=f"ran on {remote.target.address}")


class ExecStep(SshStep[_Script]):
    """``ssh.exec`` (also ``ssh``) {script, shell?, cwd?, env?}: a Calm task on an ``Existing`` machine.

    As the local ``exec`` type, but on the target: ``shell`` is sh (default), bash or python; the
    script, preceded by exports of the step's variables (``exportVariables``, ``env``, ``STEAD_*``),
    travels on stdin, so rendered secrets never sit on the node's command lines.
    """

    def prepare(self, ctx: StepContext) -> _Script:
        script = parameter(ctx, "script", str)
        shell = parameter(ctx, "shell", str, "") or parameter(ctx, "interpreter", str, "sh")
        argv = _INTERPRETERS.get(shell)
        if argv is None:
            raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: shell must be one of "
                                 f"{', '.join(_INTERPRETERS)}")
        env = script_env(ctx)
        env = {k: v for k, v in env.items() if not k.startswith("ssh_")}
        if argv[0] == "python3":
            prologue = "import os as _stead_os\n" + "".join(
                f"_stead_os.environ[{k!r}] = {v!r}\n" for k, v in env.items()) + "del _stead_os\n"
        else:
            prologue = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        return _Script(argv, (prologue + script).encode(), parameter(ctx, "cwd", str, ""),
                       {str(name) for name in parameter(ctx, "variables", list, [])})

    async def main(self, ctx: StepContext, remote: Remote, plan: _Script) -> StepResult:
        await self._script(ctx, remote, plan, None)
        return StepResult(exit_code=0)

    async def _script(self, ctx: StepContext, remote: Remote, plan: _Script,
                      on_line: Callable[[str, str], None] | None) -> None:
        outcome = await remote.run(ctx, plan.argv, script=plan.script, cwd=plan.cwd, what="script",
                                   on_line=on_line)
        if outcome.exit_code != 0:
            raise StepFailed(f"script exited with code {outcome.exit_code} (ran as {remote.target.user} on "
                             f"{remote.target.address})" + tail(outcome.last),
                             exit_code=outcome.exit_code, details={"lastLines": outcome.last})


class SetVarStep(ExecStep):
    """``ssh.setvar`` {script, shell?, variables}: as the local ``setvar``, on the target: stdout lines
    ``name=value`` set the variables the step names (Calm's set-variable tasks on ``Existing`` machines)."""

    def prepare(self, ctx: StepContext) -> _Script:
        parameter(ctx, "variables", list)
        return super().prepare(ctx)

    async def main(self, ctx: StepContext, remote: Remote, plan: _Script) -> StepResult:
        wanted = plan.variables
        found: dict[str, str] = {}

        def collect(line: str, stream: str) -> None:
            match = SETVAR_LINE.match(line) if stream == "stdout" else None
            if match and match.group(1) in wanted:
                found[match.group(1)] = match.group(2).strip()

        await self._script(ctx, remote, plan, collect)
        missing = sorted(wanted - set(found))
        if missing:
            raise StepFailed(f"the script did not set {', '.join(missing)}", exit_code=0)
        return StepResult(exit_code=0, variables=found, message=f"set {', '.join(sorted(found))}")


class PuppetStep(SshStep[tuple[str, str, float, bool]]):
    """``ssh.puppet`` {puppet_manifest, puppet_modules, timeout, noop?}: ``puppet apply`` on the node.

    As Fuel's astute ran it: ``--modulepath``, ``--detailed-exitcodes`` (0: nothing changed, 2:
    changes, both success; 4 and 6: failures), logs on the console so they stream into the step's
    output; ``noop`` adds ``--noop``. A node without puppet fails at once, saying so.
    """

    def prepare(self, ctx: StepContext) -> tuple[str, str, float, bool]:
        return (_remote_path(ctx, "puppet_manifest", ctx.parameters.get("puppet_manifest")),
                _remote_path(ctx, "puppet_modules", ctx.parameters.get("puppet_modules")),
                number(ctx, "timeout", 0), flag(ctx, "noop", False))

    async def main(self, ctx: StepContext, remote: Remote, plan: tuple[str, str, float, bool]) -> StepResult:
        manifest, modules, timeout, noop = plan
        code, found = await remote.capture(ctx, "command -v puppet")
        puppet = found.strip().splitlines()[0] if found.strip() else ""
        if code != 0 or not puppet:
            raise StepFailed(f"node {remote.target.address} has no puppet (`command -v puppet` found nothing on "
                             "its PATH): puppet tasks need puppet installed on the node")
        argv = [puppet, "apply", f"--modulepath={modules}", "--detailed-exitcodes", "--logdest", "console",
                "--trace", "--no-report"]
        if noop:
            argv.append("--noop")
        argv.append(manifest)
        report = NoopReport() if noop else None
        outcome = await remote.run(ctx, argv, cwd="/", time_limit=timeout, what="puppet apply",
                                   on_line=report.feed if report is not None else None)
        if outcome.exit_code not in (0, 2):
            raise StepFailed(f"puppet apply {manifest} on {remote.target.address} reported failures "
                             f"(exit code {outcome.exit_code})" + tail(outcome.last),
                             exit_code=outcome.exit_code, details={"lastLines": outcome.last})
        if report is not None:  # what would change, per resource (docs/graphs.md, "Noop runs")
            return StepResult(exit_code=0, message=f"puppet apply --noop {manifest}: {report.summary()}",
                              details={"noop": report.details()})
        changed = "changes applied" if outcome.exit_code == 2 else "no changes"
        return StepResult(exit_code=0, message=f"puppet apply {manifest}: {changed}")


class UploadFileStep(SshStep[tuple[str, bytes, tuple[str, str, str]]]):
    """``ssh.upload_file`` {path, data, permissions?}: write `data` to `path` on the node (atomically).

    ``permissions`` is a mode ("0644", the default) or ``{owner, group, mode}`` as in copy_files.
    """

    def prepare(self, ctx: StepContext) -> tuple[str, bytes, tuple[str, str, str]]:
        path = _remote_path(ctx, "path", ctx.parameters.get("path"))
        data = ctx.parameters.get("data", "")
        if not isinstance(data, str):
            raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: data must be text")
        return path, data.encode(), _permissions(ctx, ctx.parameters.get("permissions"))

    async def main(self, ctx: StepContext, remote: Remote, plan: tuple[str, bytes, tuple[str, str, str]]) -> StepResult:
        path, raw, permissions = plan
        await self._upload(ctx, remote, path, raw, permissions)
        return StepResult(exit_code=0, message=f"wrote {len(raw)} bytes to {path}")


class CopyFilesStep(SshStep[tuple[list[tuple[Path, str, str]], tuple[str, str, str]]]):
    """``ssh.copy_files`` {files: [{src, dst}], permissions: {owner, group, mode}}: runner files to the node.

    Sources are files under the runner's files root (`files.source`), read there and written on the
    node as upload_file does, each with the step's permissions.
    """

    def prepare(self, ctx: StepContext) -> tuple[list[tuple[Path, str, str]], tuple[str, str, str]]:
        entries = parameter(ctx, "files", list)
        permissions = _permissions(ctx, ctx.parameters.get("permissions"))
        plan: list[tuple[Path, str, str]] = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("src"), str):
                raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: files[{index}] must be {{src, dst}}")
            src = files.source(ctx, self.settings.files_root, entry["src"], directory_ok=False)
            plan.append((src, entry["src"], _remote_path(ctx, f"files[{index}].dst", entry.get("dst"))))
        return plan, permissions

    async def main(self, ctx: StepContext, remote: Remote,
                   prepared: tuple[list[tuple[Path, str, str]], tuple[str, str, str]]) -> StepResult:
        plan, permissions = prepared
        for src, shown, dst in plan:
            ctx.check()
            data = files.read(src, self.settings.copy_limit)
            ctx.output(f"{shown} -> {dst} ({len(data)} bytes)", "stdout")
            await self._upload(ctx, remote, dst, data, permissions)
        return StepResult(exit_code=0, message=f"copied {len(plan)} file(s) to {remote.target.address}")


class SyncStep(SshStep[_Sync]):
    """``ssh.sync`` {src, dst, timeout?}: rsync a runner directory (under the files root) to the node.

    rsync runs on the runner with OpenSSH's client as its transport, to the very IP address this
    step's connection reached (judged by the egress policy) and checking the very host key it
    verified (a one-line known_hosts under a ``HostKeyAlias``), with the step's key in a 0600 file
    of the step's working directory, removed when the step ends. As Fuel's ``rsync -c -r
    --delete``, plus links, permissions and times. An ``rsync://`` source is pulled by the node
    itself, as Fuel's astute did. rsync must be installed on both ends; each is checked.
    """

    def prepare(self, ctx: StepContext) -> _Sync:
        raw_src = parameter(ctx, "src", str)
        dst = _remote_path(ctx, "dst", ctx.parameters.get("dst"))
        timeout = number(ctx, "timeout", 0)
        if raw_src.startswith("rsync://"):
            return _Sync(raw_src, None, dst, timeout)
        local_rsync, local_ssh = shutil.which("rsync"), shutil.which("ssh")
        if local_rsync is None or local_ssh is None:
            missing = "rsync" if local_rsync is None else "ssh (OpenSSH's client)"
            raise StepFailed(f"the runner has no {missing}: sync needs rsync on the runner and on the node")
        src = files.source(ctx, self.settings.files_root, raw_src, directory_ok=True)
        shown_src = f"{src}/" if src.is_dir() and raw_src.endswith("/") else str(src)
        return _Sync(raw_src, shown_src, dst, timeout, local_rsync, local_ssh)

    async def main(self, ctx: StepContext, remote: Remote, plan: _Sync) -> StepResult:
        raw_src, dst, timeout = plan.raw_src, plan.dst, plan.timeout
        code, _ = await remote.capture(ctx, "command -v rsync")
        if code != 0:
            raise StepFailed(f"node {remote.target.address} has no rsync (`command -v rsync` found nothing): "
                             "sync needs rsync on the node and on the runner")
        if plan.src is None:
            outcome = await remote.run(ctx, ["rsync", "-c", "-r", "--delete", raw_src, dst], time_limit=timeout,
                                       what="rsync")
            if outcome.exit_code != 0:
                raise outcome.failure("rsync", remote.target.address)
            return StepResult(exit_code=0, message=f"{remote.target.address} pulled {raw_src}")
        return await self._push(ctx, remote, plan.rsync, plan.ssh, plan.src, raw_src, dst, timeout)

    async def _push(self, ctx: StepContext, remote: Remote, rsync: str, ssh: str, src: str, shown: str, dst: str,
                    time_limit: float) -> StepResult:
        private = Path(ctx.workdir) / "ssh"
        private.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(private, 0o700)
        key_file, hosts_file = private / "id", private / "known_hosts"
        try:
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(ctx.variables["ssh_private_key"])
                if not ctx.variables["ssh_private_key"].endswith("\n"):
                    fh.write("\n")
            algorithm, blob = remote.host_key.export_public_key("openssh").decode().split()[:2]
            hosts_file.write_text(f"stead-node {algorithm} {blob}\n")
            connect_timeout = max(int(self.settings.connect_timeout), 1)
            transport = " ".join(shlex.quote(part) for part in [
                ssh, "-F", "/dev/null", "-i", str(key_file), "-p", str(remote.target.port),
                "-l", remote.target.user, "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none",
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={hosts_file}",
                "-o", "GlobalKnownHostsFile=/dev/null", "-o", "HostKeyAlias=stead-node", "-o", "CheckHostIP=no",
                "-o", "UpdateHostKeys=no", "-o", f"ConnectTimeout={connect_timeout}",
                "-o", f"ServerAliveInterval={max(int(self.settings.keepalive), 1)}", "-o", "ServerAliveCountMax=3",
                "-o", "LogLevel=ERROR",
            ])
            host = f"[{remote.peer}]" if ":" in remote.peer else remote.peer
            argv = [rsync, "--recursive", "--links", "--perms", "--times", "--checksum", "--delete",
                    "--itemize-changes", "--protect-args", "-e", transport, src, f"{host}:{dst}"]
            ctx.output(f"rsync {shown} -> {remote.target.address}:{dst}", "stderr")
            code, last = await _local(ctx, argv, time_limit, "rsync")
        finally:
            for path in (key_file, hosts_file):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            with contextlib.suppress(OSError):
                private.rmdir()
        if code != 0:
            raise StepFailed(f"rsync to {remote.target.address} exited with code {code}" + tail(last),
                             exit_code=code, details={"lastLines": last})
        return StepResult(exit_code=0, message=f"synced {shown} to {remote.target.address}:{dst}")


async def _local(ctx: StepContext, argv: list[str], time_limit: float, what: str) -> tuple[int, list[str]]:
    """A process on the runner (rsync): its own process group, lines streamed, stopped on abort/timeout."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "STEAD_MARKER": ctx.marker}
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True, env=env, cwd="/")
    ctx.note_process(process.pid)
    last: collections.deque[str] = collections.deque(maxlen=20)

    async def pump(reader: asyncio.StreamReader | None, stream: str) -> None:
        assert reader is not None
        while True:
            raw = await reader.readline()
            if not raw:
                return
            last.append(ctx.output(raw.decode("utf-8", errors="replace").rstrip("\r\n"), stream))

    started = time.monotonic()
    deadline = ctx.deadline
    if time_limit > 0:
        deadline = started + time_limit if deadline is None else min(deadline, started + time_limit)
    pumps = asyncio.gather(pump(process.stdout, "stdout"), pump(process.stderr, "stderr"), process.wait())
    try:
        while True:
            done, _ = await asyncio.wait({pumps}, timeout=POLL)
            if done:
                break
            stop: BaseException | None = None
            if ctx.abort.is_set():
                stop = StepAborted(f"{ctx.key}: aborted")
            elif deadline is not None and time.monotonic() >= deadline:
                stop = StepFailed(f"{what} timed out after {time.monotonic() - started:.0f}s (stopped)" + tail(last))
            if stop is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                raise stop
    finally:
        pumps.cancel()
        with contextlib.suppress(BaseException):
            await pumps
    return int(process.returncode or 0), list(last)


class RebootStep(SshStep[float]):
    """``ssh.reboot`` {timeout}: reboot the node and wait until it is back, within `timeout` seconds.

    The node counts as back when a new connection works and either its boot id
    (/proc/sys/kernel/random/boot_id) changed or it was seen down in between: the connection that
    issued the reboot dropped, or a connection attempt failed. The second rule keeps the wait correct
    where the boot id cannot change (a container, the tests' sshd restarted in place) and never
    takes a node that has not gone down yet for one that came back. The reboot command is a runner
    setting (`SshSettings.reboot_command`), not a parameter: tenants do not choose what runs as root.
    """

    def prepare(self, ctx: StepContext) -> float:
        return number(ctx, "timeout", 300)

    async def main(self, ctx: StepContext, remote: Remote, plan: float) -> StepResult:
        timeout = plan
        started = time.monotonic()
        deadline = started + timeout if timeout > 0 else None
        if ctx.deadline is not None:
            deadline = ctx.deadline if deadline is None else min(deadline, ctx.deadline)
        address = remote.target.address
        _, boot = await remote.capture(ctx, "cat /proc/sys/kernel/random/boot_id")
        old_boot = boot.strip()
        ctx.output(f"rebooting {address} (boot id {old_boot or 'unknown'})", "stderr")
        dropped = asyncio.ensure_future(remote.conn.wait_closed())
        try:
            result = await guard(ctx, asyncio.wait_for(remote.conn.run(self.settings.reboot_command, check=False), 60),
                                 f"rebooting {address}")
            if result.exit_status not in (0, None):
                raise StepFailed(f"the reboot command on {address} exited with code {result.exit_status}: "
                                 f"{str(result.stderr or '').strip()[-500:]}", exit_code=result.exit_status)
        except (TimeoutError, asyncssh.Error, OSError):
            pass  # the node went down under the command: that is the point
        down = False
        while True:
            if not down and dropped.done():
                down = True
                ctx.output(f"{address}: the connection dropped, the node is going down", "stderr")
            if deadline is not None and time.monotonic() >= deadline:
                dropped.cancel()
                state = "did not come back" if down else "did not go down"
                raise StepFailed(f"{address} {state} within {time.monotonic() - started:.0f}s of the reboot")
            try:
                probe = await self._connect(ctx)
            except Unreachable:
                if not down:
                    ctx.output(f"{address}: not answering, the node is down", "stderr")
                down = True
            else:
                answered = True
                try:
                    _, boot = await probe.capture(ctx, "cat /proc/sys/kernel/random/boot_id")
                except (TimeoutError, StepFailed, asyncssh.Error, OSError):
                    boot, answered, down = "", False, True
                finally:
                    await probe.close()
                new_boot = boot.strip()
                if answered and ((new_boot and new_boot != old_boot) or down):
                    dropped.cancel()
                    how = "new boot id" if new_boot != old_boot else "the boot id did not change"
                    ctx.output(f"{address} is back ({how})", "stderr")
                    return StepResult(exit_code=0, message=f"{address} rebooted and is back after "
                                                           f"{time.monotonic() - started:.0f}s ({how})")
            with contextlib.suppress(StepFailed):  # the step's deadline: judged at the top of the loop
                await guard(ctx, asyncio.sleep(self.settings.reboot_poll), f"waiting for {address}")
