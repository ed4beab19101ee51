"""How an instance looks in the inventory API: Inmanta's fields, and what Stead adds (name, namespace, model
state, app, the log, conditions, relations). Pure: the handlers read the objects, this shapes them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from operators.lsm.lifecycle import model_state
from operators.lsm.models import LifecycleSpec, ServiceEntitySpec
from operators.lsm.relations import referrers


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pending(obj: Mapping[str, Any]) -> bool:
    """Created in Kubernetes, its creation not yet taken in by the operator (no state in status)."""
    return not (obj.get("status") or {}).get("state")


def version_of(obj: Mapping[str, Any]) -> int:
    """The instance's version; 1 for one whose creation is pending (what the creation transfer makes it)."""
    return int((obj.get("status") or {}).get("version") or (1 if pending(obj) else 0))


Graph = tuple[Sequence[Mapping[str, Any]], Mapping[str, ServiceEntitySpec]]
"""The namespace's instances and its entities with relations (`related.relation_graph`)."""


def referenced_by(obj: Mapping[str, Any], graph: Graph | None) -> tuple[list[str], list[dict[str, str]]]:
    """Who names the instance in a relation: their uids (Inmanta's `referenced_by`) and, for Stead's readers,
    each referrer's name with the relation."""
    if graph is None:
        return [], []
    instances, entities = graph
    found = referrers(str(metadata_of(obj).get("name")), instances, entities)
    uids = {str(metadata_of(i).get("name")): str(metadata_of(i).get("uid")) for i in instances}
    ids = list(dict.fromkeys(uids[name] for name, _ in found if name in uids))
    return ids, [{"name": name, "relation": relation} for name, relation in found]


def view(obj: Mapping[str, Any], config: Mapping[str, Any] | None = None,
         lifecycle: LifecycleSpec | None = None, graph: Graph | None = None) -> dict[str, Any]:
    """An instance as Inmanta's API shows one (and what Stead adds: name, namespace, model state, app,
    the transfers' log, conditions).

    An instance whose creation the operator has not taken in yet is shown as the creation transfer
    makes it, as Inmanta answers a creation: version 1, the lifecycle's initial state (given `lifecycle`),
    the client's attributes as the candidate set. The operator records exactly that (and what follows).

    Relations: `referenced_by` (the uids of the instances that name this one, given `graph`), `referrers`
    (their names and relations) and `references` (the instances this one names)."""
    meta, spec, status = metadata_of(obj), obj.get("spec") or {}, obj.get("status") or {}
    ids, named_by = referenced_by(obj, graph)
    log = list(status.get("log") or [])
    last_updated = log[-1].get("time") if log else None
    state, model, candidate = status.get("state"), status.get("modelState"), status.get("candidateAttributes")
    if pending(obj):
        candidate = dict(spec.get("attributes") or {})
        if lifecycle is not None:
            state = lifecycle.initial_state
            initial = next((s for s in lifecycle.states if s.name == state), None)
            model = model_state(initial) if initial is not None else None
    return {
        "id": meta.get("uid"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "environment": meta.get("namespace"),
        "service_entity": spec.get("entity"),
        "service_entity_version": status.get("entityVersion", spec.get("entityVersion")),
        "version": version_of(obj),
        "config": dict(config or {}),
        "state": state,
        "candidate_attributes": candidate,
        "active_attributes": status.get("activeAttributes"),
        "rollback_attributes": status.get("rollbackAttributes"),
        "created_at": meta.get("creationTimestamp"),
        "last_updated": last_updated or meta.get("creationTimestamp"),
        "deleted": bool(status.get("deleted")) or bool(meta.get("deletionTimestamp")),
        "service_identity_attribute_value": status.get("identity"),
        "model_state": model,
        "app": status.get("app"),
        "attributes": dict(spec.get("attributes") or {}),
        "state_request": spec.get("stateRequest"),
        "refused": status.get("refused"),
        "validation_problems": status.get("validationProblems"),
        "ways_out": status.get("waysOut"),
        "log": log,
        "conditions": list(status.get("conditions") or []),
        "referenced_by": ids,
        "referrers": named_by,
        "references": list(status.get("references") or []),
    }


def snake(key: str) -> str:
    """An API field in Inmanta's spelling (snake_case) from a status field's (camelCase)."""
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), key)


