"""`delay` waits (``seconds``), honouring abort; `noop` does nothing (groups, stages, benchmarks)."""

from __future__ import annotations

from pipelines.executors.base import StepContext, StepFailed, StepResult, number


class DelayExecutor:
    def run(self, ctx: StepContext) -> StepResult:
        seconds = number(ctx, "seconds", 0.0)
        if ctx.timeout is not None and seconds > ctx.timeout:
            ctx.wait(ctx.timeout)
            raise StepFailed(f"timed out after {ctx.timeout:g}s")
        ctx.wait(seconds)
        return StepResult(message=f"waited {seconds:g}s")


class NoopExecutor:
    def run(self, ctx: StepContext) -> StepResult:
        return StepResult()
