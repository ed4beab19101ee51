"""Workflows as data: a DAG of steps, each run once per target.

The operators translate runbooks (Calm) and deployment graphs (Fuel) into a `Workflow`; this module
knows nothing of either. A workflow is checked completely before anything runs (unknown
dependencies, cycles, duplicate ids), so that a broken definition fails at once with a message that
names the steps, instead of half-way through a run with side effects already done.

One step on one target is an *instance*, the unit that Luigi schedules, that a run records and
that a restarted run skips when it finished. Its key is ``step@target`` (or ``step`` when the step
has no target), which is why ``@`` and ``/`` are not allowed in ids and target names.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic.alias_generators import to_camel

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}$"
"""Step ids, target names and run uids: safe as path components and LMDB key parts."""
_NAME = re.compile(NAME_PATTERN)

StepState = Literal["pending", "running", "success", "failure", "aborted", "skipped"]
STEP_STATES: tuple[StepState, ...] = ("pending", "running", "success", "failure", "aborted", "skipped")
FINAL_STEP_STATES = frozenset({"success", "failure", "aborted", "skipped"})

RunPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Aborted"]


def check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{what} {value!r} must match {NAME_PATTERN} (letters, digits, '_', '.', ':', '-')")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Dependency(_Model):
    """An edge: this step waits for `step`.

    `targets` says which instances of `step` an instance on target T waits for: ``same`` (the
    default) binds T to `step`'s instance on T when `step` runs on T and to all of its instances
    otherwise (Fuel's `requires` on the same node; a fan-in from untargeted steps); ``all`` waits
    for every instance (Fuel's cross-dependencies, Calm's "service S2 after all replicas of S1").
    """

    step: str
    targets: Literal["same", "all"] = "same"


class Step(_Model):
    """One node of the DAG.

    `parameters` go to the executor of `type` after macro rendering at step start. `target` is the
    list of targets (replicas, nodes) the step runs on, one instance each; empty means one
    untargeted instance. `retries` more attempts follow a failure, `retry_interval_seconds` apart;
    `timeout_seconds` bounds each attempt.
    """

    id: str
    type: str
    name: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    target: list[str] = Field(default_factory=list)
    depends_on: list[Dependency] = Field(default_factory=list)
    retries: int = Field(default=0, ge=0, le=100)
    retry_interval_seconds: float = Field(default=0.0, ge=0)
    timeout_seconds: float | None = Field(default=None, gt=0)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_name(value, "step id")

    @field_validator("target", mode="before")
    @classmethod
    def _target(cls, value: Any) -> Any:
        """A single target may be written as a string."""
        if value is None:
            return []
        return [value] if isinstance(value, str) else value

    @field_validator("target")
    @classmethod
    def _targets(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for target in value:
            check_name(target, "target")
            if target in seen:
                raise ValueError(f"target {target!r} is listed twice")
            seen.add(target)
        return value

    @field_validator("depends_on", mode="before")
    @classmethod
    def _deps(cls, value: Any) -> Any:
        """A dependency may be written as the bare id of the step it waits for."""
        if isinstance(value, list):
            return [{"step": item} if isinstance(item, str) else item for item in value]
        return value


@dataclass(frozen=True, slots=True, order=True)
class Instance:
    """One step on one target ("" for an untargeted step)."""

    step: str
    target: str = ""

    @property
    def key(self) -> str:
        return f"{self.step}@{self.target}" if self.target else self.step

    @classmethod
    def parse(cls, key: str) -> Instance:
        step, _, target = key.partition("@")
        return cls(step, target)

    def __str__(self) -> str:
        return self.key


class Tolerance(_Model):
    """Failures a group of steps may have without failing the run (Fuel's group fault tolerance).

    A final failure of an instance of `steps` is *tolerated* while at most `may_fail` distinct
    targets have failed among this group's instances: the failure is recorded, its target is
    excluded from the rest of the run (its later instances are skipped) and the instances waiting
    for it run on. One failure more fails the run as any failure does. A step in several groups
    is tolerated only if every one of them still has room.
    """

    steps: list[str] = Field(min_length=1)
    may_fail: int = Field(ge=0)


class Workflow(_Model):
    """A DAG of steps with its inputs.

    `variables` are the workflow's inputs; `targets` holds each target's own inputs (a replica's
    address, its index). `secrets` maps variable names to opaque references that the caller's
    `secret` hook turns into values, only when a step that uses them starts. `parallelism` bounds
    the instances running at once; with `continue_on_failure` false (the default) a failure stops
    the run from starting anything new, as a runbook expects; `tolerance` lets groups of steps fail
    on some of their targets without that (`Tolerance`).
    """

    name: str = ""
    variables: dict[str, str] = Field(default_factory=dict)
    targets: dict[str, dict[str, str]] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict)
    steps: list[Step]
    parallelism: int = Field(default=8, ge=1, le=256)
    continue_on_failure: bool = False
    tolerance: list[Tolerance] = Field(default_factory=list)
    _index: dict[str, Step] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _graph(self) -> Workflow:
        ids: dict[str, int] = {}
        for index, step in enumerate(self.steps):
            if step.id in ids:
                raise ValueError(f"steps[{index}].id: duplicate step id {step.id!r} (first at steps[{ids[step.id]}])")
            ids[step.id] = index
        for index, step in enumerate(self.steps):
            for dep in step.depends_on:
                if dep.step not in ids:
                    raise ValueError(f"steps[{index}] ({step.id!r}) depends on {dep.step!r}, which is not a step")
                if dep.step == step.id:
                    raise ValueError(f"steps[{index}] ({step.id!r}) depends on itself")
        cycle = find_cycle({s.id: [d.step for d in s.depends_on] for s in self.steps})
        if cycle:
            raise ValueError("dependency cycle (each step waits for the next): " + " -> ".join(cycle))
        for index, group in enumerate(self.tolerance):
            unknown = [step for step in group.steps if step not in ids]
            if unknown:
                raise ValueError(f"tolerance[{index}].steps: {', '.join(map(repr, unknown[:5]))} not steps")
        clash = sorted(set(self.secrets) & set(self.variables))
        if clash:
            raise ValueError(f"secrets and variables share names: {', '.join(clash)}")
        for name in self.targets:
            check_name(name, "target")
        self._index = {s.id: s for s in self.steps}
        return self

    def step(self, step_id: str) -> Step:
        return self._index[step_id]

    def instances(self) -> Iterator[Instance]:
        for step in self.steps:
            if step.target:
                for target in step.target:
                    yield Instance(step.id, target)
            else:
                yield Instance(step.id)

    def requirements(self) -> dict[Instance, list[Instance]]:
        """Every instance with the instances it waits for (see `Dependency` for the binding)."""
        by_step: dict[str, list[Instance]] = {}
        for inst in self.instances():
            by_step.setdefault(inst.step, []).append(inst)
        out: dict[Instance, list[Instance]] = {}
        steps = {s.id: s for s in self.steps}
        for step_id, insts in by_step.items():
            step = steps[step_id]
            for inst in insts:
                needs: list[Instance] = []
                for dep in step.depends_on:
                    upstream = by_step[dep.step]
                    same = Instance(dep.step, inst.target)
                    if dep.targets == "same" and inst.target and same.target in steps[dep.step].target:
                        needs.append(same)
                    else:
                        needs.extend(upstream)
                out[inst] = needs
        return out


K = TypeVar("K", bound=Hashable)


def find_cycle(graph: Mapping[K, Iterable[K]]) -> list[K]:
    """A cycle of `graph` (node -> nodes it depends on) as a closed path, or [] when it is a DAG.

    Iterative, so that a chain of thousands of steps does not hit the recursion limit. Any hashable
    nodes: a graph's expansion checks its instances by index and names only the cycle it finds.
    """
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    for root in graph:
        if color[root] != white:
            continue
        path: list[K] = [root]
        stack: list[Iterator[K]] = [iter(graph[root])]
        color[root] = grey
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                color[path.pop()] = black
                stack.pop()
                continue
            if color.get(nxt, black) == grey:
                return [*path[path.index(nxt):], nxt]
            if color.get(nxt) == white:
                color[nxt] = grey
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return []
