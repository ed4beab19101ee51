"""One SSH connection to a step's target, and remote commands on it that stream, time out and stop.

Connecting (`connect`) takes the target's inputs from the step's variables (``ssh_address``,
``ssh_port``, ``ssh_user``, ``ssh_known_hosts``, the secret ``ssh_private_key``), makes the TCP
connection itself, judges the socket's actual peer with the `EgressPolicy` before a byte of SSH is
sent, then runs the handshake over that socket with asyncssh: the host key must be in the given
known_hosts text (never accepted on first use), the key is the only credential tried (no agent, no
~/.ssh, no ~/.ssh/config). Every failure is a `StepFailed` that names the node and says what went
wrong, never the key.

Commands (`Remote.run`) go through a pty-less session wrapped so that its first stdout line is the
process group of the remote shell: sshd makes each session its own session (``setsid``), so that
shell and everything it starts share one process group. When the step is aborted or times out the
group is killed from a second channel of the same connection (TERM, then KILL after a grace
period): closing a pty-less channel alone leaves a sleeping command running on the node.

A command also runs under its attempt's lock on the node (`attempt_lock`), so that a retry finds an
earlier attempt that its runner left behind and stops it before starting: see `Remote.run`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import re
import shlex
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncssh

from pipelines.executors.base import ParameterError, StepAborted, StepContext, StepFailed
from pipelines.executors.egress import SSH_ALLOW_HINT, EgressPolicy

T = TypeVar("T")

POLL = 0.1
"""How often abort and deadlines are looked at while waiting (base.py: a few tenths of a second)."""
KILL_GRACE = 3.0
"""Seconds between TERM and KILL to a remote process group."""
LAST_LINES = 20
STOP_WAIT = 10.0
"""Seconds a retry waits, after KILL, for an earlier attempt's lock before failing (a process stuck in
the kernel, e.g. on a dead NFS mount, outlives KILL until its system call ends)."""
BUSY_EXIT = 125
"""The guard's exit status when the earlier attempt did not stop (`stead-busy`)."""
_MAX_LINE = 64 * 1024
_PGID = re.compile(r"^stead-pgid (\d+)$")
_GUARD_LINE = re.compile(r"^stead-(stopping|busy) (\d+)$")
_GUARD_GO = "stead-go"
_LOCK_CHARS = re.compile(r"[^A-Za-z0-9_.@-]")

