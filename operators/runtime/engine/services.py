"""What the operator process lends to a kind's steps: API access, the local store, Events.

One object, built once per process and passed to every step through `StepContext.services`,
instead of module globals: a step's dependencies are visible in its signature and a unit test
can hand it exactly what it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from operators.runtime.core.services import EventSink as EventSink
from operators.runtime.core.services import Services as StepServices
from operators.runtime.core.store import LocalStore
from operators.runtime.engine.runs import RunSettings
from operators.runtime.engine.slots import RunSlots, default_limit
from operators.runtime.kube.client import KubeClient
from operators.runtime.kube.watch import Watch
from operators.runtime.secrets import Vault
from operators.runtime.serving.metrics import Metrics


@dataclass(frozen=True)
class Services:
    """The one implementation of `operators.runtime.core.services.Services`, the protocol through
    which steps and admission checks see it (the core names only what they use)."""

    kube: KubeClient
    store: LocalStore
    events: EventSink
    replica: str
    vault: Vault
    runs: RunSettings
    """How workflow runs are started and where their scripts run (`operators.runtime.engine.runs`)."""
    metrics: Metrics = field(default_factory=Metrics)
    """The operator's metrics, the ones `/metrics` serves (a fresh, unserved set when not given)."""
    run_slots: RunSlots = field(default_factory=lambda: RunSlots(default_limit()))
    """The bound on workflow runs at once (`RunSettings.max_concurrent`), shared by every kind."""
    owns: Callable[[str], bool] = lambda project: True
    """Whether this replica acts on a project now (with sharding: holds its claim). An addon that acts on
    objects by itself (not through a reconciler) asks it first, as the reconcilers do."""
    owned_watches: Mapping[str, Watch] = field(default_factory=dict)
    """With sharding (and no `--namespace`), the operator's watches of namespaced kinds that select the
    buckets of this replica's projects, by plural, not started before the addons: an addon that acts on the
    objects of its own projects only taps these rather than watching every namespace."""
    watches: Mapping[str, Watch] = field(default_factory=dict)
    """The operator's watches that see every object of their kind, by plural (none with sharding or
    `--namespace`), not started before the addons: an addon that follows the same objects taps
    them (`Watch.add_tap`) rather than watching again."""


def lent(services: Services) -> StepServices:
    """`services` as steps see it: here mypy checks that `Services` satisfies the core's protocol."""
    return services
