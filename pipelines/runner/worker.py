# Luigi 3.8 ships py.typed but leaves most of its API unannotated; the calls into it are checked
# at their boundaries here instead.
# mypy: disable-error-code="no-untyped-call"
"""`StepWorker`: Luigi's worker loop, running each task in a thread of a pool.

The stock worker runs tasks in forked processes as soon as it has more than one slot. Forking
costs milliseconds, and completion state would have to travel back through Targets anyway; our
steps wait on processes, sockets and the API server, not on the CPU. `StepWorker` keeps Luigi's
worker loop (scheduling, dependency checks, reporting to the scheduler, luigid included) but runs
each task in a thread of a pool of `Workflow.parallelism` threads.
"""

from __future__ import annotations

import queue
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import luigi
import luigi.rpc
import luigi.worker


class _ResultQueue(queue.SimpleQueue[Any]):
    """The worker's result queue, between threads (the stock one is a multiprocessing pipe)."""

    def close(self) -> None:
        pass

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return super().get(block, timeout)


class _ThreadTask(luigi.worker.ContextManagedTaskProcess):
    """A Luigi "task process" that runs in a pool thread instead of a forked process."""

    def __init__(self, pool: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> None:
        super().__init__(None, *args, **kwargs)
        self._pool = pool
        self._future: Future[None] | None = None

    def start(self) -> None:
        self._future = self._pool.submit(self.run)

    def is_alive(self) -> bool:
        return self._future is not None and not self._future.done()

    @property
    def exitcode(self) -> int | None:
        if self._future is None or not self._future.done():
            return None
        return 1 if self._future.exception() is not None else 0

    def terminate(self) -> None:
        """Threads cannot be killed: the runner's abort flag stops what the step started."""


class StepWorker(luigi.worker.Worker):
    def __init__(self, scheduler: Any, worker_id: str, threads: int) -> None:
        super().__init__(
            scheduler=scheduler, worker_id=worker_id, worker_processes=threads,
            no_install_shutdown_handler=True, send_failure_email=False, wait_interval=0.2, wait_jitter=0.0,
            check_unfulfilled_deps=True, max_reschedules=0,
        )
        self._task_result_queue = _ResultQueue()  # type: ignore[assignment]
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="step")

    def _create_task_process(self, task: luigi.Task) -> _ThreadTask:
        """With one slot, run the task inline like stock Luigi does: no thread hand-off per step."""
        reporter = luigi.worker.TaskStatusReporter(self._scheduler, task.task_id, self._id, None)
        return _ThreadTask(
            self._pool, task, self._id, self._task_result_queue, reporter,
            use_multiprocessing=self.worker_processes > 1, worker_timeout=0, check_unfulfilled_deps=True,
            check_complete_on_run=False, task_completion_cache=None,
        )

    def stop_requesting_work(self) -> None:
        """Finish what runs and take nothing new (abort, first failure)."""
        self._start_phasing_out()

    def __exit__(self, *exc: object) -> bool:
        result = bool(super().__exit__(*exc))
        self._pool.shutdown(wait=True)
        return result
