"""What one attempt of an instance sees and leaves: its variables, its output, its details.

`Runner` (engine.py) drives a run: its store, its threads, Luigi. Everything here is about the
values that pass through a step, and so about masking: the variables a step may read (plain values
and secrets revealed only when looked up), the values instances set for later ones (`RunScope`),
the output a step prints (masked, logged in full, kept as a bounded tail) and the details it
returns. Kept apart from the engine so that the masking paths can be read (and benchmarked, see
bench/masking.py) without the run's machinery.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pipelines.hooks import Hooks, Masker
from pipelines.masking import Carry
from pipelines.model import Workflow


class StepOutput:
    """One attempt's output: masked lines appended to the instance's log file, and a bounded tail."""

    def __init__(self, directory: Path, key: str, mask: Masker, limit: int, attempt: int) -> None:
        self.directory, self.key, self.mask, self.limit, self.attempt = directory, key, mask, limit, attempt
        self.carries: dict[str, Carry] = {}  # per stream: a value split over lines is masked on both
        self.tail: deque[str] = deque()
        self.size = 0
        self.dropped = 0
        self.lock = threading.Lock()
        self._file: Any = None

    def __call__(self, line: str, stream: str) -> str:
        with self.lock:
            masked = self.mask(line.rstrip("\r\n"), self.carries.setdefault(stream, Carry()))
            if self._file is None:
                self._file = open(self.directory / f"{self.key}.log", "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - line-buffered: live
                if self.attempt > 1:
                    self._file.write(f"--- attempt {self.attempt} ---\n")
            self._file.write(masked + "\n")
            self.tail.append(masked)
            self.size += len(masked) + 1
            while self.size > self.limit and len(self.tail) > 1:
                self.size -= len(self.tail.popleft()) + 1
                self.dropped += 1
        return masked

    def text(self) -> str:
        with self.lock:
            body = "\n".join(self.tail)
            if len(body) > self.limit:
                body = body[-self.limit:]
            if self.dropped:
                return f"[... {self.dropped} earlier lines: see the full output]\n{body}"
            return body

    def close(self) -> None:
        with self.lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class StepVariables(Mapping[str, str]):
    """What a step sees: a snapshot of plain values, and secrets revealed only when looked up."""

    def __init__(self, plain: dict[str, str], secrets: Mapping[str, str], reveal: Callable[[str], str]) -> None:
        self.plain, self._secrets, self._reveal = plain, secrets, reveal
        self._revealed: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        try:
            return self.plain[name]
        except KeyError:
            ref = self._secrets.get(name)
            if ref is None:
                raise
            value = self._revealed.get(name)
            if value is None:
                value = self._revealed[name] = self._reveal(ref)
            return value

    def __iter__(self) -> Iterator[str]:
        yield from self.plain
        yield from (name for name in self._secrets if name not in self.plain)

    def __len__(self) -> int:
        return len(self.plain) + sum(1 for name in self._secrets if name not in self.plain)


class RunScope:
    """The values a run's instances set, and the variables each instance sees.

    `lock` is the runner's: `visible` takes it, `remember` is called under it (with the sequence
    number of the setting instance), so a step never sees half of another's values.
    """

    def __init__(self, workflow: Workflow, hooks: Hooks, masker: Masker, lock: threading.Lock) -> None:
        self.workflow, self.hooks, self.masker, self._lock = workflow, hooks, masker, lock
        self._set_global: dict[str, str] = {}
        self._set_target: dict[str, dict[str, str]] = {}
        self._qualified: dict[str, str] = {}

    def remember(self, target: str, values: Mapping[str, str]) -> None:
        """Values set by an instance: its target's scope (or the workflow's), and ``target:name``."""
        if not values:
            return
        if target:
            self._set_target.setdefault(target, {}).update(values)
            self._qualified.update({f"{target}:{k}": v for k, v in values.items()})
        else:
            self._set_global.update(values)

    def visible(self, target: str) -> dict[str, str]:
        """Inputs < values set for the workflow < the target's inputs < values set on the target."""
        with self._lock:
            plain = dict(self.workflow.variables)
            plain.update(self._qualified)
            plain.update(self._set_global)
            if target:
                plain.update(self.workflow.targets.get(target, {}))
                plain.update(self._set_target.get(target, {}))
        return plain

    def reveal(self, ref: str) -> str:
        value = self.hooks.secret(ref)
        self.masker.add(value)
        return value

    def render(self, value: Any, variables: Mapping[str, str]) -> Any:
        if isinstance(value, str):
            return self.hooks.render(value, variables)
        if isinstance(value, dict):
            if len(value) == 1 and isinstance(value.get("secretRef"), str):
                return self.reveal(value["secretRef"])
            return {k: self.render(v, variables) for k, v in value.items()}
        if isinstance(value, list):
            return [self.render(v, variables) for v in value]
        return value


def masked_details(details: Any, mask: Callable[[str], str]) -> Any:
    """A step's details (JSON-like) with every string masked: they are stored and shown too."""
    if isinstance(details, str):
        return mask(details)
    if isinstance(details, Mapping):
        return {str(k): masked_details(v, mask) for k, v in details.items()}
    if isinstance(details, list | tuple):
        return [masked_details(v, mask) for v in details]
    return details
