"""Standard status conditions (Ready, Reconciling, Stalled), kstatus-compatible.

`kubectl wait --for=condition=Ready`, Argo CD and Flux all read these, so every kind carries
the same three with `reason`, `message`, `lastTransitionTime` and `observedGeneration`.
The functions are pure: the caller passes `now`, so equal inputs give equal outputs and an
unchanged condition keeps its transition time (no needless status writes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"

ConditionStatus = Literal["True", "False", "Unknown"]


def condition(
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int,
    now: str,
    previous: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Build one condition, keeping `lastTransitionTime` when the status did not change."""
    since = now
    for old in previous:
        if old.get("type") == type_ and old.get("status") == status:
            since = str(old.get("lastTransitionTime") or now)
            break
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def find(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """The condition of that type, if present."""
    for item in conditions:
        if item.get("type") == type_:
            return item
    return None


def is_true(conditions: Sequence[Mapping[str, Any]], type_: str) -> bool:
    found = find(conditions, type_)
    return found is not None and found.get("status") == "True"
