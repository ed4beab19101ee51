# Luigi 3.8 ships py.typed but leaves most of its API unannotated; the calls into it are checked
# at their boundaries here instead.
# mypy: disable-error-code="no-untyped-call"
"""Luigi's side of a run: one `StepTask` per instance (step on target), a `RunTask` root, and
their Targets in the run store. Tasks find their run's `Runner` by uid in this process."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import luigi
from luigi.parameter import ParameterVisibility

from pipelines.model import Instance
from pipelines.store import RunStore

if TYPE_CHECKING:
    from pipelines.runner.engine import Runner

RUN_DONE_KEY = "@run"
"""The root task's Target: never an instance key (those start with a letter or digit)."""

PUBLIC_VISIBILITY: int = ParameterVisibility.PUBLIC.serialize()

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
    """Luigi's per-task parameter handling, done once per class where it cannot vary.

    Luigi recomputes a class's parameters (``dir(cls)`` and a sort) several times per task:
    profiling the engine at 2,000 steps showed `Task.get_params` as the largest single cost, so
    they are computed once per class. At 5,000 and 50,000 steps the next costs per task were the
    same kind (cProfile, issue 32): `get_param_values` (a dict of the parameters, the task family,
    an error text formatted in advance, the configuration's sections read) on every construction
    and instance-cache lookup, and `to_str_params` / `_get_param_visibilities` (a dict of the
    parameters again, each value serialized) on every report to the scheduler. These classes'
    parameters are plain public, significant `luigi.Parameter`s (strings) that the runner always
    passes by keyword, so those answers are the keyword values themselves: the fast paths below
    give exactly what Luigi's own methods give (tests/unit/pipelines checks that) and fall back to
    them for any other call.
    """

    @classmethod
    def get_params(cls) -> list[tuple[str, luigi.Parameter]]:
        cached: list[tuple[str, luigi.Parameter]] | None = cls.__dict__.get("_stead_params")
        if cached is None:
            cached = list(super().get_params())  # type: ignore[misc]
            cls._stead_params = cached  # type: ignore[attr-defined]
            cls._stead_names = frozenset(name for name, _ in cached)  # type: ignore[attr-defined]
            cls._stead_plain = all(  # type: ignore[attr-defined]
                type(param) is luigi.Parameter and param.significant
                and param.visibility == ParameterVisibility.PUBLIC
                for _, param in cached
            )
        return list(cached)

    @classmethod
    def get_param_values(
        cls, params: list[tuple[str, luigi.Parameter]], args: tuple[Any, ...], kwargs: dict[str, Any],
    ) -> list[tuple[str, Any]]:
        """Every parameter given by keyword as a string: those strings (Luigi's `normalize` of a plain
        `Parameter` is the identity); anything else goes through Luigi."""
        cls.get_params()
        if (
            not args and cls._stead_plain and kwargs.keys() == cls._stead_names  # type: ignore[attr-defined]
            and all(type(value) is str for value in kwargs.values())
        ):
            return [(name, kwargs[name]) for name, _ in params]
        values: list[tuple[str, Any]] = super().get_param_values(params, args, kwargs)  # type: ignore[misc]
        return values

    def to_str_params(self, only_significant: bool = False, only_public: bool = False) -> dict[str, str]:
        """Plain public significant string parameters serialize to themselves, whatever the flags."""
        if type(self)._stead_plain:  # type: ignore[attr-defined]
            return dict(self.param_kwargs)  # type: ignore[attr-defined]
        params: dict[str, str] = super().to_str_params(only_significant, only_public)  # type: ignore[misc]
        return params

    def _get_param_visibilities(self) -> dict[str, int]:
        if type(self)._stead_plain:  # type: ignore[attr-defined]
            return dict.fromkeys(self.param_kwargs, PUBLIC_VISIBILITY)  # type: ignore[attr-defined]
        visibilities: dict[str, int] = super()._get_param_visibilities()  # type: ignore[misc]
        return visibilities


class StepTask(_CachedParams, luigi.Task):
    """One step on one target. Parameters are what luigid shows: run uid, step id, target."""

    task_namespace = "stead"
    run_uid = luigi.Parameter()
    step = luigi.Parameter()
    target = luigi.Parameter(default="")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Built once: Luigi asks a task for its requirements and completion several times.
        self._inst = Instance(self.step, self.target)
        self._key = self._inst.key

    def _instance(self) -> Instance:
        return self._inst

    def requires(self) -> list[StepTask]:
        return _runner(self.run_uid).requirement_tasks(self._inst)

    def output(self) -> StepTarget:
        runner = _runner(self.run_uid)
        return StepTarget(runner.store, self.run_uid, self._key)

    def complete(self) -> bool:
        """One LMDB lookup (Luigi's default goes through `output()` and `flatten`)."""
        return _runner(self.run_uid).store.is_done(self.run_uid, self._key)

    def run(self) -> None:
        _runner(self.run_uid).execute(self._inst)

    def on_failure(self, exception: BaseException) -> str:
        """What Luigi reports (to luigid too): the masked message, not a traceback."""
        return str(exception)


class RunTask(_CachedParams, luigi.Task):
    """The root: requires the instances nothing else requires; done when the whole run is."""

    task_namespace = "stead"
    run_uid = luigi.Parameter()

    def requires(self) -> list[StepTask]:
        runner = _runner(self.run_uid)
        return [runner.task(inst) for inst in runner.sinks]

    def output(self) -> StepTarget:
        return StepTarget(_runner(self.run_uid).store, self.run_uid, RUN_DONE_KEY)

    def complete(self) -> bool:
        return _runner(self.run_uid).store.is_done(self.run_uid, RUN_DONE_KEY)

    def run(self) -> None:
        _runner(self.run_uid).store.mark_done(self.run_uid, RUN_DONE_KEY)

    def on_failure(self, exception: BaseException) -> str:
        return str(exception)
