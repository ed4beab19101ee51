"""Drives the objects of one kind through their pipeline: the bridge between events and the engine.

Four parts, one per job, sharing one record per object (`table`: what is known of each object):
- `reconcile`: the `Reconciler` itself: receives the watch events, plans, runs the steps, writes
  status (one PATCH per visible transition) and the finalizer;
- `queue`: one reconcile at a time per object, coalesced events, retries with backoff, cancellation;
- `dependents`: when a change must reach the objects that refer to the one changed, and which;
- `handover`: a project moving to or from this replica (`drain`, `prepare`, `rebuild`, `resume`).

What the rest of the operator uses is imported from here.
"""

from operators.runtime.core.clock import utc_now
from operators.runtime.engine.reconciler.handover import DRAIN_GRACE
from operators.runtime.engine.reconciler.queue import Backoff
from operators.runtime.engine.reconciler.reconcile import (
    DELETING,
    ProjectOwnership,
    Reconciler,
    StatusWriter,
    WriteCheck,
    WriteFailed,
)

__all__ = [
    "DELETING",
    "DRAIN_GRACE",
    "Backoff",
    "ProjectOwnership",
    "Reconciler",
    "StatusWriter",
    "WriteCheck",
    "WriteFailed",
    "utc_now",
]
