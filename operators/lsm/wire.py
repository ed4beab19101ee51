"""A kind's status fields as the pipeline writes them: pure, no I/O.

The reconciler writes a status as a JSON merge patch of its top-level fields. Inside a field that
is an object (an attribute set, a state request, a lifecycle's model states) a merge patch merges
key by key, so a key that disappeared would stay on the server: `merge_ready` marks such keys with
null, which a merge patch removes. A null is therefore never an attribute value in status (an
attribute set to null is an attribute not set), and `read_instance_status` drops the marks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.lsm.models import ServiceInstanceStatus
from operators.runtime import RUNTIME_FIELDS, StatusBase


def _aliases(model: type[StatusBase]) -> tuple[str, ...]:
    out = []
    for name, info in model.model_fields.items():
        alias = info.serialization_alias or info.alias or name
        if alias not in RUNTIME_FIELDS:
            out.append(alias)
    return tuple(out)


INSTANCE_FIELDS = _aliases(ServiceInstanceStatus)
"""The fields of a ServiceInstance's status its pipeline owns (all but phase, observedGeneration, conditions)."""


def without_nulls(value: Any) -> Any:
    """An object with its null members removed, at every depth of nested objects (lists are kept as they are)."""
    if isinstance(value, Mapping):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    return value


def merge_ready(old: Any, new: Any) -> Any:
    """`new` with a null for each key of `old` it no longer has, in nested objects at every depth."""
    if not isinstance(new, Mapping) or not isinstance(old, Mapping):
        return new
    out: dict[str, Any] = {key: None for key in old if key not in new}
    out.update({key: merge_ready(old.get(key), value) for key, value in new.items()})
    return out


def read_instance_status(status: Mapping[str, Any]) -> ServiceInstanceStatus:
    """A ServiceInstance's status as its pipeline reads it (fields of others ignored, null marks dropped)."""
    return ServiceInstanceStatus.model_validate(
        {key: without_nulls(value) for key, value in status.items() if key in INSTANCE_FIELDS and value is not None})


def instance_facts(old: Mapping[str, Any], status: ServiceInstanceStatus) -> dict[str, Any]:
    """The pipeline's status fields of `status`, as facts that turn `old` into it with a merge patch: every
    field present (null when unset, which removes it), removed keys of nested objects marked null."""
    data = status.model_dump(by_alias=True, mode="json", exclude_none=True,
                             exclude={"phase", "observed_generation", "conditions"})
    return {name: merge_ready(old.get(name), data.get(name)) for name in INSTANCE_FIELDS}
