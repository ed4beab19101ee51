"""Where a run keeps its files under the state directory (shared by the runner and its callers).

    <state>/runs/<uid>/store/           the run's LMDB store (see pipelines.store: one per run)
    <state>/runs/<uid>/workflow.json    the workflow, as the caller wrote it
    <state>/runs/<uid>/status.json      progress summary, rewritten atomically while the run goes
    <state>/runs/<uid>/lock             flock-ed by the live runner (one runner per uid; liveness)
    <state>/runs/<uid>/abort            exists = abort requested
    <state>/runs/<uid>/output/<key>.log the whole masked output of an instance, all attempts
    <state>/runs/<uid>/work/<key>/      the instance's working directory
    <state>/runs/<uid>/runner.log       the runners' stderr (their caller keeps it bounded), masked

Everything under the state directory is its owner's alone (directories 0700, files 0600): a run's
workflow, outputs and store hold what other namespaces' scripts, running on the same host as
other users, must not read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipelines.model import check_name


@dataclass(frozen=True)
class RunPaths:
    state_dir: Path
    uid: str

    def __post_init__(self) -> None:
        check_name(self.uid, "run uid")

    @property
    def store(self) -> Path:
        return self.run_dir / "store"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "runs" / self.uid

    @property
    def workflow_file(self) -> Path:
        return self.run_dir / "workflow.json"

    @property
    def status_file(self) -> Path:
        return self.run_dir / "status.json"

    @property
    def lock_file(self) -> Path:
        return self.run_dir / "lock"

    @property
    def abort_file(self) -> Path:
        return self.run_dir / "abort"

    @property
    def runner_log(self) -> Path:
        return self.run_dir / "runner.log"

    @property
    def output_dir(self) -> Path:
        return self.run_dir / "output"

    @property
    def work_dir(self) -> Path:
        return self.run_dir / "work"

    def output_file(self, key: str) -> Path:
        return self.output_dir / f"{key}.log"

    def instance_workdir(self, key: str) -> Path:
        return self.work_dir / key


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path, *, upto: Path | None = None) -> Path:
    """Make `path` (and its parents below `upto`) a directory only its owner may enter (0700), also
    when it already existed with a wider mode (made by an older version).

    A directory this process does not own is left as it is: a volume's mount point (in a Pod, owned
    by root with the Pod's fsGroup) whose mode its owner decides, and which this process may not
    change; what is made inside it is private all the same."""
    chain = [path]
    if upto is not None:
        chain += [parent for parent in path.parents if parent.is_relative_to(upto)]
    for directory in reversed(chain):
        directory.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        found = directory.stat()
        if found.st_mode & 0o777 != PRIVATE_DIR and found.st_uid == os.geteuid():
            directory.chmod(PRIVATE_DIR)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, mode 0600 (through a temporary file beside it)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, PRIVATE_FILE)  # an older file of that name kept its mode through O_TRUNC
    os.replace(tmp, path)


def private_lmdb(path: Path) -> None:
    """An LMDB environment's directory 0700 and its files 0600, before it is opened (older versions
    left them 0755/0644: readable by every user of the host)."""
    private_dir(path)
    for name in ("data.mdb", "lock.mdb"):
        with_mode = path / name
        if with_mode.exists() and with_mode.stat().st_mode & 0o777 != PRIVATE_FILE:
            with_mode.chmod(PRIVATE_FILE)
