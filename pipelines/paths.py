"""Where a run keeps its files under the state directory (shared by the runner and its callers).

    <state>/runs/<uid>/store/           the run's LMDB store (see pipelines.store: one per run)
    <state>/runs/<uid>/workflow.json    the workflow, as the caller wrote it
    <state>/runs/<uid>/status.json      progress summary, rewritten atomically while the run goes
    <state>/runs/<uid>/lock             flock-ed by the live runner (one runner per uid; liveness)
    <state>/runs/<uid>/abort            exists = abort requested
    <state>/runs/<uid>/output/<key>.log the whole masked output of an instance, all attempts
    <state>/runs/<uid>/work/<key>/      the instance's working directory
"""

from __future__ import annotations

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
    def output_dir(self) -> Path:
        return self.run_dir / "output"

    @property
    def work_dir(self) -> Path:
        return self.run_dir / "work"

    def output_file(self, key: str) -> Path:
        return self.output_dir / f"{key}.log"

    def instance_workdir(self, key: str) -> Path:
        return self.work_dir / key
