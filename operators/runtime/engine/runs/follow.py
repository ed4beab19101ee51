"""Following a run to its end: the supervision loop a kind's step calls (`follow_run`).

Why a module of its own: this is the part that runs for the whole life of a run. It waits for a run
slot, starts the runner (`operators.runtime.engine.runs.launch`) and starts it again when it dies,
explaining why (`restart_reason`), asks the kind's `RunObserver` whether to abort and what to show,
writes status at most once a second when what a user sees changed, and, once the run is over, feeds
the step-duration histogram. `run_pipeline` is the pipeline shape of the kinds that do this.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from operators.runtime.core.pipeline import PermanentError, Pipeline, StepContext, StepFn, TemporaryError
from operators.runtime.engine.runs.launch import (
    RUNNER_CREDENTIALS,
    RunRequest,
    in_jobs,
    runner_credentials,
    runner_log_tail,
    start_runner,
)
from operators.runtime.engine.runs.records import STOPPED, read_stopped
from operators.runtime.kube.client import ApiError
from pipelines.control import RunProcess, is_running, read_progress, read_status, request_abort
from pipelines.model import FINAL_STEP_STATES

log = logging.getLogger(__name__)

FINAL_RUN_STATES = frozenset({"Succeeded", "Failed", "Aborted"})
ENDED_RUN_PHASES = frozenset({"Failed", "Aborted"})
"""The phases of a run that ended without succeeding (a run that succeeded is `Provisioned`): its state."""


MAX_RUNNER_STARTS = 5
PATCH_INTERVAL = 1.0
POLL_INTERVAL = 0.25
CONTROL_INTERVAL = 1.0


def run_pipeline(phases: tuple[str, ...], steps: Mapping[str, StepFn]) -> Pipeline:
    """The pipeline of a run kind (ActionRun, GraphRun): its last step, which follows the run, is announced
    and is where a spec change (`abort`) goes; and a run that ended shows it. A PermanentError whose facts
    give the state `Failed` or `Aborted` is the run's end, whatever step raised it (a missing environment
    at Init, a task at Running): the PHASE column says `Failed` or `Aborted`, never `Running` or `Planning`
    as if the run went on, nor `Provisioned` as if it succeeded."""

    def ending(step: StepFn) -> StepFn:
        @functools.wraps(step)
        async def wrapped(ctx: StepContext) -> Mapping[str, Any]:
            try:
                return await step(ctx)
            except PermanentError as error:
                state = error.facts.get("state")
                if error.phase is None and state in ENDED_RUN_PHASES:
                    error.phase = str(state)
                raise

        return wrapped

    last = phases[-2]
    return Pipeline(phases=phases, steps={phase: ending(step) for phase, step in steps.items()},
                    update_phase=last, announce=frozenset({last}), ended=ENDED_RUN_PHASES)


@dataclass(frozen=True)
class Abort:
    """Abort the run. `reason`: why the run failed, when it is not the user's own abort (a lock
    that expired, say); None lets the run end as Aborted."""

    reason: str | None = None


class RunObserver(Protocol):
    """What a kind's object shows of its run."""

    async def abort(self) -> Abort | None:
        """Asked about once a second: whether the run must be aborted now (its object asks for it,
        a lock it holds expired, ...)."""
        ...

    def progress_patch(self, status: Mapping[str, Any], progress: Mapping[str, Any]) -> Mapping[str, Any]:
        """The status patch that shows this state of the run (`status.json`, `progress.json`). The
        same patch twice is written once."""
        ...

    def queue_patch(self, waiting: str | None) -> Mapping[str, Any]:
        """The status patch that shows the run waiting for a slot (`waiting` says why and behind
        how many), or, with None, that it has one and runs."""
        ...

    async def write(self, patch: Mapping[str, Any]) -> None:
        """Write a patch returned by `progress_patch` or `queue_patch` (the supervision may add its
        counters)."""
        ...


@dataclass
class Followed:
    """What a supervision saw: how often it started the runner and wrote status, and why it
    aborted the run, if it did."""

    starts: int
    writes: int
    aborted_for: str | None = None
    restarts: list[str] = field(default_factory=list)
    """Why the runner was started again, each time it was (`restart_reason`)."""
    status: Mapping[str, Any] = field(default_factory=dict)
    progress: Mapping[str, Any] = field(default_factory=dict)


def restart_reason(returncode: int | None, stopped: Mapping[str, Any] | None, tail: Sequence[str]) -> str:
    """Why a runner is started again, for the run's `RunnerRestarted` Event and the operator's log.

    `returncode`: the exit status of a runner this operator process started (negative: the signal that
    killed it), None for one it did not (started before an operator restart); `stopped`: what
    `stop_runs` recorded when the operator stopped it on purpose; `tail`: its last stderr lines."""
    if stopped is not None:
        why = f"the operator stopped it at {stopped.get('at', '?')}: {stopped.get('why', 'no reason recorded')}"
    elif returncode is None:
        why = "it ended while no operator process that started it was there to see how (exit status unknown)"
    elif returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        why = f"it was killed by signal {name}" + (" (the kernel's OOM killer, or someone, sent it)"
                                                  if name == "SIGKILL" else "")
    else:
        why = f"it exited with code {returncode} before the run ended"
    said = "; its last stderr lines: " + " | ".join(tail) if tail else "; it wrote nothing on its stderr"
    return why + said


