"""The `exec` and `setvar` step types, over a pluggable `ScriptBackend`."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from typing import Protocol

from pipelines.executors.base import (
    ParameterError,
    StepContext,
    StepFailed,
    StepResult,
    parameter,
)

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


SETVAR_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*=(.*)$")


LineSink = Callable[[str, str], None]


class ScriptBackend(Protocol):
    """Runs one script to completion; returns the exit code; output goes to `on_line`."""

    def execute(
        self, ctx: StepContext, interpreter: str, script: str, env: dict[str, str], on_line: LineSink
    ) -> int: ...

    def runs_as(self) -> str:
        """Who the scripts run as, for a failure's message: ``uid N (name)`` and where, when not here.
        A script that cannot write where its author expected fails with a bare exit code otherwise
        (a root operator runs scripts as an unprivileged uid of the namespace's own)."""
        ...


def script_env(ctx: StepContext) -> dict[str, str]:
    """The script's own variables: exported variables, then the step's ``env``, then Stead's."""
    env: dict[str, str] = {}
    if parameter(ctx, "exportVariables", bool, True):
        env.update({k: v for k, v in ctx.plain_variables.items() if ENV_NAME.match(k)})
    extra = parameter(ctx, "env", dict, {})
    for name, value in extra.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ParameterError(f"exec step {ctx.step_id!r}: env name {name!r} is not a valid environment name")
        env[name] = value if isinstance(value, str) else str(value)
    env.update(
        STEAD_RUN=ctx.run_uid, STEAD_STEP=ctx.step_id, STEAD_TARGET=ctx.target, STEAD_ATTEMPT=str(ctx.attempt),
    )
    return env


class ScriptExecutor:
    """The `exec` step type."""

    def __init__(self, backend: ScriptBackend) -> None:
        self.backend = backend

    def run(self, ctx: StepContext) -> StepResult:
        code = self._run(ctx, lambda line, stream: None)
        if code != 0:
            raise self._failed(ctx, code)
        return StepResult(exit_code=0)

    def _failed(self, ctx: StepContext, code: int) -> StepFailed:
        """The failure of a script that exited with `code`, naming the user it ran as (also in the
        step's log, with where that user may write)."""
        who = self.backend.runs_as()
        ctx.output(f"the script exited with code {code}; it ran as {who}: it may write its working directory "
                   "(HOME) and /tmp, and elsewhere only what that user may", "stderr")
        return StepFailed(f"script exited with code {code} (ran as {who})", exit_code=code)

    def _run(self, ctx: StepContext, on_line: LineSink) -> int:
        script = parameter(ctx, "script", str)
        interpreter = parameter(ctx, "interpreter", str, "sh")
        if interpreter not in INTERPRETERS:
            raise ParameterError(f"step {ctx.step_id!r}: interpreter must be one of {', '.join(INTERPRETERS)}")
        return self.backend.execute(ctx, interpreter, script, script_env(ctx), on_line)


class SetVarExecutor(ScriptExecutor):
    """The `setvar` step type: output lines ``name=value`` set the variables the step names."""

    def run(self, ctx: StepContext) -> StepResult:
        names = parameter(ctx, "variables", list)
        wanted = {str(n) for n in names}
        found: dict[str, str] = {}

        def collect(line: str, stream: str) -> None:
            if stream != "stdout":
                return
            match = SETVAR_LINE.match(line)
            if match and match.group(1) in wanted:
                found[match.group(1)] = match.group(2).strip()

        code = self._run(ctx, collect)
        if code != 0:
            raise self._failed(ctx, code)
        missing = sorted(wanted - set(found))
        if missing:
            raise StepFailed(f"the script did not set {', '.join(missing)}", exit_code=0)
        return StepResult(exit_code=0, variables=found, message=f"set {', '.join(sorted(found))}")


INTERPRETERS: dict[str, list[str]] = {
    "sh": ["/bin/sh"],
    "bash": [shutil.which("bash") or "/bin/bash"],
    "python": [shutil.which("python3") or sys.executable],
}
