"""Processes started for one owner, recognised and stopped safely later, and who holds a port.

A started process is recorded as ``<run_dir>/<name>.json`` with its pid *and* its start time
(from /proc), so a later ``stead`` invocation can tell it from an unrelated process that got the
pid after it exited. Signals go through a pidfd opened before the identity check, so the checked
process is the one signalled. Linux only (/proc, pidfd).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from operators.cluster.atomicwrite import write_file_atomically

LOOPBACK: Final = "127.0.0.1"
KILL_TIMEOUT_SECONDS: Final = 5.0


@dataclass(frozen=True)
class ProcessRecord:
    """Identifies a started process beyond its pid, so a recycled pid is never mistaken for it."""

    name: str
    pid: int
    start_ticks: int
    """Field 22 of /proc/<pid>/stat: fixed at fork, different for any later process with the pid."""


# --- /proc -------------------------------------------------------------------------------------


def _proc_stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (the command name may contain spaces, so split after it)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def process_start_ticks(pid: int) -> int | None:
    fields = _proc_stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_is_running(pid: int) -> bool:
    """True when the pid exists and is not a zombie."""
    fields = _proc_stat_fields(pid)
    return bool(fields and fields[0] != "Z")


def process_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def describe_pid(pid: int) -> str:
    """``pid 123 (etcd)``, or ``pid 123`` when /proc does not show its name."""
    try:
        return f"pid {pid} ({Path(f'/proc/{pid}/comm').read_text().strip()})"
    except OSError:
        return f"pid {pid}"


# --- ports -------------------------------------------------------------------------------------


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True when something listens on host:port (a TIME_WAIT leftover does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            listening = len(fields) > 9 and fields[3] == "0A"  # TCP_LISTEN
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_owner(port: int) -> int | None:
    """The pid listening on ``port``, when /proc shows it (other users' processes may be hidden)."""
    targets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not targets:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in targets:
                        return int(entry.name)
        except OSError:
            continue
    return None


# --- started processes -------------------------------------------------------------------------


class ProcessTable:
    """The processes started for one owner, recorded under ``run_dir``.

    A recorded process counts as the owner's only while it is the same process (start time), runs
    a binary named like the record and has ``owner_mark`` (the owner's directory) in an argument;
    anything else with the pid is left alone. Processes this object started itself are trusted
    without those checks and reaped when stopped.
    """

    def __init__(self, run_dir: Path, owner_mark: str) -> None:
        self.run_dir = run_dir
        self.owner_mark = owner_mark
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def record_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.json"

    def read_record(self, name: str) -> ProcessRecord | None:
        try:
            data = json.loads(self.record_path(name).read_text())
            return ProcessRecord(name=name, pid=int(data["pid"]), start_ticks=int(data["start_ticks"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def launch(self, name: str, argv: Sequence[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
        """Start ``argv`` detached from the terminal, output in ``log`` (the previous one kept as
        ``<log>.1``), and record it.

        ``start_new_session`` keeps a Ctrl-C in the caller's terminal away from the process: the
        caller gets the KeyboardInterrupt and decides what to stop.
        """
        if log.exists():
            log.replace(log.with_name(f"{log.name}.1"))
        with open(log, "wb") as output:
            process = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                cwd=cwd, start_new_session=True, close_fds=True,
            )
        self._children[process.pid] = process
        record = ProcessRecord(name=name, pid=process.pid, start_ticks=process_start_ticks(process.pid) or 0)
        write_file_atomically(self.record_path(name), json.dumps(asdict(record)).encode())
        return process

    def is_ours(self, record: ProcessRecord) -> bool:
        """True when the pid still is the process recorded: same start time, same binary name, and
        a command line that points into the owner's directory (a pid reused by anything else fails)."""
        if not process_is_running(record.pid) or process_start_ticks(record.pid) != record.start_ticks:
            return False
        argv = process_cmdline(record.pid)
        return (
            bool(argv)
            and Path(argv[0]).name == record.name
            and any(self.owner_mark in argument for argument in argv[1:])
        )

    def is_alive(self, record: ProcessRecord) -> bool:
        child = self._children.get(record.pid)
        if child is not None:
            return child.poll() is None
        return self.is_ours(record)

    def alive(self, names: Sequence[str]) -> dict[str, int]:
        """The pids of the recorded processes among ``names`` that are alive and ours."""
        return {
            name: record.pid
            for name in names
            if (record := self.read_record(name)) is not None and self.is_alive(record)
        }

    def send_signal(self, record: ProcessRecord, signum: signal.Signals) -> None:
        """Signal the process only if it is still ours; a pidfd pins the identity checked."""
        child = self._children.get(record.pid)
        if child is not None:
            if child.poll() is None:
                child.send_signal(signum)
            return
        try:
            pidfd = os.pidfd_open(record.pid)
        except ProcessLookupError:
            return
        except OSError:
            pidfd = -1  # kernel without pidfd: fall back to kill after the identity check
        try:
            if not self.is_ours(record):
                return
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(record.pid, signum)
        except ProcessLookupError:
            pass
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def _wait_gone(self, records: Sequence[ProcessRecord], timeout: float) -> list[ProcessRecord]:
        deadline = time.monotonic() + timeout
        while True:
            alive = [record for record in records if self.is_alive(record)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.05)

    def stop(self, names: Sequence[str], timeout: float) -> list[ProcessRecord]:
        """Stop the recorded processes among ``names``: SIGTERM, SIGKILL after ``timeout`` seconds.

        Records are deleted, also those whose process is gone or not ours; the processes that
        survived even SIGKILL are returned (their records kept).
        """
        records = [record for record in map(self.read_record, names) if record is not None]
        alive = [record for record in records if self.is_alive(record)]
        for record in alive:
            self.send_signal(record, signal.SIGTERM)
        alive = self._wait_gone(alive, timeout)
        for record in alive:
            self.send_signal(record, signal.SIGKILL)
        alive = self._wait_gone(alive, KILL_TIMEOUT_SECONDS)
        for record in records:
            child = self._children.get(record.pid)
            if child is not None and child.poll() is not None:  # poll() reaped it
                del self._children[record.pid]
            if record not in alive:
                self.record_path(record.name).unlink(missing_ok=True)
        return alive



def marked_processes(mark: bytes) -> list[int]:
    """The processes, other than this one, whose environment holds `mark` (``NAME=value``): what a
    demo node's sessions started, daemons that left their session included (unless they cleared their
    environment); a run's scripts (``STEAD_RUN=uid``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def descendants_of(pid: int) -> list[int]:
    """Every process below `pid`, from /proc. A server's per-connection processes may be sessions of
    their own (sshd's are), which killing the server's process group does not reach, nor what they run:
    read them before the server dies and they are reparented."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _proc_stat_fields(int(entry.name))
        if fields and len(fields) > 1 and fields[1].isdigit():
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found
