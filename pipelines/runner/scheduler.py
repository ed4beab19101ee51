# Luigi 3.8 ships py.typed but leaves most of its API unannotated; the calls into it are checked
# at their boundaries here instead.
# mypy: disable-error-code="no-untyped-call"
"""`FastScheduler`: Luigi's local scheduler with O(1) `get_work`.

Why not `luigi.build` with its local scheduler. Profiling stock Luigi 3.8 with cProfile on a chain
and on a wide DAG of 1,000 no-op tasks (``bench/workflow_overhead.py --profile``) puts ~90 % of the
time in `Scheduler.get_work`, called once per task, which is O(N) in the tasks it knows:

- `prune()` (the local scheduler is built with ``prune_on_get_work=True``) walks every task
  (`_prune_tasks`) and, through `inactivate_workers([])`, every task again;
- `count_pending()` walks every pending task and computes its upstream status (`_upstream_status`,
  ~N/2 calls per get_work on a chain: N^2/2 over a run);
- `is_trivial_worker()` filters every pending task, and the candidates are sorted (N log N) and
  each checked with `_schedulable` before one is handed out.

Hence 12 ms per task at 1,000 tasks, growing linearly. `FastScheduler` is a subclass that keeps
the stock state (so everything else, the visualiser API included, still works) plus two indexes
maintained in `add_task`: for each pending task the set of its unfinished dependencies, and a heap
of tasks whose dependencies are all done. `get_work` pops that heap; `count_pending` reads counters.
Per task the cost is O(its degree + log N).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any

from luigi.scheduler import Scheduler, SimpleTaskState
from luigi.task_status import DONE, PENDING, RUNNING


class _TaskState(SimpleTaskState):
    """Luigi's task state, but `get_worker` builds a `Worker` only for a worker it does not know: the
    stock one builds one on every call (for `setdefault`), and it is called on every `add_task` and
    `get_work`, three times per step."""

    def get_worker(self, worker_id: str) -> Any:
        worker = self._active_workers.get(worker_id)
        return worker if worker is not None else super().get_worker(worker_id)


class FastScheduler(Scheduler):
    """Luigi's scheduler with O(1) `get_work` and `count_pending` (see the module docstring).

    It serves workers whose tasks declare no resources (the runner's tasks declare none); a task
    with resources is still scheduled, ignoring them. It never retries failed tasks on its own:
    retries are the step's business, and a new run of the same uid retries what failed.
    """

    def __init__(self) -> None:
        super().__init__(prune_on_get_work=False, record_task_history=False, retry_delay=-1.0)
        state = _TaskState(self._config.state_path)
        state._metrics_collector = self._state._metrics_collector
        self._state = state
        self._ready: list[tuple[float, float, int, str]] = []
        self._blocked: dict[str, set[str]] = {}
        self._dependents: dict[str, set[str]] = {}
        self._seq = itertools.count()
        self._lock = threading.RLock()
        self._retry_policies: dict[tuple[tuple[str, Any], ...], Any] = {}
        stock_make_task = self._make_task

        def make_task(task_id: str, **kwargs: Any) -> Any:
            """The task `task_id` when it exists, else a new one: the stock `add_task` builds a new
            `Task` for every call (and one per dependency), only for `setdefault` to keep the
            existing one: two throwaway tasks per step, and on every report of a task with N
            dependencies, N more (its dependencies' placeholders)."""
            existing = self._state.get_task(task_id)
            return existing if existing is not None else stock_make_task(task_id=task_id, **kwargs)

        self._make_task = make_task  # type: ignore[assignment]  # Luigi declares its partial(Task)

    def _generate_retry_policy(self, task_retry_policy_dict: dict[str, Any]) -> Any:
        """The stock answer, once per distinct policy: it reads the configuration and builds a
        namedtuple on every `add_task`, and all of a run's tasks have the same one."""
        key = tuple(task_retry_policy_dict.items())
        policy = self._retry_policies.get(key)
        if policy is None:
            policy = self._retry_policies[key] = super()._generate_retry_policy(task_retry_policy_dict)
        return policy

    def add_task(self, **kwargs: Any) -> None:
        with self._lock:
            super().add_task(**kwargs)
            self._track(str(kwargs["task_id"]))

    def _track(self, task_id: str) -> None:
        state = self._state
        task = state.get_task(task_id)
        if task is None:
            return
        for dep in task.deps:
            self._dependents.setdefault(dep, set()).add(task_id)
        if task.status == DONE:
            self._blocked.pop(task_id, None)
            for child in self._dependents.get(task_id, ()):
                waiting = self._blocked.get(child)
                if waiting is not None and task_id in waiting:
                    waiting.discard(task_id)
                    if not waiting:
                        self._push(child)
        elif task.status == PENDING:
            waiting = set()
            for dep in task.deps:
                dep_task = state.get_task(dep)
                if dep_task is None or dep_task.status != DONE:
                    waiting.add(dep)
            self._blocked[task_id] = waiting
            if not waiting:
                self._push(task_id)

    def _push(self, task_id: str) -> None:
        task = self._state.get_task(task_id)
        if task is not None:
            heapq.heappush(self._ready, (-float(task.priority), float(task.time), next(self._seq), task_id))

    def count_pending(self, worker: str) -> dict[str, Any]:
        with self._lock:
            state = self._state
            pending = state.get_active_task_count_for_status(PENDING)
            running = [
                {"task_id": t.id, "worker": t.worker_running} for t in state.get_active_tasks_by_status(RUNNING)
            ]
            return {
                "n_pending_tasks": pending,
                "n_unique_pending": pending,
                "n_pending_last_scheduled": pending,
                "worker_state": state.get_worker(worker).state,
                "running_tasks": running,
            }

    def get_work(
        self, host: str | None = None, assistant: bool = False, current_tasks: list[str] | None = None,
        worker: str | None = None, **kwargs: Any,
    ) -> dict[str, Any]:
        assert worker is not None
        with self._lock:
            record = self._update_worker(worker, worker_reference={"host": host}, get_work=True)
            reply = self.count_pending(worker)
            reply["task_id"] = None
            if not record.enabled or self._paused:
                return reply
            passed_over: list[tuple[float, float, int, str]] = []
            chosen = None
            while self._ready:
                entry = heapq.heappop(self._ready)
                task = self._state.get_task(entry[3])
                if task is None or task.status != PENDING or self._blocked.get(task.id):
                    continue  # stale: already taken, done, or blocked again
                if worker not in task.workers and not (assistant and task.runnable):
                    passed_over.append(entry)
                    continue
                chosen = task
                break
            for entry in passed_over:
                heapq.heappush(self._ready, entry)
            if chosen is None:
                return reply
            self.update_metrics_task_started(chosen)
            self._state.set_status(chosen, RUNNING, self._config)
            chosen.worker_running = worker
            chosen.resources_running = dict(chosen.resources)
            chosen.time_running = time.time()
            self._update_task_history(chosen, RUNNING, host=host)
            reply.update(
                task_id=chosen.id, task_family=chosen.family, task_module=getattr(chosen, "module", None),
                task_params=chosen.params,
            )
            return reply
