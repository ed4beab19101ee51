"""Running a workflow on Luigi (the front door of `pipelines.runner`).

- `engine`: `Runner`, one run from its store to its outcome (`run_workflow` for one call);
- `attempt`: what one attempt of an instance sees and leaves (variables, masked output, details);
- `tasks`: the Luigi tasks (`StepTask` per instance, `RunTask` root) and their run-store Targets;
- `scheduler`: `FastScheduler`, Luigi's local scheduler with O(1) `get_work`;
- `worker`: `StepWorker`, Luigi's worker loop running tasks in a thread pool.
"""

from pipelines.runner.engine import AlreadyRunning, Runner, RunOutcome, now_iso, run_workflow
from pipelines.runner.scheduler import FastScheduler
from pipelines.runner.tasks import RUN_DONE_KEY, RunTask, StepTask
from pipelines.runner.worker import StepWorker

__all__ = [
    "RUN_DONE_KEY", "AlreadyRunning", "FastScheduler", "RunOutcome", "RunTask", "Runner", "StepTask", "StepWorker",
    "now_iso", "run_workflow",
]
