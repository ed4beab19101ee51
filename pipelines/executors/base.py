"""The one interface every step type implements, and what the engine hands to it.

An executor is called in a worker thread of the runner process with a `StepContext`: parameters
already rendered (macros, secrets), the variables visible to the step, a private working
directory, the attempt's deadline and the run's abort flag. It reports output line by line through
`ctx.output` (the engine masks, stores and tails it) and returns a `StepResult`, or raises
`StepFailed` / `StepAborted`. Retries, timing, records and events are the engine's business, so an
executor stays a small function of its parameters.

Executors must honour `ctx.abort` and `ctx.deadline` themselves (polling at least every few tenths
of a second): only they know how to stop what they started (a process group, a Job, a request).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class StepFailed(Exception):
    """The step ran and did not succeed (non-zero exit, unexpected status, timeout...)."""

    def __init__(self, message: str, exit_code: int | None = None, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.details = dict(details or {})


class StepAborted(Exception):
    """The run was aborted while this step ran; whatever it started has been stopped."""


class ParameterError(StepFailed):
    """The step's parameters are wrong: retrying cannot help."""


@dataclass
class StepResult:
    exit_code: int | None = None
    variables: dict[str, str] = field(default_factory=dict)
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepContext:
    run_uid: str
    step_id: str
    step_type: str
    target: str
    attempt: int
    parameters: dict[str, Any]
    variables: Mapping[str, str]
    """Everything the step may read: inputs, values set so far, secrets (decrypted on access)."""
    plain_variables: Mapping[str, str]
    """The same without secrets: what may be exported wholesale (an exec step's environment)."""
    workdir: Path
    deadline: float | None
    """`time.monotonic()` value at which the attempt times out, or None."""
    timeout: float | None
    abort: threading.Event
    output: Callable[[str, str], str]
    """``output(line, stream)`` stores one line of output and returns it masked."""
    mask: Callable[[str], str]
    note_process: Callable[[int], None] = lambda pgid: None
    """Record the process group of a local process, so a restarted run can stop a leftover."""
    marker: str = ""
    """``<uid>/<step@target>``: exported to local processes so leftovers can be recognised."""
    safe_cut: Callable[[str, int], int] = lambda text, at: at
    """Where to cut a too long line near `at` without splitting a secret (`masking.Masker.safe_cut`)."""
    mask_reach: int = 0
    """How much text past a cut `safe_cut` needs to see (the longest masked form)."""

    @property
    def key(self) -> str:
        return f"{self.step_id}@{self.target}" if self.target else self.step_id

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def wait(self, seconds: float) -> None:
        """Sleep up to `seconds`, cut short by the deadline; raise `StepAborted` on abort."""
        limit = seconds
        remaining = self.remaining()
        if remaining is not None:
            limit = min(limit, max(remaining, 0.0))
        if self.abort.wait(max(limit, 0.0)):
            raise StepAborted(f"{self.key}: aborted")

    def check(self) -> None:
        if self.abort.is_set():
            raise StepAborted(f"{self.key}: aborted")


class Executor(Protocol):
    """A step type. Implementations are stateless or thread-safe: instances run concurrently."""

    def run(self, ctx: StepContext) -> StepResult: ...


def parameter(ctx: StepContext, name: str, kind: type | tuple[type, ...], default: Any = ..., ) -> Any:
    """A parameter of the expected type, or a `ParameterError` that names it."""
    if name not in ctx.parameters:
        if default is ...:
            raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: parameter {name!r} is required")
        return default
    value = ctx.parameters[name]
    if not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ParameterError(
            f"{ctx.step_type} step {ctx.step_id!r}: parameter {name!r} must be {want}, not {type(value).__name__}"
        )
    return value


def number(ctx: StepContext, name: str, default: float) -> float:
    """A number that may arrive as a string (after macro rendering everything is text)."""
    value = ctx.parameters.get(name, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: parameter {name!r} must be a number") from None
