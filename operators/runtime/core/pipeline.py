"""The object pipeline: a kind's phases from `Init` to `Provisioned`, run as function calls.

The steps between `Init` and `Provisioned` run in one process as plain function calls, and only
the outcome reaches the API server (docs/architecture.md, "Object pipelines and phases"). A kind
may *announce* a long phase, so that users see it while it runs; everything else stays in-process.

Everything here is pure (no Kubernetes, no Kopf): `plan` decides what an observed object needs,
`run` executes steps, `compose_status` and `status_patch` turn an outcome into the smallest
status write, or none at all.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

from pydantic import BaseModel
from typing_extensions import TypeVar

from operators.runtime.core import conditions as cond

if TYPE_CHECKING:  # the same layer; `services` reads `Observed` from here, and the store `StoredRecord`
    from operators.runtime.core.services import Services

INIT = "Init"
PROVISIONED = "Provisioned"


class PermanentError(Exception):
    """The object cannot progress until its spec changes: it ends in `Stalled`, not in a retry loop.

    `facts` are status fields the failing step still wants recorded (for example the list of
    compile errors and a domain state such as `Error`). `phase` is what the object shows instead of
    the phase whose step raised, when that phase would tell an untruth: an outcome that ends the
    object's work in failure (a ServiceInstance whose deployment failed is `Failed`, not
    `Realizing`). It names a failure, never `Provisioned`: Ready is False.
    """

    def __init__(self, reason: str, message: str, facts: Mapping[str, Any] | None = None,
                 phase: str | None = None) -> None:
        if phase == PROVISIONED:
            raise ValueError("a PermanentError is no success: its phase cannot be Provisioned")
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.facts = dict(facts or {})
        self.phase = phase


class TemporaryError(Exception):
    """Something outside the object is not ready yet: retried with exponential backoff.

    `waiting` marks the expected kind (an action still running, a blueprint still in use): its
    Event is Normal, not a Warning, because nothing is wrong.
    """

    def __init__(
        self, reason: str, message: str, delay: float | None = None, facts: Mapping[str, Any] | None = None,
        waiting: bool = False,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.delay = delay
        self.facts = dict(facts or {})
        self.waiting = waiting


@dataclass(frozen=True)
class Observed:
    """What the engine needs to know of one object, as read from the API server."""

    kind: str
    namespace: str
    name: str
    uid: str
    generation: int
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    resource_version: str = ""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Observed:
        meta = body.get("metadata") or {}
        return cls(
            kind=str(body.get("kind", "")),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation") or 0),
            labels=dict(meta.get("labels") or {}),
            spec=dict(body.get("spec") or {}),
            status=dict(body.get("status") or {}),
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(meta.get("finalizers") or ()),
            resource_version=str(meta.get("resourceVersion") or ""),
        )


SpecT = TypeVar("SpecT", bound=BaseModel, default=BaseModel, covariant=True)
ModelT = TypeVar("ModelT", bound=BaseModel)


def parse_spec(model: type[ModelT], spec: Mapping[str, Any]) -> ModelT:
    """A spec as its kind's model: the one place a spec mapping becomes a model (pydantic's
    `ValidationError` names the fields when it does not fit)."""
    return model.model_validate(dict(spec))


class ParsedSpec:
    """An object's spec parsed once, when a step first asks, and shared by the steps of one run.

    Lazily, so that a spec the model refuses fails where it failed before: in the step that asks
    for it (a kind's validate step turns that into `InvalidSpec`), not in the engine ahead of it.
    """

    def __init__(self) -> None:
        self._parsed: dict[type[BaseModel], BaseModel] = {}

    def of(self, spec: Mapping[str, Any], model: type[ModelT]) -> ModelT:
        found = self._parsed.get(model)
        if isinstance(found, model):
            return found
        parsed = self._parsed[model] = parse_spec(model, spec)
        return parsed


@dataclass(frozen=True)
class StepContext(Generic[SpecT]):
    """The input of one step: the object, the status facts produced by earlier steps of this run,
    and what the operator process provides (API access, the local store, Events), passed in
    rather than reached through globals so that steps stay testable without a cluster.

    `spec` is the object's spec as its kind's model, for a step declared with `spec_step`: parsed
    once per run (`parsed_spec` is shared by the run's steps), when first read.
    """

    obj: Observed
    facts: Mapping[str, Any]
    services: Services = None  # type: ignore[assignment]  # the operator always gives them; tests of pure steps need none
    spec_model: type[SpecT] | None = None
    parsed_spec: ParsedSpec = field(default_factory=ParsedSpec, compare=False, repr=False)

    @property
    def spec(self) -> SpecT:
        if self.spec_model is None:
            raise TypeError("this step declares no spec model: declare it with `spec_step(Model)`")
        return self.parsed_spec.of(self.obj.spec, self.spec_model)

    def typed(self, model: type[ModelT]) -> StepContext[ModelT]:
        """The same context, its spec read as `model` (the same parse, if another step read it so)."""
        return StepContext(obj=self.obj, facts=self.facts, services=self.services, spec_model=model,
                           parsed_spec=self.parsed_spec)


StepFn = Callable[[StepContext[Any]], Awaitable[Mapping[str, Any]]]
TypedStepFn = Callable[[StepContext[ModelT]], Awaitable[Mapping[str, Any]]]


def spec_step(model: type[ModelT]) -> Callable[[TypedStepFn[ModelT]], StepFn]:
    """Declare the spec model a step reads (its kind's `spec_model`): the step receives a
    `StepContext[model]`, whose `spec` is parsed once per run; `Kind` checks that its steps declare
    its own model. A step called directly (a test, the reconciler's cleanup) gets it too."""

    def bind(step: TypedStepFn[ModelT]) -> StepFn:
        @functools.wraps(step)
        async def bound(ctx: StepContext[Any]) -> Mapping[str, Any]:
            return await step(ctx if ctx.spec_model is model else ctx.typed(model))

        bound.spec_model = model  # type: ignore[attr-defined]  # read by `declared_model`
        return bound

    return bind


def declared_model(step: StepFn) -> type[BaseModel] | None:
    """The spec model a step declared with `spec_step`, or None."""
    model = getattr(step, "spec_model", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


@dataclass(frozen=True)
class Pipeline:
    """A kind's phases, and for each phase but the last, the step that moves an object out of it.

    `update_phase` is where a spec change (a new generation) restarts an object that was seen
    before; `announce` lists phases whose entry is written to status before their step runs,
    for steps long enough that a user should see them. `ended` lists the phases, beside the
    pipeline's own, of an object whose work is over without being Provisioned (a run that failed:
    `Failed`; `PermanentError.phase` puts it there): a spec change restarts it from `update_phase`,
    and its steps only confirm the end, so no phase of theirs is announced (a failed run never
    shows `Running` again).
    """

    phases: tuple[str, ...]
    steps: Mapping[str, StepFn]
    update_phase: str = INIT
    announce: frozenset[str] = field(default_factory=frozenset)
    ended: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if len(self.phases) < 2 or self.phases[0] != INIT or self.phases[-1] != PROVISIONED:
            raise ValueError(f"a pipeline runs from {INIT} to {PROVISIONED}: got {self.phases}")
        missing = [p for p in self.phases[:-1] if p not in self.steps]
        if missing:
            raise ValueError(f"phases without a step: {missing}")
        if self.update_phase not in self.phases[:-1]:
            raise ValueError(f"update phase {self.update_phase!r} is not a phase with a step")
        if self.ended & set(self.phases):
            raise ValueError(f"ended phases are not the pipeline's own: {sorted(self.ended & set(self.phases))}")


@dataclass(frozen=True)
class StoredRecord:
    """A Provisioned object as the local store keeps it."""

    uid: str
    generation: int
    spec: Mapping[str, Any]
    status: Mapping[str, Any]


@dataclass(frozen=True)
class Skip:
    """Nothing to do: no work, no API write."""

    why: str


@dataclass(frozen=True)
class Restore:
    """The store holds this generation as Provisioned but the object's status says otherwise."""

    status: Mapping[str, Any]


@dataclass(frozen=True)
class Adopt:
    """The object says it is Provisioned at this generation and the store has no record of it (the
    store was lost, or the object was made by another replica): its status is the truth, so the
    store takes it as it is, with no step run and nothing written (no flapping transition)."""


@dataclass(frozen=True)
class Run:
    """Run the steps from this phase on."""

    start: str


Plan = Skip | Restore | Adopt | Run


def plan(pipeline: Pipeline, obj: Observed, stored: StoredRecord | None) -> Plan:
    """Decide what an observed object needs. This is what makes restarts free."""
    status = obj.status
    at_generation = status.get("observedGeneration") == obj.generation
    conds = status.get("conditions") or []
    if stored is not None and stored.uid == obj.uid and stored.generation == obj.generation:
        if at_generation and status.get("phase") == PROVISIONED and cond.is_true(conds, cond.READY):
            return Skip("provisioned at this generation")
        return Restore(stored.status)
    if at_generation and cond.is_true(conds, cond.STALLED):
        return Skip("stalled at this generation: waiting for a spec change")
    phase = status.get("phase")
    if stored is None and at_generation and phase == PROVISIONED and cond.is_true(conds, cond.READY):
        return Adopt()
    if not at_generation:
        return Run(pipeline.update_phase if phase in pipeline.phases or phase in pipeline.ended else INIT)
    if phase in pipeline.phases and phase != PROVISIONED:
        return Run(str(phase))
    return Run(pipeline.update_phase if phase == PROVISIONED or phase in pipeline.ended else INIT)


@dataclass(frozen=True)
class Outcome:
    """Where a run ended: the phase reached, the facts gathered, and the error that stopped it."""

    phase: str
    facts: Mapping[str, Any]
    error: PermanentError | TemporaryError | None = None


EnterFn = Callable[[str, Mapping[str, Any]], Awaitable[None]]


async def run(
    pipeline: Pipeline, obj: Observed, start: str, on_enter: EnterFn | None = None, services: Services | None = None
) -> Outcome:
    """Run steps from `start` until Provisioned or an error.

    Unexpected exceptions are temporary: a bug or an outage should be retried with backoff
    and shown as `Reconciling`, not crash the operator. Bad input must be reported by the
    step as a `PermanentError`. An object that has ended (`Pipeline.ended`) announces nothing:
    its steps confirm the end, and its phase must not flicker back to one it left.
    """
    facts: dict[str, Any] = {}
    parsed = ParsedSpec()  # the spec, parsed at most once for the whole run
    index = pipeline.phases.index(start)
    ended = obj.status.get("phase") in pipeline.ended
    while pipeline.phases[index] != PROVISIONED:
        phase = pipeline.phases[index]
        if on_enter is not None and phase in pipeline.announce and not ended:
            await on_enter(phase, facts)
        try:
            context: StepContext[Any] = StepContext(obj=obj, facts=facts, services=services,  # type: ignore[arg-type]
                                                    parsed_spec=parsed)
            facts.update(await pipeline.steps[phase](context))
        except (PermanentError, TemporaryError) as error:
            return Outcome(phase=phase, facts={**facts, **error.facts}, error=error)
        except Exception as error:
            failure = TemporaryError("InternalError", f"{type(error).__name__}: {error}")
            failure.__cause__ = error  # what it came from (an outage of the API server is waited out)
            return Outcome(phase=phase, facts=facts, error=failure)
        index += 1
    return Outcome(phase=PROVISIONED, facts=facts)


def compose_status(obj: Observed, outcome: Outcome, now: str) -> dict[str, Any]:
    """The whole status an outcome stands for: kind facts, phase and the three conditions.

    A failed run shows the phase it stopped in, so a user sees how far the object got (a
    Blueprint stalled in `Validated` passed validation and failed to compile), unless the error
    names the failure it is (`PermanentError.phase`).
    """
    previous = obj.status.get("conditions") or []
    gen = obj.generation
    error = outcome.error
    status = _kept(obj.status, outcome.facts)
    status["observedGeneration"] = gen
    if error is None:
        status["phase"] = PROVISIONED
        conditions = [
            cond.condition(cond.READY, "True", PROVISIONED, "provisioned", gen, now, previous),
            cond.condition(cond.RECONCILING, "False", PROVISIONED, "", gen, now, previous),
            cond.condition(cond.STALLED, "False", PROVISIONED, "", gen, now, previous),
        ]
    elif isinstance(error, PermanentError):
        status["phase"] = error.phase or outcome.phase
        conditions = [
            cond.condition(cond.READY, "False", error.reason, error.message, gen, now, previous),
            cond.condition(cond.RECONCILING, "False", error.reason, "", gen, now, previous),
            cond.condition(cond.STALLED, "True", error.reason, error.message, gen, now, previous),
        ]
    else:
        status["phase"] = outcome.phase
        conditions = [
            cond.condition(cond.READY, "False", error.reason, error.message, gen, now, previous),
            cond.condition(cond.RECONCILING, "True", error.reason, error.message, gen, now, previous),
            cond.condition(cond.STALLED, "False", error.reason, "", gen, now, previous),
        ]
    status["conditions"] = conditions + kind_conditions(outcome.facts, gen, now, previous)
    return status


KIND_CONDITIONS = "conditions"
"""A step may return, under this fact, conditions of its kind beside Ready, Reconciling and
Stalled (each a mapping with type, status, reason, message): facts a user should see that do not
decide readiness, such as an Environment naming a component that does not exist."""


def kind_conditions(facts: Mapping[str, Any], gen: int, now: str,
                    previous: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [cond.condition(c["type"], c["status"], c["reason"], c["message"], gen, now, previous)
            for c in facts.get(KIND_CONDITIONS) or ()]


def announce_status(obj: Observed, phase: str, facts: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The status written when an announced phase starts: Reconciling, not yet Ready."""
    previous = obj.status.get("conditions") or []
    gen = obj.generation
    status = _kept(obj.status, facts)
    status["observedGeneration"] = gen
    status["phase"] = phase
    status["conditions"] = [
        cond.condition(cond.READY, "False", phase, f"in phase {phase}", gen, now, previous),
        cond.condition(cond.RECONCILING, "True", phase, f"in phase {phase}", gen, now, previous),
        cond.condition(cond.STALLED, "False", phase, "", gen, now, previous),
    ]
    return status


RUNTIME_FIELDS = frozenset({"phase", "observedGeneration", "conditions"})
"""The status fields the runtime composes; a kind's steps own every other one."""


def _kept(old: Mapping[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    """The kind's status fields as they are, updated with what this run found: a step returns what
    it changes (None removes a field), so an announce or a failure never erases, say, an App's lock."""
    status = {key: value for key, value in old.items() if key not in RUNTIME_FIELDS}
    status.update(facts)
    return status


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch from `old` to `new` status, or None when they are equal.

    Keys that disappear are sent as null, so a merge patch removes them.
    """
    patch: dict[str, Any] = {}
    for key in set(old) | set(new):
        if old.get(key) != new.get(key):
            patch[key] = new.get(key)
    return patch or None
