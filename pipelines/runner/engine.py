# Luigi 3.8 ships py.typed but leaves most of its API unannotated; the calls into it are checked
# at their boundaries here instead.
# mypy: disable-error-code="no-untyped-call"
"""`Runner`: one run of a workflow, from its store to its outcome.

Each instance (step on target) is a `StepTask`; its output is a `StepTarget`, the instance's key in
the run store's ``done`` database, written in the same transaction as its "success" record and the
variables it set. A run started again with the same uid (after a crash, a kill, an abort, a
failure) asks Luigi for the same root task: Luigi's own completion checks skip every instance whose
Target exists, so finished steps and their side effects are never repeated.

With ``scheduler_url`` the same worker talks to a central `luigid` (`luigi.rpc.RemoteScheduler`)
under a worker id derived from the run uid: a restarted runner is the same worker to luigid, which
hands it back the tasks its killed predecessor was running.

What passes through one attempt (its variables, its masked output and details) is attempt.py's.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import luigi
import luigi.rpc
import luigi.worker

from pipelines.executors import default_executors
from pipelines.executors.base import Executor, ParameterError, StepAborted, StepContext, StepFailed, StepResult
from pipelines.executors.script import kill_leftover
from pipelines.hooks import Hooks, Masker
from pipelines.model import FINAL_STEP_STATES, Instance, RunPhase, Step, Workflow, check_name
from pipelines.paths import RunPaths
from pipelines.runner.attempt import RunScope, StepOutput, StepVariables, masked_details
from pipelines.runner.scheduler import FastScheduler
from pipelines.runner.tasks import RunTask, StepTask, register, unregister
from pipelines.runner.worker import StepWorker
from pipelines.store import open_store

log = logging.getLogger("pipelines.runner")

EXIT_CODES: dict[RunPhase, int] = {"Succeeded": 0, "Failed": 1, "Aborted": 3, "Pending": 1, "Running": 1}


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AlreadyRunning(RuntimeError):
    """Another runner process holds this run."""


@dataclass(frozen=True)
class RunOutcome:
    uid: str
    phase: RunPhase
    message: str
    counts: dict[str, int]

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.phase]


EventSink = Callable[[dict[str, Any]], None]


class Runner:
    """Runs one workflow under one uid, resuming whatever an earlier runner of that uid recorded.

    Thread-safety: `execute` runs in pool threads; shared state is guarded by `_lock`; LMDB
    transactions are per call. `abort()` may be called from any thread or a signal handler.
    """

    def __init__(
        self, workflow: Workflow, run_uid: str, state_dir: Path, *,
        hooks: Hooks | None = None, executors: Mapping[str, Executor] | None = None,
        scheduler_url: str | None = None, abort_file: Path | None = None, events: EventSink | None = None,
        status_interval: float = 0.25, output_limit: int = 4096, durable: bool = False,
    ) -> None:
        check_name(run_uid, "run uid")
        self.workflow = workflow
        self.uid = run_uid
        self.paths = RunPaths(state_dir, run_uid)
        self.abort_file = abort_file or self.paths.abort_file
        self.hooks = hooks or Hooks()
        self.masker = Masker(self.hooks.mask)
        self.executors: Mapping[str, Executor] = executors if executors is not None else default_executors()
        self.scheduler_url = scheduler_url
        self.events = events
        self.status_interval = status_interval
        self.output_limit = output_limit
        self.store = open_store(self.paths.store, durable=durable)
        self.needs = workflow.requirements()
        # Steps by id, read once per instance: `Workflow.step` goes through Pydantic's private attributes.
        self._steps: dict[str, Step] = {step.id: step for step in workflow.steps}
        self.instances = list(self.needs)
        required = {dep for deps in self.needs.values() for dep in deps}
        self.sinks = [inst for inst in self.instances if inst not in required]
        self._lock = threading.Lock()
        self.scope = RunScope(workflow, self.hooks, self.masker, self._lock)
        self._abort = threading.Event()
        self._finished = threading.Event()
        self._records: dict[Instance, dict[str, Any]] = {}
        self._counts: Counter[str] = Counter()
        self._running: dict[Instance, None] = {}
        self._failures: list[dict[str, str]] = []
        self._resumed: set[Instance] = set()
        self._seq = 0
        self._dirty = True
        self._worker: StepWorker | None = None
        self._requirement_tasks: dict[Instance, list[StepTask]] = {}
        self._tasks: dict[Instance, StepTask] = {}
        self._output_dir = self.paths.output_dir
        self._error = ""
        self._work_dir = self.paths.work_dir
        self._run_record: dict[str, Any] = {}
        self._started_at = ""
        self._groups: dict[str, list[int]] = {}  # step -> the tolerance groups it is in
        for index, group in enumerate(workflow.tolerance):
            for step_id in group.steps:
                self._groups.setdefault(step_id, []).append(index)
        self._failed_in: dict[int, set[str]] = {}  # tolerance group -> targets with a tolerated failure
        self._excluded: dict[str, str] = {}  # target -> the instance whose tolerated failure excluded it

    # -- public ---------------------------------------------------------------------------------

    def abort(self) -> None:
        """Stop running steps, start nothing new; the rest of the run is marked aborted."""
        self._abort.set()
        worker = self._worker
        if worker is not None:
            worker.stop_requesting_work()

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def run(self) -> RunOutcome:
        """Run (or resume) to the end; blocks. Raises `AlreadyRunning` if another runner has it."""
        for directory in (self.paths.run_dir, self.paths.output_dir, self.paths.work_dir):
            directory.mkdir(parents=True, exist_ok=True)
        with self._exclusive():
            register(self)
            quiet = logging.getLogger("luigi-interface")
            previous_level = quiet.level
            quiet.setLevel(logging.CRITICAL)
            threads: list[threading.Thread] = []
            try:
                self._load()
                threads = self._start_threads()
                if self.abort_file.exists():
                    self._abort.set()
                if not self._abort.is_set():
                    try:
                        self._schedule()
                    except Exception as exc:  # luigid unreachable, a bug: the run fails with the reason
                        log.exception("run %s: scheduling failed", self.uid)
                        self._error = self.masker(f"scheduling failed: {type(exc).__name__}: {exc}")
                return self._finish()
            finally:
                self._finished.set()
                for thread in threads:
                    thread.join(timeout=5)
                quiet.setLevel(previous_level)
                unregister(self.uid)

    def requirement_tasks(self, inst: Instance) -> list[StepTask]:
        """The Luigi tasks `inst` requires, built once per run (Luigi asks several times per task).

        Cached here, not on the task: Luigi shares task objects process-wide by parameters, and two
        runs of one uid in one process (tests, tools) may have different workflows.
        """
        tasks = self._requirement_tasks.get(inst)
        if tasks is None:
            tasks = [self.task(i) for i in self.needs[inst]]
            self._requirement_tasks[inst] = tasks
        return tasks

    def task(self, inst: Instance) -> StepTask:
        """The Luigi task of `inst`, built once per run: a wide step's requirement is named by each of
        its dependents, and every construction is a pass through Luigi's instance cache."""
        task = self._tasks.get(inst)
        if task is None:
            task = self._tasks[inst] = StepTask(run_uid=self.uid, step=inst.step, target=inst.target)
        return task

    # -- setup and teardown ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """An exclusive flock on the run's lock file: one runner per uid, and a liveness probe."""
        fd = os.open(self.paths.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AlreadyRunning(f"run {self.uid} is already being run by another process") from None
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            yield
        finally:
            os.close(fd)

    def _load(self) -> None:
        """Rebuild state from the store: finished instances, their variables, leftovers to stop."""
        existing = dict(self.store.steps(self.uid))
        fresh: dict[str, dict[str, Any]] = {}
        finished: list[dict[str, Any]] = []
        for inst in self.instances:
            step = self._steps[inst.step]
            record = existing.get(inst.key)
            if record is None:
                record = {
                    "step": inst.step, "target": inst.target, "type": step.type, "state": "pending", "attempts": 0,
                }
                fresh[inst.key] = record
            elif record.get("state") == "success" and self.store.is_done(self.uid, inst.key):
                finished.append(record)
            elif (record.get("tolerated") or record.get("excluded")) and self.store.is_done(self.uid, inst.key):
                if record.get("tolerated"):  # its target stays excluded, its groups keep counting it
                    self._excluded.setdefault(inst.target, inst.key)
                    for group in self._groups.get(inst.step, ()):
                        self._failed_in.setdefault(group, set()).add(inst.target)
            else:
                if record.get("state") == "running":
                    self._stop_leftover(inst, record)
                    self._resumed.add(inst)
                record = {**record, "state": "pending", "message": record.get("message", "")}
                fresh[inst.key] = record
            self._records[inst] = record
            self._counts[record["state"]] += 1
        for record in sorted(finished, key=lambda r: int(r.get("seq", 0))):
            self.scope.remember(record.get("target", ""), record.get("variables") or {})
            self._seq = max(self._seq, int(record.get("seq", 0)))
        if fresh:
            self.store.put_steps(self.uid, fresh)
        previous = self.store.run(self.uid) or {}
        self._started_at = previous.get("startedAt") or now_iso()
        self._run_record = {
            "uid": self.uid, "workflow": self.workflow.name, "phase": "Running", "total": len(self.instances),
            "startedAt": self._started_at, "finishedAt": None, "message": "", "pid": os.getpid(),
            "runs": int(previous.get("runs", 0)) + 1, "scheduler": self.scheduler_url or "local",
        }
        self.store.put_run(self.uid, self._run_record)
        self._event({"event": "run", "phase": "Running", "resumed": bool(previous)})

    def _stop_leftover(self, inst: Instance, record: Mapping[str, Any]) -> None:
        pgid = record.get("pgid")
        if isinstance(pgid, int) and pgid > 1 and kill_leftover(pgid, f"{self.uid}/{inst.key}"):
            log.warning("run %s: stopped the leftover processes of %s (process group %d)", self.uid, inst.key, pgid)

    def _start_threads(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._status_loop, name="run-status", daemon=True)]
        threads.append(threading.Thread(target=self._abort_loop, name="run-abort", daemon=True))
        for thread in threads:
            thread.start()
        return threads

    def _abort_loop(self) -> None:
        """Poll the abort file: the operator's way to abort a runner that is not its child."""
        while not self._finished.wait(0.2):
            if not self._abort.is_set() and self.abort_file.exists():
                log.info("run %s: abort requested (%s)", self.uid, self.abort_file)
                self.abort()

    def _status_loop(self) -> None:
        while not self._finished.wait(self.status_interval):
            if self._dirty:
                self._write_status()

    def _schedule(self) -> None:
        scheduler: Any
        scheduler = luigi.rpc.RemoteScheduler(self.scheduler_url) if self.scheduler_url else FastScheduler()
        worker = StepWorker(scheduler, worker_id=f"stead-run:{self.uid}", threads=self.workflow.parallelism)
        self._worker = worker
        if self._abort.is_set():
            worker.stop_requesting_work()
        with worker:
            worker.add(RunTask(run_uid=self.uid))
            worker.run()
        self._worker = None

    def _finish(self) -> RunOutcome:
        aborted = self._abort.is_set()
        closing: dict[str, dict[str, Any]] = {}
        now = now_iso()
        with self._lock:
            failed = any(r["state"] == "failure" and not r.get("tolerated") for r in self._records.values())
            for inst, record in self._records.items():
                if record["state"] in FINAL_STEP_STATES:
                    continue
                if aborted:
                    update = {"state": "aborted", "message": "run aborted before this step finished", "finishedAt": now}
                elif failed:
                    update = {"state": "skipped", "message": "not run: the run failed before this step"}
                else:
                    reason = self._error or "the scheduler did not hand it to this runner"
                    update = {"state": "skipped", "message": f"not run: {reason}"}
                new = {**record, **update}
                self._counts[record["state"]] -= 1
                self._counts[new["state"]] += 1
                self._records[inst] = new
                closing[inst.key] = new
            counts = dict(self._counts)
        if closing:
            self.store.put_steps(self.uid, closing)
        total = len(self.instances)
        with self._lock:
            tolerated = sum(1 for r in self._records.values() if r.get("tolerated") or r.get("excluded"))
        phase: RunPhase
        if counts.get("success", 0) == total:
            phase, message = "Succeeded", f"{total} of {total} steps succeeded"
        elif not aborted and counts.get("success", 0) + tolerated == total:
            out = ", ".join(sorted(self._excluded))
            phase, message = "Succeeded", (f"{counts.get('success', 0)} of {total} steps succeeded; "
                                           f"within the groups' fault tolerance, out of the run: {out}")
        elif aborted:
            phase, message = "Aborted", f"aborted: {counts.get('success', 0)} of {total} steps succeeded"
        else:
            first = self._failures[0] if self._failures else None
            phase = "Failed"
            if first:
                message = f"step {first['instance']} failed: {first['message']}"
            else:
                message = self._error or f"{total - counts.get('success', 0)} steps were not run"
        self._run_record.update(phase=phase, finishedAt=now, message=message)
        self.store.put_run(self.uid, self._run_record)
        self._write_status()
        self._event({"event": "run", "phase": phase, "message": message})
        return RunOutcome(self.uid, phase, message, {k: v for k, v in counts.items() if v})

    # -- status ----------------------------------------------------------------------------------

    def _event(self, event: dict[str, Any]) -> None:
        if self.events is None:
            return
        event["run"] = self.uid
        event["time"] = now_iso()
        with self._lock:
            event["done"] = self._counts["success"]
        event["total"] = len(self.instances)
        self.events(event)

    def progress(self) -> dict[str, Any]:
        """The summary the operator reads (status.json): bounded, whatever the size of the run."""
        with self._lock:
            self._dirty = False
            counts = {state: n for state, n in self._counts.items() if n}
            running = [inst.key for inst in itertools.islice(self._running, 20)]
            failures = self._failures[:20]
        record = self._run_record
        return {
            "run": self.uid, "workflow": self.workflow.name, "phase": record.get("phase", "Running"),
            "message": record.get("message", ""), "pid": os.getpid(),
            "startedAt": record.get("startedAt"), "finishedAt": record.get("finishedAt"), "updatedAt": now_iso(),
            "progress": {"done": counts.get("success", 0), "total": len(self.instances)},
            "counts": counts, "running": running, "failures": failures,
        }

    def _write_status(self) -> None:
        data = json.dumps(self.progress(), separators=(",", ":")).encode()
        tmp = self.paths.status_file.with_suffix(f".tmp{threading.get_ident()}")
        tmp.write_bytes(data)
        os.replace(tmp, self.paths.status_file)

    def _commit(self, inst: Instance, record: dict[str, Any], done: bool = False) -> None:
        """Record a state change: memory, LMDB (with the Target when `done`), the event stream."""
        with self._lock:
            old = self._records[inst]["state"]
            new = record["state"]
            self._counts[old] -= 1
            self._counts[new] += 1
            self._records[inst] = record
            if new == "running":
                self._running[inst] = None
            else:
                self._running.pop(inst, None)
            if new == "failure":
                self._failures.append({"instance": inst.key, "message": str(record.get("message", ""))[:500]})
            self._dirty = True
        self.store.put_step(self.uid, inst.key, record, done=done)
        event = {"event": "step", "step": inst.step, "target": inst.target, "state": record["state"],
                 "attempt": record.get("attempts", 0)}
        if record["state"] != "running":
            event["exitCode"] = record.get("exitCode")
            event["message"] = record.get("message", "")
        self._event(event)

    # -- one instance ----------------------------------------------------------------------------

    def execute(self, inst: Instance) -> None:
        """Run one instance with its retries; raise to tell Luigi it did not succeed."""
        step = self._steps[inst.step]
        with self._lock:
            excluded_by = self._excluded.get(inst.target) if inst.target else None
        if excluded_by is not None:  # its target failed within a group's tolerance: nothing more runs there
            self._commit(inst, {**self._records[inst], "state": "skipped", "excluded": True, "finishedAt": now_iso(),
                                "message": f"not run: {inst.target} is out of the run since {excluded_by} failed"},
                         done=True)
            return
        executor = self.executors.get(step.type)
        record = self._records[inst]
        attempt = int(record.get("attempts", 0))
        if inst in self._resumed and attempt > 0:
            attempt -= 1  # the interrupted attempt is run again under its own number (a Job is found again)
        started_at = (record.get("startedAt") if inst in self._resumed else None) or now_iso()
        for round_ in range(step.retries + 1):
            attempt += 1
            if self._abort.is_set():
                self._commit(inst, {**self._records[inst], "state": "aborted", "message": "run aborted",
                                    "finishedAt": now_iso()})
                raise StepAborted(f"{inst.key}: aborted")
            running = {
                "step": inst.step, "target": inst.target, "type": step.type, "state": "running",
                "attempts": attempt, "startedAt": started_at, "finishedAt": None, "exitCode": None,
                "message": "", "output": "",
            }
            self._commit(inst, running)
            output = StepOutput(self._output_dir, inst.key, self.masker, self.output_limit, attempt)
            try:
                if executor is None:
                    raise ParameterError(f"unknown step type {step.type!r}")
                result = self._attempt(inst, step, executor, attempt, output)
            except StepAborted:
                self._close(inst, running, output, "aborted", "aborted while running", None, {})
                raise
            except StepFailed as failure:
                message = self.masker(failure.message)
                last = round_ == step.retries or isinstance(failure, ParameterError) or self._abort.is_set()
                if not last:
                    output(f"attempt {attempt} failed: {message}; retrying", "stderr")
                    output.close()
                    if self._abort.wait(step.retry_interval_seconds):
                        self._close(inst, running, output, "aborted", "aborted between attempts", None, {})
                        raise StepAborted(f"{inst.key}: aborted") from None
                    continue
                tolerated = self._tolerate(inst)
                self._close(inst, running, output, "failure", message + (f" ({tolerated})" if tolerated else ""),
                            failure.exit_code, masked_details(failure.details, self.masker), tolerated=bool(tolerated))
                if tolerated:
                    return
                self._on_failure()
                raise StepFailed(f"{inst.key}: {message}", failure.exit_code) from None
            except Exception as exc:  # an executor's or a hook's bug: a failure, not a crash
                message = self.masker(f"{type(exc).__name__}: {exc}")
                self._close(inst, running, output, "failure", message, None, {})
                self._on_failure()
                raise StepFailed(f"{inst.key}: {message}") from None
            values = {k: self.masker(v) for k, v in result.variables.items()}
            with self._lock:
                self._seq += 1
                seq = self._seq
                self.scope.remember(inst.target, values)
            self._close(inst, running, output, "success", self.masker(result.message), result.exit_code,
                        masked_details(result.details, self.masker), values=values, seq=seq)
            return

    def _attempt(self, inst: Instance, step: Step, executor: Executor, attempt: int, output: StepOutput) -> StepResult:
        workdir = self._work_dir / inst.key  # created by the executors that use it
        plain = self.scope.visible(inst.target)
        variables = StepVariables(plain, self.workflow.secrets, self.scope.reveal)
        parameters = self.scope.render(step.parameters, variables)
        timeout = step.timeout_seconds
        ctx = StepContext(
            run_uid=self.uid, step_id=inst.step, step_type=step.type, target=inst.target, attempt=attempt,
            parameters=parameters, variables=variables, plain_variables=plain, workdir=workdir,
            deadline=None if timeout is None else time.monotonic() + timeout, timeout=timeout,
            abort=self._abort, output=output, mask=self.masker,
            note_process=lambda pgid: self._note_process(inst, pgid), marker=f"{self.uid}/{inst.key}",
            safe_cut=self.masker.safe_cut, mask_reach=self.masker.longest,
        )
        return executor.run(ctx)

    def _note_process(self, inst: Instance, pgid: int) -> None:
        with self._lock:
            record = {**self._records[inst], "pgid": pgid}
            self._records[inst] = record
        self.store.put_step(self.uid, inst.key, record)

    def _close(
        self, inst: Instance, running: dict[str, Any], output: StepOutput, state: str, message: str,
        exit_code: int | None, details: Mapping[str, Any], values: Mapping[str, str] | None = None, seq: int = 0,
        tolerated: bool = False,
    ) -> None:
        output.close()
        record = {**running, "state": state, "finishedAt": now_iso(), "exitCode": exit_code,
                  "message": message, "output": output.text()}
        if tolerated:
            record["tolerated"] = True
        record.pop("pgid", None)
        if details:
            record["details"] = dict(details)
        if values:
            record["variables"] = dict(values)
        if seq:
            record["seq"] = seq
        self._commit(inst, record, done=state == "success" or tolerated)

    def _tolerate(self, inst: Instance) -> str:
        """Whether the final failure of `inst` is within the tolerance of every group of its step (then
        its target is excluded from the rest of the run, and the reason is returned), else ""."""
        groups = self._groups.get(inst.step)
        if not groups or not inst.target:
            return ""
        with self._lock:
            for index in groups:
                failed = self._failed_in.get(index, set()) | {inst.target}
                if len(failed) > self.workflow.tolerance[index].may_fail:
                    return ""
            for index in groups:
                self._failed_in.setdefault(index, set()).add(inst.target)
            self._excluded.setdefault(inst.target, inst.key)
            allowed = min(self.workflow.tolerance[index].may_fail for index in groups)
        return f"tolerated: up to {allowed} target(s) of its group may fail; {inst.target} is out of the run"

    def _on_failure(self) -> None:
        if not self.workflow.continue_on_failure and self._worker is not None:
            self._worker.stop_requesting_work()



def run_workflow(workflow: Workflow, run_uid: str, state_dir: Path, **options: Any) -> RunOutcome:
    """Run in this process (tests, tools); the operator runs `python -m pipelines run` instead."""
    return Runner(workflow, run_uid, state_dir, **options).run()
