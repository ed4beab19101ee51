"""What the operator writes in a run's directory besides the runner's own files, so that runs survive it.

Why a module of its own: these records are the operator's memory across restarts and are read by
several jobs. A run's conclusion (`write_conclusion`) says its outcome reached the kind's objects, so
that supervising it again repeats nothing; the stop record (`STOPPED`, written by `stop_runs` when an
interrupted operator stops its runners) lets the next start explain the restart instead of reporting
an unexplained exit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from operators.runtime.core.clock import utc_now
from pipelines.control import is_running, run_paths, stop_runner
from pipelines.paths import RunPaths, private_dir, write_private

STOPPED = "stead-stopped.json"
"""Written in the run's directory when the operator stopped its runner on purpose (`stop_runs`): the
next start says so, instead of an unexplained exit."""


CONCLUSION = "stead-conclusion.json"
"""Written in the run's directory once the run's outcome reached the kind's objects: supervising
it again (after an operator restart, or for an event that waited behind the run) repeats nothing."""


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON object the operator wrote in a run's directory; None when absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_conclusion(paths: RunPaths) -> dict[str, Any] | None:
    return read_record(paths.run_dir / CONCLUSION)


def write_conclusion(paths: RunPaths, result: Mapping[str, Any]) -> None:
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    private_dir(paths.run_dir, upto=paths.state_dir)
    write_private(paths.run_dir / CONCLUSION, json.dumps(dict(result)))


INTERRUPTED = "the operator was interrupted (Ctrl-C) and stopped its runs with it"


def stop_runs(state_dir: Path, why: str) -> list[str]:
    """Stop every live runner of this operator's runs (`pipelines.control.stop_runner`: the runner
    and what its running steps started), recording `why` for the next start, which resumes them.
    Returns the uids of the runs stopped. For an operator the user interrupts on a terminal."""
    stopped: list[str] = []
    root = state_dir / "runs"
    if not root.is_dir():
        return stopped
    for run_dir in sorted(root.iterdir()):
        try:
            paths = run_paths(state_dir, run_dir.name)
        except ValueError:
            continue
        if not is_running(paths):
            continue
        write_private(paths.run_dir / STOPPED, json.dumps({"at": utc_now(), "why": why}))
        if stop_runner(paths):
            stopped.append(paths.uid)
        else:
            (paths.run_dir / STOPPED).unlink(missing_ok=True)
    return stopped


def read_stopped(paths: RunPaths) -> dict[str, Any] | None:
    """What `stop_runs` recorded when it stopped this run's runner (None: it did not)."""
    return read_record(paths.run_dir / STOPPED)