# Every wrapper starts with the guard. $1: the attempt's lock (`attempt_lock`: RUN/NAME.lock).
# `printf` first tells the runner the process group (the shell's pid: sshd's setsid). Then, where the
# node has flock(1) and the user a private directory under $TMPDIR (/tmp: gone with a reboot, as are
# the processes it guards), the shell opens the lock on fd 9, takes it and writes its process group
# into it. If an earlier attempt holds it, that attempt's group is stopped as an abort stops one:
# TERM, up to KILL_GRACE seconds for the lock to be free and the group empty (a command's own children
# may still be ending after the shell holding the lock has gone), KILL, up to STOP_WAIT more seconds,
# else `stead-busy` and exit BUSY_EXIT: never a second copy. `stead-go` ends the guard's lines. The
# command runs as a child with fd 9 closed (what it leaves running, a daemon, never holds the lock),
# and a TERM ends the shell only once the command has ended. A node without flock or the directory
# runs the command unguarded, saying so on stderr. Only /bin/sh, flock, id, cat, kill, sleep and /proc.
def guard_script(grace: float = KILL_GRACE, wait: float = STOP_WAIT) -> str:
    """The guard (above) with its two waits in seconds (tests shorten them)."""
    return (
        'printf "stead-pgid %s\\n" "$$"; trap \'exit 143\' TERM HUP INT; '
        'if ! command -v flock >/dev/null 2>&1; then '
        'echo "stead: no flock(1) on this node: a retry of this task cannot find this attempt" >&2; '
        'else d=${TMPDIR:-/tmp}/stead-$(id -u); mkdir -m 700 -- "$d" 2>/dev/null; '
        'if [ -d "$d" ] && [ ! -h "$d" ] && [ -O "$d" ] && mkdir -p -- "$d/${1%/*}"; then '
        'l=$d/$1; exec 9>>"$l"; '
        # stead_pg: the group the lock file names, when it names one. stead_live: that group has a process
        # that is not a zombie (sshd reaps its session's shell a second or more after the connection
        # dropped: `kill -0` alone counts the zombie). stead_gone N: wait up to N tenths of a second for
        # the lock to be ours and the group to be empty.
        'stead_pg() { q=$(cat -- "$l"); case $q in ""|*[!0-9]*) ;; *) p=$q;; esac; }; '
        'stead_live() { kill -0 -"$p" 2>/dev/null || return 1; [ -r /proc/self/stat ] || return 0; '
        'for s in /proc/[0-9]*/stat; do { read -r x < "$s"; } 2>/dev/null || continue; set -- ${x##*)}; '
        'if [ "$1" != Z ] && [ "$3" = "$p" ]; then return 0; fi; done; return 1; }; '
        'stead_gone() { i=0; while [ $i -lt $1 ]; do if flock -n 9 && { [ "$p" -le 1 ] || ! stead_live; }; '
        'then return 0; fi; sleep 0.1; i=$((i+1)); done; return 1; }; '
        'if ! flock -n 9; then p=0; stead_pg; printf "stead-stopping %s\\n" "$p"; '
        'if [ "$p" -gt 1 ]; then kill -TERM -"$p" 2>/dev/null; fi; '
        'if ! stead_gone @GRACE@; then stead_pg; if [ "$p" -gt 1 ]; then kill -KILL -"$p" 2>/dev/null; fi; '
        'stead_gone @WAIT@ || { printf "stead-busy %s\\n" "$p"; exit @BUSY@; }; fi; fi; '
        'printf "%s\\n" "$$" > "$l"; '
        'else echo "stead: $d is not a private directory of this user: a retry of this task cannot find this '
        'attempt" >&2; fi; fi; '
        'printf "@GO@\\n"; shift; '
    ).replace("@GRACE@", str(max(int(grace * 10), 1))).replace("@WAIT@", str(max(int(wait * 10), 1))).replace(
        "@BUSY@", str(BUSY_EXIT)).replace("@GO@", _GUARD_GO)


_GUARD = guard_script()
# After the guard: $1: working directory ('' for the login directory), $2: the program, $3...: its
# arguments.
_WRAPPER = _GUARD + 'if [ -n "$1" ]; then cd -- "$1" || exit 1; fi; shift; "$@" 9>&-'
# The same for a script sent on stdin: kept in a private temporary file (not on a command line that
# `ps` shows to the node's other users), run as `"$@" FILE` with stdin from /dev/null (a command
# reading stdin cannot eat the rest of the script), removed when it ends or is stopped with TERM.
_SCRIPT_WRAPPER = _GUARD + (
    'f=$(mktemp) || exit 1; trap \'rm -f -- "$f"\' EXIT; cat > "$f" || exit 1; '
    'if [ -n "$1" ]; then cd -- "$1" || exit 1; fi; shift; "$@" "$f" </dev/null 9>&-'
)


def stop_script(pgid: int, grace: float = KILL_GRACE) -> str:
    """What ends a remote process group (run in a second channel, by the user's login shell): TERM,
    up to `grace` seconds for it to go, then KILL. `kill -SIG -PGID`, never `kill -SIG -- -PGID`:
    dash (Debian's sh, which may be a login shell) takes no `--` there ("Illegal number: -"), and
    the group would be left running."""
    return (f"kill -TERM -{pgid} 2>/dev/null || exit 0; i=0; "
            f"while [ $i -lt {max(int(grace * 10), 1)} ]; do kill -0 -{pgid} 2>/dev/null || exit 0; "
            f"sleep 0.1; i=$((i+1)); done; kill -KILL -{pgid} 2>/dev/null; exit 0")


