"""Pure rules of a Lifecycle: the checks that refuse a broken one, and the model state of each state.

A lifecycle is refused at apply time when an instance following it could go wrong in a way
nobody would see: a transfer to a state that does not exist, a failure with nowhere to go, two
transfers one trigger could take, auto transfers that never settle, a state with no way out, a
deleted state no instance can reach. The CRD schema refuses what it can itself (missing
initialState, unknown operations, duplicate state names); `lifecycle_problems` says all of it,
for the admission webhook, the pipeline and the HTTP API alike. Every message starts with the
field path, as kubectl names fields.

The model state (inactive / candidate / designed / active) is Inmanta's concept, not one of its
fields; here it is derived from a state's flags:

- deleted: inactive;
- exportResources: active (the instance's resources are deployed);
- validateOthers set: designed (other instances' validations see it, nothing is deployed);
- validateSelf set: candidate (validated on its own);
- otherwise inactive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from operators.lsm.models import LifecycleSpec, ModelState, State, Transfer, TriggerName
from operators.runtime import FirstSeen, field_path, parse_spec


def model_state(state: State) -> ModelState:
    """The seed's model state of a state, from its flags (see the module docstring)."""
    if state.deleted:
        return "inactive"
    if state.export_resources:
        return "active"
    if state.validate_others is not None:
        return "designed"
    if state.validate_self is not None:
        return "candidate"
    return "inactive"


def model_states(spec: LifecycleSpec) -> dict[str, ModelState]:
    return {state.name: model_state(state) for state in spec.states}


def summarize(spec: LifecycleSpec) -> dict[str, Any]:
    """The status facts of a valid lifecycle."""
    return {"stateCount": len(spec.states), "transferCount": len(spec.transfers), "modelStates": model_states(spec)}


def triggers(transfer: Transfer) -> tuple[TriggerName, ...]:
    """The triggers that set a transfer off, in Inmanta's order."""
    flags: tuple[tuple[TriggerName, bool], ...] = (
        ("auto", transfer.auto), ("api_set_state", transfer.api_set_state), ("on_update", transfer.on_update),
        ("on_delete", transfer.on_delete), ("resource_based", transfer.resource_based),
    )
    return tuple(name for name, on in flags if on)


def changes_nothing(transfer: Transfer, error_path: bool) -> bool:
    """Whether taking this path of the transfer is a self-transfer without an operation: such a transfer
    is not executed (no version, no log), so a repair run that finds everything in order costs nothing."""
    destination = transfer.error if error_path else transfer.target
    operation = transfer.error_operation if error_path else transfer.target_operation
    return destination == transfer.source and operation is None


