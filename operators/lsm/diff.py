"""What would change, before it changes (issue 31, item 4): the diff of an instance's waiting candidate set
against the live App and the active set, stored in `status.diff`.

When it is computed: whenever the instance's triggers were taken in (a creation, an update, a state request,
an entity's config change) and a candidate set *waits* in a state that validates it, which is where a client
can still look before approving: an entity whose config switches off the auto transfer after validation
(`service`'s auto_designed, auto_creating, auto_update_designed, auto_update_inprogress) holds an update in
update_acknowledged, a creation in acknowledged or designed, until a state request. A lifecycle that promotes
at once (`simple`) leaves no candidate to look at: nothing is waiting, so no diff is shown for it.

How: the engine itself (`World.advance`, pure) is run on a copy of the status with the state requests that
carry the candidate forward (api_set_state transfers that neither clear nor roll back a set), one after
another until the candidate set is promoted, exactly as the pipeline would take them, validations included;
nothing is written and no App is touched. The state reached says what the App gets (`resource_intent`):
launched (create), new inputs and its `update` action (update), deleted, or nothing. Attributes are compared
active set now vs after; App inputs, the live App's `spec.inputs` vs `app_inputs` of the new active set, with
the values of secret variables masked.

Then: when the candidate set is gone at a later take-in, the diff stays, marked applied (a promote in the log
since, `appliedVersion`) or discarded (cleared, rolled back), until a new candidate set waits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from operators.calm.macros import SECRET_MASK
from operators.lsm.converge import has_update_action, owned_by, update_run_name
from operators.lsm.lifecycle import resource_intent
from operators.lsm.machine import LifecycleError, Outcome, Refused, SetState, Trigger
from operators.lsm.models import (
    AppAction,
    AttributeChange,
    InputChange,
    LifecycleSpec,
    LogEntry,
    ServiceDiff,
    ServiceEntitySpec,
    ServiceInstanceStatus,
    State,
)
from operators.lsm.realization import app_inputs

Advance = Callable[[ServiceInstanceStatus, Trigger], Awaitable[Outcome]]
"""The engine on one instance (`World.advance`): a status and a trigger in, the next status out."""

REQUEST_LIMIT = 4
"""The most state requests a diff follows (the built-ins need two at most: design, then promote)."""
HOLDS_BACK = ("clear candidate", "clear active", "rollback")
"""Operations of a state request that drop the candidate set rather than carry it forward (an abort)."""


def waits(lifecycle: LifecycleSpec, status: ServiceInstanceStatus) -> bool:
    """Whether a candidate set waits to be looked at: there is one, and the state validates it (not a state
    that validates the active set, such as `rollback`, where the candidate is the set rolled back from)."""
    if status.candidate_attributes is None or status.state is None:
        return False
    here = _state(lifecycle, status.state)
    return here is not None and not here.deleted and here.validate_self != "active"


@dataclass(frozen=True)
class Path:
    """Where the engine takes a waiting candidate set: the state requests, the transfers, the status after."""

    requests: tuple[str, ...]
    transfers: tuple[LogEntry, ...]
    status: ServiceInstanceStatus

    @property
    def promoted(self) -> bool:
        return any(e.operation == "promote" and not e.error for e in self.transfers)

    @property
    def failed(self) -> LogEntry | None:
        return next((e for e in self.transfers if e.error), None)


def forward_requests(lifecycle: LifecycleSpec, state: str) -> list[str]:
    """The targets of the state requests from `state` that carry a candidate set forward, in the lifecycle's
    order: not to the same state (a revalidation), not dropping a set."""
    return [t.target for t in lifecycle.transfers
            if t.api_set_state and t.source == state and t.target != state and t.target_operation not in HOLDS_BACK]


async def follow(advance: Advance, lifecycle: LifecycleSpec, status: ServiceInstanceStatus) -> Path:
    """Take, on a copy, the state requests that carry the candidate set forward until it is promoted, a
    transfer fails (a validation), or no request leads on. Nothing is written: `advance` is the pure engine."""
    requests: list[str] = []
    transfers: list[LogEntry] = []
    current = status
    for _ in range(REQUEST_LIMIT):
        path = Path(tuple(requests), tuple(transfers), current)
        if path.promoted or path.failed is not None or current.state is None:
            return path
        targets = forward_requests(lifecycle, current.state)
        if not targets:
            return path
        try:
            outcome = await advance(current, SetState(targets[0]))
        except (Refused, LifecycleError):
            return path
        requests.append(targets[0])
        transfers.extend(outcome.transfers)
        current = outcome.status
    return Path(tuple(requests), tuple(transfers), current)


def attribute_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
                      masked: Collection[str] = ()) -> list[AttributeChange]:
    """The attributes whose value differs (added, changed or removed), by name; `masked` ones show the mask."""
    old, new = old or {}, new or {}
    out = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            hide = name in masked
            out.append(AttributeChange(name=name, old=SECRET_MASK if hide and name in old else old.get(name),
                                       new=SECRET_MASK if hide and name in new else new.get(name)))
    return out


def input_changes(old: Mapping[str, str], new: Mapping[str, str], secret: Collection[str]) -> list[InputChange]:
    """The App inputs whose value differs; a secret variable's values are never shown, only that they change."""
    out = []
    for variable in sorted(set(old) | set(new)):
        before, after = old.get(variable), new.get(variable)
        if before == after:
            continue
        if variable in secret:
            out.append(InputChange(variable=variable, old=None if before is None else SECRET_MASK,
                                   new=None if after is None else SECRET_MASK, secret=True))
        else:
            out.append(InputChange(variable=variable, old=before, new=after))
    return out