def attempt_lock(run_uid: str, key: str) -> str:
    """The node-side lock of a task's attempts in a run, relative to the user's lock directory:
    ``RUN/TASK@NODE.HASH.lock``, one per (run, task, node) whatever the attempt, so that a retry finds
    the attempt before it. Readable for whoever looks on the node; characters a path or a shell could
    take otherwise become ``_`` (a leading dot too: never ``.`` or ``..``), and the hash of the exact
    pair keeps two keys that read the same apart."""
    def safe(text: str) -> str:
        cleaned = _LOCK_CHARS.sub("_", text)[:100]
        return "_" + cleaned[1:] if cleaned.startswith(".") else cleaned
    digest = hashlib.sha256(f"{run_uid}/{key}".encode()).hexdigest()[:12]
    return f"{safe(run_uid) or '_'}/{safe(key) or '_'}.{digest}.lock"


class Unreachable(StepFailed):
    """The node did not answer (refused, timed out, dropped during the handshake): maybe it is down."""


@dataclass(frozen=True)
class Target:
    """Where and as whom: what `connect` read from the step's variables (no secret in here)."""

    address: str
    port: int
    user: str

    def __str__(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


def target_of(ctx: StepContext) -> Target:
    variables = ctx.variables
    address = variables.get("ssh_address", "").strip()
    if not address:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: target {ctx.target or '-'!r} has no "
                             "ssh_address (the node's address)")
    raw_port = variables.get("ssh_port", "").strip() or "22"
    try:
        port = int(raw_port)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: ssh_port {raw_port!r} is not a TCP port")
    user = variables.get("ssh_user", "").strip() or "root"
    return Target(address, port, user)


def _private_key(ctx: StepContext) -> asyncssh.SSHKey:
    try:
        text = ctx.variables["ssh_private_key"]  # a secret: revealing it also masks it everywhere
    except KeyError:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: no ssh_private_key for target "
                             f"{ctx.target or '-'!r}") from None
    try:
        return asyncssh.import_private_key(text)
    except (asyncssh.KeyImportError, ValueError, TypeError) as exc:
        reason = ctx.mask(str(exc))
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: ssh_private_key is not a private key this "
                             f"runner can read (OpenSSH, PEM or PKCS#8, unencrypted): {reason}") from None


def _known_hosts(ctx: StepContext) -> asyncssh.SSHKnownHosts:
    text = ctx.variables.get("ssh_known_hosts", "")
    try:
        return asyncssh.import_known_hosts(text)
    except (ValueError, asyncssh.KeyImportError) as exc:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: ssh_known_hosts is not OpenSSH "
                             f"known_hosts text: {exc}") from None


class _Client(asyncssh.SSHClient):
    """Remembers the host key that known_hosts did not vouch for, to name its fingerprint."""

    def __init__(self) -> None:
        self.unknown: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.unknown = key
        return False


