"""The workflow engine on Luigi (runbooks and deployment graphs run here).

Generic by design: it knows nothing of blueprints or graphs and never imports `operators` (an
import-linter contract checks it). The operators translate what they run into a `Workflow`: a DAG
of steps (id, type, parameters, target, retries, timeout), each step run once per target.

Each instance (step on target) is a Luigi task whose output is a Target in the LMDB run store,
keyed by the run's uid: started again after a crash, a kill, a failure or an abort, a run skips
what finished and repeats none of its side effects. Runs execute in their own process
(``python -m pipelines run``), on Luigi's worker with an O(1) local scheduler, or on a central
``luigid``.

Where to look:

- `pipelines.model`: `Workflow`, `Step`, `Dependency`, `Instance`;
- `pipelines.control`: what the operator calls (prepare, start, watch, abort, read a run);
- `pipelines.runner`: `Runner` (the engine), `FastScheduler`, `StepWorker`, the Luigi tasks;
- `pipelines.executors`: the `Executor` interface and the step types (exec, setvar, http, delay,
  noop, kubernetes), `LocalProcess` and `KubernetesJob` script backends;
- `pipelines.hooks`: the caller's render / secret / mask hooks, sealed per-run secrets;
- `pipelines.store`, `pipelines.paths`: the run store and the run's files.
"""