def lifecycle_problems(spec: Mapping[str, Any]) -> list[str]:
    """Every problem of a Lifecycle spec, each naming its field: the schema's, then the semantic ones."""
    try:
        model = parse_spec(LifecycleSpec, spec)
    except ValidationError as error:
        return [f"spec.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()]
    return semantic_problems(model)


def semantic_problems(spec: LifecycleSpec) -> list[str]:
    """The problems of a spec the schema accepted."""
    problems: list[str] = []
    states: dict[str, State] = {}
    seen = FirstSeen("spec.states", "state")
    for index, state in enumerate(spec.states):
        repeat = seen.repeat(index, state.name)
        if repeat is not None:
            problems.append(repeat)
        states.setdefault(state.name, state)
    known = ", ".join(states)

    initial = states.get(spec.initial_state)
    if initial is None:
        problems.append(f'spec.initialState: "{spec.initial_state}" is not a state of the lifecycle (states: {known})')
    elif initial.deleted:
        problems.append(f'spec.initialState: "{spec.initial_state}" is a deleted state: an instance would be gone '
                        "as soon as it is created")

    for index, transfer in enumerate(spec.transfers):
        problems.extend(_transfer_problems(index, transfer, states, known))
    problems.extend(_ambiguities(spec))
    problems.extend(_state_problems(spec, states))
    cycle = _auto_cycle(spec, states)
    if cycle is not None:
        problems.append(cycle)
    return problems


def _transfer_problems(index: int, transfer: Transfer, states: Mapping[str, State], known: str) -> list[str]:
    path = f"spec.transfers[{index}]"
    problems = [
        f'{path}.{name}: unknown state "{value}" (states: {known})'
        for name, value in (("source", transfer.source), ("target", transfer.target), ("error", transfer.error))
        if value is not None and value not in states
    ]
    if not triggers(transfer):
        problems.append(f"{path}: no trigger: set one of auto, apiSetState, onUpdate, onDelete, resourceBased")
    source = states.get(transfer.source)
    if source is not None and source.deleted:
        problems.append(f'{path}.source: "{transfer.source}" is a deleted state (terminal): no transfer may leave it')
    can_fail = transfer.validate_ or transfer.resource_based
    if can_fail and transfer.error is None:
        what = "validating" if transfer.validate_ else "resource-based"
        problems.append(f"{path}.error: required: a {what} transfer needs a state to go to when it fails")
    if not can_fail and transfer.error is not None:
        problems.append(f"{path}.error: only a validating or resource-based transfer can fail; this one would never "
                        "take its error path")
    if transfer.error_operation is not None and transfer.error is None:
        problems.append(f"{path}.errorOperation: the transfer has no error state to apply it on the way to")
    if transfer.config_name is not None and not transfer.auto:
        problems.append(f"{path}.configName: only an auto transfer can be switched off")
    return problems


def _ambiguities(spec: LifecycleSpec) -> list[str]:
    """Two transfers one trigger could take from the same state: which one an instance takes would be
    arbitrary. A state request names its target, so api_set_state transfers only clash on the same target."""
    problems: list[str] = []
    first: dict[tuple[str, str, str], int] = {}
    for index, transfer in enumerate(spec.transfers):
        for trigger in triggers(transfer):
            key = (trigger, transfer.source, transfer.target if trigger == "api_set_state" else "")
            earlier = first.setdefault(key, index)
            if earlier == index:
                continue
            towards = f' to "{transfer.target}"' if trigger == "api_set_state" else ""
            problems.append(f'spec.transfers[{index}]: a second {trigger} transfer from "{transfer.source}"{towards} '
                            f"(first at spec.transfers[{earlier}]): which one an instance takes would be arbitrary")
    return problems


def _state_problems(spec: LifecycleSpec, states: Mapping[str, State]) -> list[str]:
    problems: list[str] = []
    leaving = {t.source for t in spec.transfers}
    entering = {t.target for t in spec.transfers} | {t.error for t in spec.transfers if t.error is not None}
    reported: set[str] = set()
    for index, state in enumerate(spec.states):
        if state.name in reported:
            continue
        reported.add(state.name)
        if state.deleted and state.name not in entering:
            problems.append(f'spec.states[{index}].deleted: "{state.name}" is a deleted state that no transfer leads '
                            "to: no instance can ever reach it")
        if not state.deleted and state.name not in leaving:
            problems.append(f'spec.states[{index}]: "{state.name}" has no way out: no transfer leaves it and it is not '
                            "deleted, so an instance arriving there would stay for good")
    return problems


def _auto_cycle(spec: LifecycleSpec, states: Mapping[str, State]) -> str | None:
    """A cycle of auto transfers an instance could run round forever, or None. Paths that change nothing
    (self-transfers without an operation) are not executed, so they close no cycle."""
    edges: dict[str, list[tuple[int, str]]] = {}
    for index, transfer in enumerate(spec.transfers):
        if not transfer.auto:
            continue
        paths = [False, True] if transfer.validate_ else [False]
        for error_path in paths:
            destination = transfer.error if error_path else transfer.target
            if destination is None or destination not in states or changes_nothing(transfer, error_path):
                continue
            edges.setdefault(transfer.source, []).append((index, destination))

    finished: set[str] = set()

    def visit(trail: list[tuple[str, int]]) -> str | None:
        """Depth first from the last state of `trail` (each state with the transfer that led to it)."""
        node = trail[-1][0]
        for index, child in edges.get(node, ()):
            on_trail = [name for name, _ in trail]
            if child in on_trail:
                loop = trail[on_trail.index(child):]
                names = " -> ".join([*(name for name, _ in loop), child])
                used = ", ".join(f"spec.transfers[{i}]" for i in [*(i for _, i in loop[1:]), index])
                return f"spec.transfers: auto transfers form a cycle {names} ({used}): an instance would never settle"
            if child not in finished:
                found = visit([*trail, (child, index)])
                if found is not None:
                    return found
        finished.add(node)
        return None

    for source in edges:
        if source not in finished:
            found = visit([(source, -1)])
            if found is not None:
                return found
    return None


ResourceIntent = Literal["deploy", "purge", "none"]


def resource_intent(state: State) -> ResourceIntent:
    """What an instance's App should be in a state: deployed with the active set (exportResources),
    deleted (purgeResources, which wins: a deleting state exports so that its resources stay known
    until they are gone), or left alone: a state that exports nothing deploys nothing new."""
    if state.purge_resources:
        return "purge"
    if state.export_resources:
        return "deploy"
    return "none"


def config_problems(config: Mapping[str, bool], spec: LifecycleSpec, path: str = "spec.config") -> list[str]:
    """A ServiceEntity's config naming no auto transfer of its lifecycle: a switch that does nothing is
    almost always a misspelling, and the instance would not wait where its owner expects."""
    names = sorted({t.config_name for t in spec.transfers if t.config_name is not None})
    return [f"{path}.{key}: the lifecycle has no auto transfer with configName {key} "
            f"(config names: {', '.join(names) or 'none'})" for key in config if key not in names]
