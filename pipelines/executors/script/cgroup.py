"""Ending everything a local step started through a cgroup of its own (cgroup v1 freezer).

A step's processes may leave its process group (``setsid``) and drop any marker put in their
environment (``env -u``), but not their cgroup: moving out needs write access to a cgroup's
``cgroup.procs``, which only root has. So each step's interpreter is put, before it reads its
script, into ``<freezer>/stead.scripts/<step>``, and when the step ends the cgroup is frozen
(nothing in it can fork any more), every process in it is sent SIGKILL, and it is thawed, emptied
and removed.

Where the freezer hierarchy is absent or not writable (a runner that is not root, a cgroup v2 only
host), `StepCgroup.create` returns None and the caller falls back to its weaker means (the
process group and the environment marker).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
import uuid
from pathlib import Path

FREEZER = Path("/sys/fs/cgroup/freezer")
PARENT = "stead.scripts"
"""The parent of every step's cgroup (not ``stead-*``: those are the local node's)."""


def cgroup_prefix(marker: str) -> str:
    """The names of a step's cgroups start with this, from its marker (``<run uid>/<instance key>``): a
    restarted runner finds the cgroups of a step its predecessor left running (`StepCgroup.existing`)."""
    return hashlib.sha256(marker.encode()).hexdigest()[:32]


class StepCgroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, marker: str, root: Path = FREEZER) -> StepCgroup | None:
        """A fresh cgroup for the step with `marker`; None where cgroups cannot be used."""
        if not (root / "cgroup.procs").exists():
            return None
        path = root / PARENT / f"{cgroup_prefix(marker)}.{uuid.uuid4().hex[:12]}"
        try:
            (root / PARENT).mkdir(exist_ok=True)
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    @classmethod
    def existing(cls, marker: str, root: Path = FREEZER) -> list[StepCgroup]:
        """The cgroups of the step with `marker` that are still there (left by a runner that died)."""
        with contextlib.suppress(OSError):
            return [cls(path) for path in (root / PARENT).glob(f"{cgroup_prefix(marker)}.*") if path.is_dir()]
        return []

    def add(self, pid: int) -> None:
        """Move `pid` into the cgroup (before it can fork: its children are born in it)."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self, timeout: float = 10.0) -> int:
        """Freeze (nothing in it can fork any more), SIGKILL every process, thaw (a frozen task dies
        only once thawed), until it is empty or `timeout` passed; then remove it. Returns how many
        processes were killed."""
        state = self.path / "freezer.state"
        deadline = time.monotonic() + timeout
        killed: set[int] = set()
        while self.pids() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                state.write_text("FROZEN")
                while state.read_text().strip() != "FROZEN" and time.monotonic() < deadline:
                    time.sleep(0.002)
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            with contextlib.suppress(OSError):
                state.write_text("THAWED")
            for _ in range(50):
                if not self.pids():
                    break
                time.sleep(0.002)
        removal = min(deadline, time.monotonic() + 2.0)
        while True:  # an empty cgroup left behind (a task not reaped yet) is harmless, and never reused
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > removal:
                    break
                time.sleep(0.01)
        return len(killed)