def assemble(entity: ServiceEntitySpec, lifecycle: LifecycleSpec, before: ServiceInstanceStatus, path: Path,
             app: Mapping[str, Any] | None, uid: str, name: str, secret: Collection[str] = ()) -> ServiceDiff:
    """The diff of a waiting candidate set (`before`), given where the engine takes it (`path`) and the live
    App (`app`, None when there is none; only one owned by the instance, `uid`, counts as the instance's)."""
    secret = set(secret)
    masked = {m.attribute for m in entity.realization.inputs if m.variable in secret} if entity.realization else set()
    ours = app if app is not None and owned_by(app, uid) else None
    live = {str(k): str(v) for k, v in ((ours or {}).get("spec") or {}).get("inputs", {}).items()} if ours else {}
    transfers = [_transfer(e) for e in path.transfers]
    base = {"status": "pending", "version": before.version or 0, "state": str(before.state),
            "requests": list(path.requests), "transfers": transfers}
    failed = path.failed
    if not path.promoted:
        candidate = before.candidate_attributes or {}
        waiting = input_changes(live, app_inputs(entity, candidate), secret) if entity.realization else []
        if before.validation_problems:
            why = (f"the candidate set failed validation ({'; '.join(before.validation_problems)}): nothing runs "
                   "until an update fixes it")
        elif failed is not None:
            why = f"approving it would fail: {failed.message or 'its validation fails'} (-> {failed.to})"
        else:
            why = f'no state request from "{before.state}" carries the candidate set forward: nothing would run yet'
        return ServiceDiff(**base, target=path.status.state if path.requests else None, action="none",
                           attributes=attribute_changes(before.active_attributes, candidate, masked),
                           inputs=waiting, message=why)
    after = path.status
    target = str(after.state)
    here = _state(lifecycle, target)
    intent = resource_intent(here) if here is not None else "none"
    attributes = attribute_changes(before.active_attributes, after.active_attributes, masked)
    new_inputs = app_inputs(entity, after.active_attributes or {})
    action: AppAction = "none"
    action_run: str | None = None
    inputs: list[InputChange] = []
    how = " after " + ", ".join(f"a state request {r}" for r in path.requests) if path.requests else ""
    if entity.realization is None:
        message = f"{target}{how}: the entity deploys nothing (no realization)"
    elif intent == "purge":
        action = "delete" if ours is not None else "none"
        message = f"{target}{how}: App {name} " + ("is deleted (its delete action runs)" if ours is not None
                                                   else "does not exist: nothing to delete")
    elif intent == "none":
        message = f'{target}{how}: state "{target}" deploys nothing: the App is left as it is'
    else:
        inputs = input_changes(live, new_inputs, secret)
        if ours is None:
            action = "create"
            message = f"{target}{how}: App {name} is launched (its create action runs)"
        elif not inputs:
            message = f"{target}{how}: App {name}'s inputs do not change: nothing runs"
        elif has_update_action(ours.get("status") or {}):
            action = "update"
            generation = int((ours.get("metadata") or {}).get("generation") or 1) + 1
            action_run = update_run_name(name, generation)
            message = f"{target}{how}: App {name} takes the new inputs and its update action runs (ActionRun " \
                      f"{action_run})"
        else:
            message = f"{target}{how}: App {name} takes the new inputs; its Blueprint has no update action: " \
                      "nothing runs"
    changed = ", ".join(c.name for c in attributes) or "no attribute"
    return ServiceDiff(**base, target=target, action=action, app=name if entity.realization else None,
                       action_run=action_run, attributes=attributes, inputs=inputs,
                       message=f"{message} ({changed} changes)")


def settled(diff: ServiceDiff, log: Sequence[LogEntry]) -> ServiceDiff:
    """A pending diff whose candidate set is gone: applied (promoted since, at that version) or discarded."""
    if diff.status != "pending":
        return diff
    for entry in log:
        if entry.version <= diff.version:
            continue
        if entry.trigger in ("create", "on_update"):
            break  # replaced by another candidate set before any promote
        if entry.operation == "promote" and not entry.error:
            return diff.model_copy(update={"status": "applied", "applied_version": entry.version})
    return diff.model_copy(update={"status": "discarded"})


async def preview(advance: Advance, entity: ServiceEntitySpec, lifecycle: LifecycleSpec,
                  status: ServiceInstanceStatus, app: Callable[[], Awaitable[Mapping[str, Any] | None]],
                  secret: Callable[[], Awaitable[Collection[str]]], uid: str, name: str) -> ServiceDiff | None:
    """`status.diff` after a take-in: a fresh diff while a candidate set waits (the live App and the secret
    variables read only then), the previous one settled once it is gone, else what was there."""
    if waits(lifecycle, status):
        path = await follow(advance, lifecycle, status)
        return assemble(entity, lifecycle, status, path, await app(), uid, name, await secret())
    if status.diff is not None and status.candidate_attributes is None:
        return settled(status.diff, status.log)
    return status.diff


def _transfer(entry: LogEntry) -> str:
    text = f"{entry.from_ or '(new)'} -> {entry.to} ({entry.trigger})"
    if entry.operation:
        text += f" [{entry.operation}]"
    return text + (" (error)" if entry.error else "")


def _state(lifecycle: LifecycleSpec, name: str) -> State | None:
    return next((s for s in lifecycle.states if s.name == name), None)
