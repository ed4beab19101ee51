"""The body of a core/v1 Event, as Stead posts every one of its Events.

One shape for the engine's Events (`operators.runtime.engine.events`, about Stead's objects) and the
shard's (about a project's claim Lease), so that `kubectl get events` shows them alike: the same
source and reporting component, the replica as the reporting instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.runtime.core.clock import utc_now


def event_body(involved: Mapping[str, Any], namespace: str, type_: str, reason: str, message: str,
               replica: str) -> dict[str, Any]:
    """An Event about `involved` (its apiVersion, kind, name, namespace, uid), posted in `namespace`."""
    now = utc_now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": dict(involved),
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": "stead"},
        "reportingComponent": "stead.dev/operator",
        "reportingInstance": replica,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