async def follow_run(ctx: StepContext, request: RunRequest, observer: RunObserver, *, starts: int = 0,
                     writes: int = 0) -> Followed:
    """Run `request` to its end (see the module's docstring); `starts` and `writes` carry on the
    counts of an earlier supervision of the same run (an operator restart)."""
    paths = request.paths
    jobs = in_jobs(ctx, request)
    followed = Followed(starts, writes)
    slots = ctx.services.run_slots
    waited = False

    async def queued(ahead: int, running: int) -> None:
        nonlocal waited
        waited = True
        await _write_quietly(observer, observer.queue_patch(
            f"queued: {running} runs in progress (this operator runs at most {slots.limit} at once), "
            f"{ahead} queued before this one"))

    await slots.acquire(ctx.obj.namespace, queued, at_once=is_running(paths))
    try:
        if waited:
            await _write_quietly(observer, observer.queue_patch(None))
        await _follow(ctx, request, observer, jobs, followed)
    finally:
        slots.release(ctx.obj.namespace)
    followed.status = read_status(paths) or {}
    followed.progress = read_progress(paths) or {}
    _observe_steps(ctx, followed.status)
    return followed


async def _write_quietly(observer: RunObserver, patch: Mapping[str, Any]) -> None:
    with contextlib.suppress(ApiError):  # shown at the next write; the run goes on meanwhile
        await observer.write(patch)


async def _follow(ctx: StepContext, request: RunRequest, observer: RunObserver, jobs: bool,
                  followed: Followed) -> None:
    paths = request.paths
    process: RunProcess | None = None
    shown: Mapping[str, Any] | None = None
    last_patch = 0.0
    last_control = time.monotonic()
    refresh_at = await runner_credentials(ctx, paths) if jobs or request.kube_api else None
    try:
        while True:
            if refresh_at is not None and time.monotonic() >= refresh_at:
                with contextlib.suppress(TemporaryError):  # the current token is still valid for a while
                    refresh_at = await runner_credentials(ctx, paths)
            progress = read_progress(paths)
            final = progress is not None and progress.get("finishedAt") and progress.get("phase") in FINAL_RUN_STATES
            alive = process is not None and process.process.returncode is None
            if final and not alive:
                break
            if not alive and not final and not is_running(paths):
                stopped = read_stopped(paths)
                if followed.starts >= MAX_RUNNER_STARTS and stopped is None:
                    followed.aborted_for = f"the runner stopped {followed.starts} times before the run finished"
                    break
                if process is not None or followed.starts:
                    _restarted(ctx, followed, restart_reason(
                        process.process.returncode if process is not None else None, stopped,
                        await asyncio.to_thread(runner_log_tail, paths)), deliberate=stopped is not None)
                process = await start_runner(ctx, request, jobs)
                (paths.run_dir / STOPPED).unlink(missing_ok=True)
                followed.starts += 1
            if time.monotonic() - last_control >= CONTROL_INTERVAL and not paths.abort_file.exists():
                last_control = time.monotonic()
                abort = await observer.abort()
                if abort is not None:
                    followed.aborted_for = abort.reason
                    request_abort(paths)
            if progress is not None and time.monotonic() - last_patch >= PATCH_INTERVAL:
                view = observer.progress_patch(read_status(paths) or {}, progress)
                if view != shown:
                    with contextlib.suppress(ApiError):
                        await observer.write({**view, "runnerStarts": followed.starts,
                                              "statusWrites": followed.writes + 1})
                        followed.writes += 1
                    shown, last_patch = view, time.monotonic()
            await asyncio.sleep(POLL_INTERVAL)
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                await process.wait()
    finally:
        with contextlib.suppress(FileNotFoundError):
            (paths.run_dir / RUNNER_CREDENTIALS).unlink()


def _restarted(ctx: StepContext, followed: Followed, why: str, deliberate: bool) -> None:
    """Say on the run (an Event, the operator's log) why its runner is started again."""
    message = f"the run's runner is started again (start {followed.starts + 1}): {why}"
    followed.restarts.append(why)
    log.warning("run %s/%s: %s", ctx.obj.namespace, ctx.obj.name, message)
    ctx.services.events.record(ctx.obj, "Normal" if deliberate else "Warning", "RunnerRestarted", message)


def _observe_steps(ctx: StepContext, status: Mapping[str, Any]) -> None:
    """Each finished step instance into the step-duration histogram (`stead_workflow_step_duration_seconds`)."""
    for step in status.get("steps") or []:
        started, finished = step.get("startedAt"), step.get("finishedAt")
        if not started or not finished or step.get("state") not in FINAL_STEP_STATES:
            continue
        try:
            seconds = (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
        except (TypeError, ValueError):
            continue
        ctx.services.metrics.observe_step(ctx.obj.kind, str(step.get("type") or ""), str(step["state"]),
                                          max(0.0, seconds))
