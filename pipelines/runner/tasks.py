# Luigi 3.8 ships py.typed but leaves most of its API unannotated; the calls into it are checked
# at their boundaries here instead.
# mypy: disable-error-code="no-untyped-call"
"""Luigi's side of a run: one `StepTask` per instance (step on target), a `RunTask` root, and
their Targets in the run store. Tasks find their run's `Runner` by uid in this process."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import luigi

from pipelines.model import Instance
from pipelines.store import RunStore

if TYPE_CHECKING:
    from pipelines.runner.engine import Runner

RUN_DONE_KEY = "@run"
"""The root task's Target: never an instance key (those start with a letter or digit)."""

_RUNNERS: dict[str, Runner] = {}
_RUNNERS_LOCK = threading.Lock()


def register(runner: Runner) -> None:
    with _RUNNERS_LOCK:
        _RUNNERS[runner.uid] = runner


def unregister(uid: str) -> None:
    with _RUNNERS_LOCK:
        _RUNNERS.pop(uid, None)


def _runner(uid: str) -> Runner:
    try:
        return _RUNNERS[uid]
    except KeyError:
        raise RuntimeError(f"run {uid} has no runner in this process") from None


class StepTarget(luigi.Target):
    """Done-ness of one instance: a key in the run store's ``done`` database."""

    def __init__(self, store: RunStore, uid: str, key: str) -> None:
        self.store, self.uid, self.key = store, uid, key

    def exists(self) -> bool:
        return self.store.is_done(self.uid, self.key)


class _CachedParams:
    """Luigi recomputes a class's parameters (``dir(cls)`` and a sort) several times per task.

    Profiling the engine at 2,000 steps showed `Task.get_params` as the largest single cost; the
    parameters of these classes never change, so they are computed once per class.
    """

    @classmethod
    def get_params(cls) -> list[tuple[str, luigi.Parameter]]:
        cached: list[tuple[str, luigi.Parameter]] | None = cls.__dict__.get("_stead_params")
        if cached is None:
            cached = list(super().get_params())  # type: ignore[misc]
            cls._stead_params = cached  # type: ignore[attr-defined]
        return list(cached)


class StepTask(_CachedParams, luigi.Task):
    """One step on one target. Parameters are what luigid shows: run uid, step id, target."""

    task_namespace = "stead"
    run_uid = luigi.Parameter()
    step = luigi.Parameter()
    target = luigi.Parameter(default="")

    def _instance(self) -> Instance:
        return Instance(self.step, self.target)

    def requires(self) -> list[StepTask]:
        return _runner(self.run_uid).requirement_tasks(self._instance())

    def output(self) -> StepTarget:
        runner = _runner(self.run_uid)
        return StepTarget(runner.store, self.run_uid, self._instance().key)

    def complete(self) -> bool:
        """One LMDB lookup (Luigi's default goes through `output()` and `flatten`)."""
        return _runner(self.run_uid).store.is_done(self.run_uid, self._instance().key)

    def run(self) -> None:
        _runner(self.run_uid).execute(self._instance())

    def on_failure(self, exception: BaseException) -> str:
        """What Luigi reports (to luigid too): the masked message, not a traceback."""
        return str(exception)


class RunTask(_CachedParams, luigi.Task):
    """The root: requires the instances nothing else requires; done when the whole run is."""

    task_namespace = "stead"
    run_uid = luigi.Parameter()

    def requires(self) -> list[StepTask]:
        return [StepTask(run_uid=self.run_uid, step=i.step, target=i.target) for i in _runner(self.run_uid).sinks]

    def output(self) -> StepTarget:
        return StepTarget(_runner(self.run_uid).store, self.run_uid, RUN_DONE_KEY)

    def complete(self) -> bool:
        return _runner(self.run_uid).store.is_done(self.run_uid, RUN_DONE_KEY)

    def run(self) -> None:
        _runner(self.run_uid).store.mark_done(self.run_uid, RUN_DONE_KEY)

    def on_failure(self, exception: BaseException) -> str:
        return str(exception)