class _Group:
    """The remote command's process group, once its wrapper has told it, and what its guard said."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.known = asyncio.Event()
        self.started = False
        """The guard's lines are over (`stead-go`): every stdout line from now on is the command's."""
        self.busy: int | None = None
        """The process group of an earlier attempt that did not stop (`stead-busy`)."""


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    last: list[str]

    def failure(self, what: str, address: str) -> StepFailed:
        return StepFailed(f"{what} on {address} exited with code {self.exit_code}" + tail(self.last),
                          exit_code=self.exit_code, details={"lastLines": self.last})


@dataclass
class Remote:
    """An open connection to one node."""

    conn: asyncssh.SSHClientConnection
    target: Target
    peer: str
    """The IP address the TCP connection actually reached (judged by the egress policy)."""
    host_key: asyncssh.SSHKey

    async def close(self) -> None:
        self.conn.close()
        with contextlib.suppress(Exception):
            await self.conn.wait_closed()

    async def capture(self, ctx: StepContext, command: str, seconds: float = 30.0) -> tuple[int | None, str]:
        """A short helper command (``command -v puppet``...): its exit status and stdout, not shown."""
        try:
            result = await guard(ctx, asyncio.wait_for(self.conn.run(command, check=False), seconds),
                                 f"{self.target}: {command.split()[0]}")
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            reason = exc.reason if isinstance(exc, asyncssh.Error) else str(exc) or "timed out"
            raise StepFailed(f"{self.target}: `{command}` failed: {reason}") from None
        out = result.stdout if isinstance(result.stdout, str) else ""
        return result.exit_status, out

    async def run(
        self, ctx: StepContext, argv: list[str], *, cwd: str = "", stdin: bytes | None = None,
        script: bytes | None = None, time_limit: float | None = None, what: str = "command",
        on_line: Callable[[str, str], None] | None = None,
    ) -> Outcome:
        """Run `argv` on the node (no shell unless argv is one), stream its lines to ``ctx.output``.

        With `script`, the script is sent on stdin and run as ``argv + [its temporary file]``;
        otherwise `stdin` (if any) is the command's input.

        Returns the exit status and the last lines; raises `StepAborted` on abort and `StepFailed` on
        timeout (the command's deadline or the step's) or a lost connection, after stopping the
        process group.

        The command holds its attempt's lock on the node (`attempt_lock`) while it runs. A runner that
        dies (killed, its pod gone) leaves its remote command running: sshd hangs up only sessions
        with a tty, so a pty-less command outlives its connection until it next writes to its closed
        stdout or stderr (then SIGPIPE ends it wherever it is; seen with OpenSSH 9.2: a quiet command
        ran on, one that printed died at that line). The retry, from the restarted runner,
        finds that attempt by its lock and **stops it** (TERM, then KILL, as an abort does) before it
        starts; it never runs beside it. Stopping rather than waiting for it to end, which is what
        Fuel did: steps run at least once either way (the retry runs the task whole, after the
        earlier copy is gone, and only the retry's result counts, as the earlier one's output and
        exit status are lost with its runner); the earlier copy cannot be trusted to finish (the
        first line it prints kills it at that point), so waiting would only delay the retry by up
        to the task's timeout (an hour for Fuel's puppet tasks) for a run whose outcome nobody sees; and
        tasks already have to bear being stopped, by an abort or a timeout. A copy that does not
        stop within KILL_GRACE + STOP_WAIT seconds fails this attempt (`stead-busy`), never runs
        beside it.
        """
        wrapper = _WRAPPER if script is None else _SCRIPT_WRAPPER
        lock = attempt_lock(ctx.run_uid, ctx.key)
        command = (f"exec /bin/sh -c {shlex.quote(wrapper)} stead {shlex.quote(lock)} {shlex.quote(cwd)} "
                   + " ".join(shlex.quote(arg) for arg in argv))
        if script is not None:
            stdin = script
        started = time.monotonic()
        deadline = ctx.deadline
        if time_limit is not None and time_limit > 0:
            deadline = started + time_limit if deadline is None else min(deadline, started + time_limit)
        try:
            process = await self.conn.create_process(command, encoding=None, stdin=asyncssh.PIPE)
        except (asyncssh.Error, OSError) as exc:
            reason = exc.reason if isinstance(exc, asyncssh.Error) else str(exc)
            raise StepFailed(f"{what} on {self.target.address}: cannot start a session: {reason}") from None
        last: collections.deque[str] = collections.deque(maxlen=LAST_LINES)
        group = _Group()

        def emit(line: str, stream: str) -> None:
            if stream == "stdout" and not group.started:
                if group.pgid is None:
                    match = _PGID.match(line)
                    if match:
                        group.pgid = int(match.group(1))
                        group.known.set()
                        return
                elif line == _GUARD_GO:
                    group.started = True
                    return
                elif guarded := _GUARD_LINE.match(line):
                    if guarded.group(1) == "busy":
                        group.busy = int(guarded.group(2))
                    else:
                        last.append(ctx.output(
                            f"an earlier attempt of {ctx.key} still runs on {self.target.address} (process group "
                            f"{guarded.group(2)}; its runner ended or lost the connection): stopping it (TERM, then "
                            f"KILL after {KILL_GRACE:g}s) before this attempt starts", "stderr"))
                    return
            last.append(ctx.output(line, stream))
            if on_line is not None:
                on_line(line, stream)

        async def pump(reader: asyncssh.SSHReader[bytes], stream: str) -> None:
            pending = b""
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    emit(raw.decode("utf-8", errors="replace").rstrip("\r"), stream)
                # A piece of a long line is cut only with the masker's reach of text after the cut
                # (as local processes do): a secret straddling it would be split in two halves.
                while len(pending) > _MAX_LINE + ctx.mask_reach:
                    text = pending.decode("utf-8", errors="surrogateescape")  # round-trips any bytes
                    at = len(pending[:_MAX_LINE].decode("utf-8", errors="surrogateescape"))
                    cut = ctx.safe_cut(text, at) or at
                    emit(text[:cut].encode("utf-8", "surrogateescape").decode("utf-8", errors="replace"), stream)
                    pending = text[cut:].encode("utf-8", "surrogateescape")
            if pending:
                emit(pending.decode("utf-8", errors="replace").rstrip("\r"), stream)

        async def feed() -> None:
            view = memoryview(stdin or b"")
            for at in range(0, len(view), 1 << 20):  # a MiB at a time, with flow control
                process.stdin.write(bytes(view[at:at + (1 << 20)]))
                await process.stdin.drain()
            process.stdin.write_eof()

        pumps = asyncio.gather(pump(process.stdout, "stdout"), pump(process.stderr, "stderr"), feed(),
                               process.wait_closed())
        try:
            while True:
                done, _ = await asyncio.wait({pumps}, timeout=POLL)
                if done:
                    pumps.result()
                    break
                if ctx.abort.is_set():
                    await self._stop(process, group)
                    raise StepAborted(f"{ctx.key}: aborted")
                if deadline is not None and time.monotonic() >= deadline:
                    await self._stop(process, group)
                    raise StepFailed(f"{what} on {self.target.address} timed out after "
                                     f"{time.monotonic() - started:.0f}s (stopped)" + tail(last),
                                     details={"lastLines": list(last)})
        except (asyncssh.Error, OSError) as exc:
            with contextlib.suppress(Exception):
                await self._stop(process, group)
            raise StepFailed(f"{what} on {self.target.address}: the connection failed: {exc}" + tail(last),
                             details={"lastLines": list(last)}) from None
        finally:
            pumps.cancel()
            with contextlib.suppress(BaseException):
                await pumps
        if group.busy is not None and process.exit_status == BUSY_EXIT:
            raise StepFailed(f"{what} on {self.target.address}: an earlier attempt of {ctx.key} still runs there "
                             f"(process group {group.busy}) and did not stop within "
                             f"{KILL_GRACE + STOP_WAIT:g}s of TERM and KILL: not starting a second copy",
                             details={"lastLines": list(last)})
        if process.exit_status is None or process.exit_status < 0:
            signal_name = (process.exit_signal or ("", False, "", ""))[0]
            if signal_name:
                raise StepFailed(f"{what} on {self.target.address} was killed by signal {signal_name}" + tail(last),
                                 details={"lastLines": list(last)})
            raise StepFailed(f"{what} on {self.target.address}: the session ended without an exit status"
                             + tail(last), details={"lastLines": list(last)})
        return Outcome(int(process.exit_status), list(last))

    async def _stop(self, process: asyncssh.SSHClientProcess[bytes], group: _Group) -> None:
        """Kill the command's process group on the node (TERM, then KILL), then close its channel.

        Stopped before the wrapper told its process group, it is given a moment to tell it (its
        first line is already on the way) rather than left running with the channel closed."""
        if group.pgid is None and not process.is_closing():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(group.known.wait(), KILL_GRACE)  # the stdout pump sets it
        if group.pgid is not None:
            pgid = group.pgid
            script = stop_script(pgid)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.run(script, check=False), KILL_GRACE + 10)
        process.close()


def tail(lines: collections.deque[str] | list[str]) -> str:
    if not lines:
        return ""
    return "; last lines:\n" + "\n".join(lines)


async def guard(ctx: StepContext, awaitable: Awaitable[T], what: str) -> T:
    """Await while watching the abort flag and the step's deadline (the awaitable is cancelled)."""
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL)
            if done:
                return task.result()
            if ctx.abort.is_set():
                raise StepAborted(f"{ctx.key}: aborted")
            if ctx.timed_out():
                raise StepFailed(f"{what}: the step timed out")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def _open_socket(target: Target, policy: EgressPolicy, seconds: float) -> socket.socket:
    """A connected TCP socket whose peer the policy allows (every resolved address is tried)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(target.address, target.port, type=socket.SOCK_STREAM), seconds)
    except (TimeoutError, OSError) as exc:
        raise Unreachable(f"cannot resolve {target.address}: {exc or 'timed out'}") from None
    errors: list[str] = []
    for family, kind, proto, _, address in infos:
        why = policy.refusal(str(address[0]))
        if why is not None:  # never a packet to a refused address (no probing of its ports)
            raise StepFailed(f"refused to connect to {target.address}: {why}, which ssh steps may not reach "
                             "(the operator's own ports, cloud metadata, the cluster's private networks); "
                             f"{SSH_ALLOW_HINT}")
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, address), seconds)
        except (TimeoutError, OSError) as exc:
            sock.close()
            errors.append(f"{address[0]}: {exc or f'timed out after {seconds:.0f}s'}")
            continue
        peer = str(sock.getpeername()[0])
        why = policy.refusal(peer)
        if why is not None:
            sock.close()
            raise StepFailed(f"refused to connect to {target.address}: {why}, which ssh steps may not reach "
                             "(the operator's own ports, cloud metadata, the cluster's private networks); "
                             f"{SSH_ALLOW_HINT}")
        return sock
    raise Unreachable(f"cannot connect to {target.address} port {target.port}: {'; '.join(errors)}")


async def connect(ctx: StepContext, policy: EgressPolicy, seconds: float, keepalive: float = 15.0) -> Remote:
    """Open a verified, authenticated connection to the step's target (see the module's docstring)."""
    target = target_of(ctx)
    key = _private_key(ctx)
    known = _known_hosts(ctx)
    remaining = ctx.remaining()
    limit = seconds if remaining is None else max(min(seconds, remaining), 0.001)
    sock = await guard(ctx, _open_socket(target, policy, limit), f"connecting to {target}")
    peer = str(sock.getpeername()[0])
    client = _Client()
    try:
        conn, _ = await guard(ctx, asyncssh.create_connection(
            lambda: client, target.address, target.port, sock=sock, username=target.user, client_keys=[key],
            known_hosts=known, agent_path=None, config=None, preferred_auth="publickey", password=None,
            kbdint_auth=False, gss_auth=False, host_based_auth=False, login_timeout=limit,
            keepalive_interval=keepalive, keepalive_count_max=3,
        ), f"connecting to {target}")
    except asyncssh.HostKeyNotVerifiable as exc:
        sock.close()
        if client.unknown is not None:
            raise StepFailed(
                f"{target.address} port {target.port} presented a host key that ssh_known_hosts does not list: "
                f"{client.unknown.get_algorithm()} {client.unknown.get_fingerprint()} (refused: add the node's "
                "key to its known hosts if it is the right one)") from None
        raise StepFailed(f"{target.address} port {target.port}: the host key is not trusted: {exc.reason}") from None
    except asyncssh.PermissionDenied:
        sock.close()
        raise StepFailed(f"{target}: authentication failed: the node did not accept the private key "
                         "(ssh_private_key) for that user") from None
    except (TimeoutError, asyncssh.ConnectionLost, OSError) as exc:
        sock.close()
        reason = exc.reason if isinstance(exc, asyncssh.Error) else str(exc) or "timed out"
        raise Unreachable(f"ssh to {target} failed: {ctx.mask(reason)}") from None
    except asyncssh.Error as exc:
        sock.close()
        raise StepFailed(f"ssh to {target} failed: {ctx.mask(exc.reason)}") from None
    except BaseException:
        sock.close()
        raise
    host_key = conn.get_server_host_key()
    assert host_key is not None  # the handshake verified one
    return Remote(conn, target, peer, host_key)
