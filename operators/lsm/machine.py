"""The state machine of a service instance, pure: a lifecycle, an entity, an instance's status and a
trigger in; the next status, or a refusal, out.

`advance(ctx, status, trigger)` is the one entry point. It never reads the cluster and never
keeps anything between calls, so the admission webhook (refusing a request before it is stored),
the HTTP API and the reconciler share it, and tests run it without a cluster. What it needs of
the world comes in `Context`: the other instances' identities, the Blueprint's variable rules as
a function, and the time to write in the log.

Rules (issue 15, after Inmanta's LSM):

- Creation puts the attributes, with the entity's defaults, in the candidate set, and the
  instance in the lifecycle's initial state, at version 1. An r attribute, an unknown one or a
  missing identity is refused (422); an identity another instance has, too (409).
- Every executed transfer increments the version and is logged. A transfer whose path leads back
  to its source with no operation changes nothing and is not executed at all (no version, no log),
  so that a repair run which finds everything in order costs no write.
- Auto transfers run at once on arrival, one after another, until none applies (an entity's
  config can switch one off by its configName); a chain longer than `AUTO_LIMIT` is a broken
  lifecycle and is reported, with nothing applied.
- A request carrying a stale version is refused (409, Inmanta's message) and changes nothing.
- An update is a change of the client's attributes: refused (409) in a state with no on_update
  transfer, naming the states that have one; a changed rw attribute is refused (422). The new
  candidate set starts from the candidate set, or from a copy of the active one when there is no
  candidate, with the client's changes applied (an embedded attribute's unchanged items kept as they were,
  an item's key never changed: `operators.lsm.embedded`). A delete is refused (409) likewise where the state
  has no on_delete transfer. A state request must match an api_set_state transfer's source and
  target.
- A validating transfer checks the set the source state's validateSelf names (default candidate)
  against the entity's types, the identity's uniqueness and the injected checks: success leads to
  target, failure to error with the reasons in status. A resource-based transfer follows the App's
  success (its outputs fill r attributes of the active set) or failure.
- Operations: `clear X` empties set X; `promote` moves candidate to active and active to rollback;
  `rollback` moves rollback to active and active to candidate. One with nothing to move (no
  candidate to promote, no rollback set) leaves the sets as they are and says so in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from operators.lsm.attributes import (
    changed_after_creation,
    changed_items,
    changed_keys,
    client_problems,
    definitions,
    identity_value,
    set_problems,
    with_defaults,
)
from operators.lsm.embedded import merge as merge_embedded
from operators.lsm.lifecycle import changes_nothing, model_state, triggers
from operators.lsm.models import (
    AttributeSet,
    LifecycleSpec,
    LogEntry,
    Operation,
    ServiceEntitySpec,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
    State,
    StateRequest,
    Transfer,
    TriggerName,
)
from operators.runtime import Refusal

AUTO_LIMIT = 32
"""The most auto transfers one trigger may set off. Lifecycle validation refuses auto cycles; this
bound holds for lifecycles that bypassed it (created with the webhook off)."""
LOG_LIMIT = 50
"""The transfers an instance's status keeps (the oldest go first): an object's size is bounded."""

Validator = Callable[[Mapping[str, Any], str], list[str]]
"""Extra validation of an attribute set (the Blueprint's variable rules): the problems, or none, each
naming the attribute under the path given (how the user sees the set, `SET_PATHS`)."""

SET_PATHS = {"candidate": "spec.attributes", "active": "status.activeAttributes",
             "rollback": "status.rollbackAttributes"}
"""How validation problems name an attribute set: the candidate set is what the client wrote in
`spec.attributes` (with the entity's defaults), so its problems name that field, where a fix goes; the
active and rollback sets exist only in status."""


class Refused(Refusal):
    """A request the lifecycle does not allow, with its HTTP code (409 conflict, 422 invalid) and a
    CamelCase reason for conditions and API bodies. Nothing changed."""

    def __init__(self, message: str, code: int, reason: str) -> None:
        super().__init__(message, code)
        self.reason = reason


class LifecycleError(Exception):
    """The lifecycle cannot carry the instance on (a state it no longer has, auto transfers that never
    settle). Not the request's fault: the instance stays as it was, Stalled with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Context:
    """What the engine knows of the world, for one instance."""

    instance: str
    """How messages name the instance (its name or uid, as the caller addresses it)."""
    entity_name: str
    entity: ServiceEntitySpec
    lifecycle: LifecycleSpec
    now: str
    """The time written in log entries (RFC 3339)."""
    others: Mapping[str, str] = field(default_factory=dict)
    """The identity values of the entity's other instances (all of them but those in a deleted state: an
    identity is unique per entity whatever the state), each with the instance that has it."""
    check: Validator | None = None


# --- triggers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    """The instance was created with these client attributes."""

    attributes: Mapping[str, Any]


@dataclass(frozen=True)
class Auto:
    """Run the auto transfers that apply now (after a restart, or when an entity's config switched one on)."""


@dataclass(frozen=True)
class SetState:
    """A state request (api_set_state)."""

    target: str
    current_version: int | None = None
    message: str | None = None


@dataclass(frozen=True)
class Update:
    """The client's attributes are now these (the whole set, as spec.attributes holds it)."""

    attributes: Mapping[str, Any]
    current_version: int | None = None


@dataclass(frozen=True)
class Delete:
    """The instance is being deleted."""

    current_version: int | None = None


@dataclass(frozen=True)
class ResourceOutcome:
    """The instance's App reached its goal (success) or failed; on success, the r attributes it set."""

    success: bool
    message: str | None = None
    outputs: Mapping[str, Any] = field(default_factory=dict)


Trigger = Create | Auto | SetState | Update | Delete | ResourceOutcome


@dataclass(frozen=True)
class Outcome:
    """The next status, and the transfers executed to reach it (oldest first: one Event each)."""

    status: ServiceInstanceStatus
    transfers: tuple[LogEntry, ...]
    changed: bool


# --- entry point ---------------------------------------------------------------------------------


def advance(ctx: Context, status: ServiceInstanceStatus, trigger: Trigger) -> Outcome:
    """The instance's next status after `trigger`. Raises `Refused` for a request the lifecycle does
    not allow and `LifecycleError` when the lifecycle cannot go on; either way nothing changed."""
    if isinstance(trigger, Create):
        return _create(ctx, status, trigger)
    if status.state is None:
        raise LifecycleError("NotCreated", f"service instance {ctx.instance} has no state yet: it was never created")
    here = _state(ctx, status.state)
    run = _Run.resume(ctx, status)
    if here.deleted:
        if isinstance(trigger, Delete | Auto | ResourceOutcome):
            return Outcome(status, (), False)
        raise Refused(f'service instance {ctx.instance} is deleted (state "{here.name}")', 409, "Deleted")

    if isinstance(trigger, Auto):
        run.settle()
    elif isinstance(trigger, SetState):
        _set_state(run, status, trigger)
    elif isinstance(trigger, Update):
        if not _update(run, status, trigger):
            return Outcome(status, (), False)
    elif isinstance(trigger, Delete):
        check_version(ctx, status, trigger.current_version)
        transfer = _only(ctx, here.name, "on_delete")
        if transfer is None:
            raise _not_allowed(ctx, here.name, "on_delete", "deleted")
        if run.take(transfer, "on_delete"):
            run.settle()
    else:
        transfer = _only(ctx, here.name, "resource_based")
        if transfer is None:
            return Outcome(status, (), False)  # a deployment outcome this state does not wait for
        force = trigger.success and run.fill_outputs(trigger.outputs)
        if run.take(transfer, "resource_based", success=trigger.success, detail=trigger.message, force=force):
            run.settle()
    return run.outcome(status)


def pending_request(spec: ServiceInstanceSpec, status: ServiceInstanceStatus) -> StateRequest | None:
    """The spec's state request when it has not been taken in yet (each is handled once: a request
    carries the version it was made at, and versions only grow, so two requests are never equal)."""
    request = spec.state_request
    return request if request is not None and request != status.state_request else None


def describe(ctx: Context, status: ServiceInstanceStatus) -> ServiceInstanceStatus:
    """The status with the fields derived from its state and sets brought up to date: model state, ways
    out (they change with the entity's config), identity, deleted. No transfer is taken."""
    if status.state is None:
        return status
    here = _state(ctx, status.state)
    # the identity never changes: whichever set holds it holds the same value
    sets = (status.client_attributes, status.active_attributes, status.candidate_attributes)
    identity = next((v for v in (identity_value(ctx.entity, values) for values in sets) if v is not None), None)
    return status.model_copy(update={
        "model_state": model_state(here),
        "identity": identity,
        "ways_out": ways_out(ctx, here.name),
        "deleted": True if here.deleted else None,
    })


def ways_out(ctx: Context, state: str) -> list[str]:
    """How an instance leaves `state`, for status: so that none waits in a state whose way out is hidden."""
    out: list[str] = []
    for transfer in ctx.lifecycle.transfers:
        if transfer.source != state:
            continue
        for trigger in triggers(transfer):
            if trigger == "auto":
                text = f"auto -> {transfer.target}"
                if not _enabled(ctx, transfer):
                    text += f" (switched off: config {transfer.config_name} is false)"
            elif trigger == "api_set_state":
                text = f"state request {transfer.target}"
            elif trigger == "on_update":
                text = f"update -> {transfer.target}"
            elif trigger == "on_delete":
                text = f"delete -> {transfer.target}"
            else:
                text = f"App succeeds -> {transfer.target}, fails -> {transfer.error}"
            if transfer.validate_:
                text += f" (validated; fails -> {transfer.error})"
            if transfer.target_operation is not None:
                text += f" [{transfer.target_operation}]"
            out.append(text)
    return out


# --- triggers, one by one ------------------------------------------------------------------------


def _create(ctx: Context, status: ServiceInstanceStatus, trigger: Create) -> Outcome:
    if status.state is not None:
        return Outcome(status, (), False)  # created already: the same event seen again
    initial = _state(ctx, ctx.lifecycle.initial_state)
    problems = client_problems(ctx.entity, ctx.entity_name, trigger.attributes)
    identity = ctx.entity.identity
    value = identity_value(ctx.entity, trigger.attributes)
    if identity is not None and value is None:
        problems.append(("MissingIdentity", f"spec.attributes.{identity}: required: it is the service identity"))
    if problems:
        raise Refused("; ".join(message for _, message in problems), 422, problems[0][0])
    if value is not None:
        other = ctx.others.get(value)
        if other is not None and other != ctx.instance:
            raise Refused(f"spec.attributes.{identity}: service identity {identity}={value} is already used by "
                          f"service instance {other}", 409, "DuplicateIdentity")
    run = _Run(ctx, state=initial.name, version=1, problems=None, client=dict(trigger.attributes),
               sets={"candidate": with_defaults(ctx.entity, trigger.attributes), "active": None, "rollback": None})
    run.entries.append(LogEntry(from_=None, to=initial.name, trigger="create", version=1, time=ctx.now,
                                message="created"))
    run.settle()
    return run.outcome(status)


def _set_state(run: _Run, status: ServiceInstanceStatus, trigger: SetState) -> None:
    ctx = run.ctx
    check_version(ctx, status, trigger.current_version)
    names = [state.name for state in ctx.lifecycle.states]
    if trigger.target not in names:
        raise Refused(f'stateRequest.target: "{trigger.target}" is not a state of the lifecycle (states: '
                      f"{', '.join(names)})", 422, "UnknownState")
    here = run.state
    for transfer in ctx.lifecycle.transfers:
        if transfer.api_set_state and transfer.source == here and transfer.target == trigger.target:
            if run.take(transfer, "api_set_state", detail=trigger.message):
                run.settle()
            if trigger.current_version is not None:
                run.request = StateRequest(target=trigger.target, current_version=trigger.current_version,
                                           message=trigger.message)
            return
    allowed = [t.target for t in ctx.lifecycle.transfers if t.api_set_state and t.source == here]
    raise Refused(f'service instance {ctx.instance} in state "{here}" cannot be set to "{trigger.target}": no '
                  f'api_set_state transfer leads there (from "{here}" a state request may ask for: '
                  f"{', '.join(allowed) or 'none'})", 409, "TransferNotAllowed")


def _update(run: _Run, status: ServiceInstanceStatus, trigger: Update) -> bool:
    """Take an update in; False when the client's attributes did not change (nothing to do: the same
    spec seen again, whose currentVersion may be stale by now because the update raised the version)."""
    ctx = run.ctx
    new = dict(trigger.attributes)
    changed = changed_keys(run.client, new)
    if not changed:
        return False
    check_version(ctx, status, trigger.current_version)
    transfer = _only(ctx, run.state, "on_update")
    if transfer is None:
        raise _not_allowed(ctx, run.state, "on_update", "updated")
    problems = (client_problems(ctx.entity, ctx.entity_name, new) + changed_after_creation(ctx.entity, changed)
                + changed_items(ctx.entity, run.client, new, changed))
    if problems:
        raise Refused("; ".join(message for _, message in problems), 422, problems[0][0])
    base = run.sets["candidate"] if run.sets["candidate"] is not None else run.sets["active"]
    candidate = dict(base or {})
    defs = definitions(ctx.entity)
    for name in changed:
        if name in new:
            # an embedded attribute keeps the items the client did not change as the set holds them
            attribute = defs.get(name)
            candidate[name] = new[name] if attribute is None else merge_embedded(
                attribute, candidate.get(name), run.client.get(name), new[name])
        else:
            candidate.pop(name, None)
    run.sets["candidate"] = with_defaults(ctx.entity, candidate)
    run.client = new
    run.take(transfer, "on_update", force=True)
    run.settle()
    return True


# --- the run of one trigger ----------------------------------------------------------------------


@dataclass
class _Run:
    """The instance while one trigger is applied: changed freely, turned into a status at the end."""

    ctx: Context
    state: str
    version: int
    sets: dict[AttributeSet, dict[str, Any] | None]
    problems: list[str] | None
    client: dict[str, Any]
    entries: list[LogEntry] = field(default_factory=list)
    request: StateRequest | None = None

    @classmethod
    def resume(cls, ctx: Context, status: ServiceInstanceStatus) -> _Run:
        def copy(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return None if values is None else dict(values)

        return cls(ctx, state=str(status.state), version=status.version or 0,
                   sets={"candidate": copy(status.candidate_attributes), "active": copy(status.active_attributes),
                         "rollback": copy(status.rollback_attributes)},
                   problems=status.validation_problems, client=dict(status.client_attributes or {}),
                   request=status.state_request)

    def take(self, transfer: Transfer, trigger: TriggerName, *, success: bool = True, detail: str | None = None,
             force: bool = False) -> bool:
        """Execute one transfer; False when it changes nothing and is therefore not executed."""
        ok, problems = success, None
        if transfer.validate_:
            problems = self.validate(_state(self.ctx, transfer.source))
            ok = not problems
        error_path = not ok
        destination = transfer.error if error_path else transfer.target
        if destination is None:
            raise LifecycleError("NoErrorState", f'the transfer "{transfer.description or transfer.source}" from '
                                 f'"{transfer.source}" failed and has no error state to go to')
        _state(self.ctx, destination)
        if changes_nothing(transfer, error_path) and not force:
            return False
        operation = transfer.error_operation if error_path else transfer.target_operation
        notes = [transfer.description] if transfer.description else []
        if problems:
            notes.append("validation failed: " + "; ".join(problems))
        elif error_path:
            notes.append("the App failed" + (f": {detail}" if detail else ""))
        elif detail:
            notes.append(detail)
        if operation is not None:
            note = _operate(self.sets, operation)
            if note:
                notes.append(note)
        if transfer.validate_:
            self.problems = problems or None
        self.version += 1
        self.entries.append(LogEntry(from_=transfer.source, to=destination, trigger=trigger, version=self.version,
                                     time=self.ctx.now, operation=operation, error=error_path,
                                     message="; ".join(notes) or None))
        self.state = destination
        return True

    def validate(self, source: State) -> list[str]:
        """The problems of the set the source state validates: types, identity, injected checks."""
        ctx = self.ctx
        which = source.validate_self or "candidate"
        path = SET_PATHS[which]
        values = self.sets[which]
        if values is None:
            return [f"status.{which}Attributes: there is no {which} attribute set to validate"]
        problems = set_problems(ctx.entity, ctx.entity_name, values, path)
        identity, value = ctx.entity.identity, identity_value(ctx.entity, values)
        if value is not None:
            other = ctx.others.get(value)
            if other is not None and other != ctx.instance:
                problems.append(f"{path}.{identity}: service identity {identity}={value} is already used by service "
                                f"instance {other}")
        if not problems and ctx.check is not None:
            problems = ctx.check(values, path)  # the Blueprint's rules read well-typed values only
        return problems

    def settle(self) -> None:
        """Take auto transfers until none applies. Called on arrival in a state (or on an explicit `Auto`):
        after a transfer that was not executed the instance did not arrive anywhere, and an auto transfer
        that applies there would have been taken already."""
        trail = [self.state]
        for _ in range(AUTO_LIMIT):
            transfer = next((t for t in self.ctx.lifecycle.transfers
                             if t.auto and t.source == self.state and _enabled(self.ctx, t)), None)
            if transfer is None or not self.take(transfer, "auto"):
                return
            trail.append(self.state)
        raise LifecycleError("AutoTransfersLoop", f"auto transfers did not settle after {AUTO_LIMIT}: "
                             f"{' -> '.join(trail[:8])} ...; the lifecycle has a cycle of auto transfers")

    def fill_outputs(self, outputs: Mapping[str, Any]) -> bool:
        """Put the r attributes an App set into the active set; True when that changed it."""
        defs = definitions(self.ctx.entity)
        active = self.sets["active"]
        if active is None:
            return False
        fresh = {k: v for k, v in outputs.items() if k in defs and defs[k].modifier == "r" and active.get(k) != v}
        active.update(fresh)
        return bool(fresh)

    def outcome(self, before: ServiceInstanceStatus) -> Outcome:
        after = describe(self.ctx, before.model_copy(update={
            "state": self.state,
            "version": self.version,
            "candidate_attributes": self.sets["candidate"],
            "active_attributes": self.sets["active"],
            "rollback_attributes": self.sets["rollback"],
            "client_attributes": self.client,
            "validation_problems": self.problems,
            "state_request": self.request,
            "log": [*before.log, *self.entries][-LOG_LIMIT:],
        }))
        changed = after.model_dump(mode="json") != before.model_dump(mode="json")
        return Outcome(after, tuple(self.entries), changed)


# --- helpers -------------------------------------------------------------------------------------


def _state(ctx: Context, name: str) -> State:
    for state in ctx.lifecycle.states:
        if state.name == name:
            return state
    raise LifecycleError("UnknownState", f'"{name}" is not a state of the lifecycle any more (states: '
                         f"{', '.join(s.name for s in ctx.lifecycle.states)}); did the lifecycle change under "
                         f"service instance {ctx.instance}?")


def _enabled(ctx: Context, transfer: Transfer) -> bool:
    return transfer.config_name is None or ctx.entity.config.get(transfer.config_name, True)


def _only(ctx: Context, state: str, trigger: TriggerName) -> Transfer | None:
    """The transfer `trigger` takes from `state` (lifecycle validation makes it unique), or None."""
    return next((t for t in ctx.lifecycle.transfers if t.source == state and trigger in triggers(t)), None)


def _not_allowed(ctx: Context, state: str, trigger: TriggerName, done: str) -> Refused:
    allowing = [s.name for s in ctx.lifecycle.states if _only(ctx, s.name, trigger) is not None]
    noun = "an update" if trigger == "on_update" else "a delete"
    return Refused(f'service instance {ctx.instance} in state "{state}" cannot be {done}: the state has no '
                   f"{trigger} transfer (states that allow {noun}: {', '.join(allowing) or 'none'})", 409,
                   "UpdateNotAllowed" if trigger == "on_update" else "DeleteNotAllowed")


def check_version(ctx: Context, status: ServiceInstanceStatus, given: int | None) -> None:
    """Refuse (409 StaleVersion) a request made at another version than the instance's."""
    if given is not None and given != status.version:
        raise Refused(f"The given current version ({given}) doesn't match the actual current version "
                      f"({status.version}) of service instance {ctx.instance}", 409, "StaleVersion")


def _operate(sets: dict[AttributeSet, dict[str, Any] | None], operation: Operation) -> str | None:
    """Apply an operation to the sets; a note when there was nothing to move."""
    if operation == "promote":
        if sets["candidate"] is None:
            return "promote: no candidate set, nothing promoted"
        sets["rollback"], sets["active"], sets["candidate"] = sets["active"], sets["candidate"], None
    elif operation == "rollback":
        if sets["rollback"] is None:
            return "rollback: no rollback set, nothing rolled back"
        sets["candidate"], sets["active"], sets["rollback"] = sets["active"], sets["rollback"], None
    else:
        sets[_CLEARS[operation]] = None
    return None


_CLEARS: dict[Operation, AttributeSet] = {
    "clear candidate": "candidate", "clear active": "active", "clear rollback": "rollback",
}
