"""What the lsm tests share: an entity, contexts over the built-in lifecycles, and statuses in a given state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.lsm import BUILTINS, Context, Create, Outcome, ServiceEntitySpec, ServiceInstanceStatus, advance
from operators.lsm.machine import Validator, describe
from operators.lsm.models import BuiltinName, LifecycleSpec

NOW = "2025-01-02T03:04:05Z"

ENTITY_SPEC: dict[str, Any] = {
    "description": "A database.",
    "attributes": [
        {"name": "name", "type": "string", "description": "The identity."},
        {"name": "region", "type": "string"},
        {"name": "port", "type": "int", "modifier": "rw+"},
        {"name": "size", "type": "float", "modifier": "rw+", "optional": True},
        {"name": "tags", "type": "list", "modifier": "rw+", "default": ["db"]},
        {"name": "address", "type": "string", "modifier": "r", "optional": True},
    ],
    "identity": "name",
    "lifecycle": {"builtin": "simple"},
}
ENTITY = ServiceEntitySpec.model_validate(ENTITY_SPEC)

CLIENT = {"name": "db-1", "region": "eu", "port": 5432}
"""What a client sends at creation."""
FULL = {**CLIENT, "tags": ["db"]}
"""The candidate set that creation makes of it (the default of `tags` added)."""


def context(lifecycle: BuiltinName | LifecycleSpec = "simple", *, config: Mapping[str, bool] | None = None,
            others: Mapping[str, str] | None = None, check: Validator | None = None,
            entity: ServiceEntitySpec = ENTITY) -> Context:
    spec = BUILTINS[lifecycle] if isinstance(lifecycle, str) else lifecycle
    if config is not None:
        entity = entity.model_copy(update={"config": dict(config)})
    return Context(instance="db-1", entity_name="database", entity=entity, lifecycle=spec, now=NOW,
                   others=others or {}, check=check)


def at(state: str, version: int = 5, *, lifecycle: BuiltinName | LifecycleSpec = "simple",
       candidate: Mapping[str, Any] | None = None, active: Mapping[str, Any] | None = None,
       rollback: Mapping[str, Any] | None = None, client: Mapping[str, Any] | None = None) -> ServiceInstanceStatus:
    """An instance's status in `state`, with the attribute sets given (and what derives from them)."""
    return describe(context(lifecycle), ServiceInstanceStatus(
        state=state, version=version,
        candidate_attributes=None if candidate is None else dict(candidate),
        active_attributes=None if active is None else dict(active),
        rollback_attributes=None if rollback is None else dict(rollback),
        client_attributes=dict(CLIENT if client is None else client),
    ))


def create(ctx: Context, attributes: Mapping[str, Any] = CLIENT) -> Outcome:
    return advance(ctx, ServiceInstanceStatus(), Create(attributes))


def steps(outcome: Outcome) -> list[tuple[str | None, str, str]]:
    """The executed transfers as (from, to, trigger)."""
    return [(e.from_, e.to, e.trigger) for e in outcome.transfers]


def failing(*problems: str) -> Validator:
    """A Blueprint check that always finds these problems."""
    return lambda values, path: list(problems)
