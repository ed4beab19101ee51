"""The three kinds of the service lifecycle manager, as the operator serves them (docs/services.md).

| kind | phases |
|---|---|
| Lifecycle (`lc`) | `Init → Provisioned` (checked; each state's model state in status) |
| ClusterLifecycle (`clc`) | the same, cluster-scoped (the built-ins are shipped as ClusterLifecycles) |
| ServiceEntity (`se`) | `Init → Validated → Provisioned` (its lifecycle and Blueprint found and fit) |
| ServiceInstance (`si`) | `Init → Realizing → Provisioned` (triggers taken in; its App where the state wants it) |
| ServiceOrder (`so`) | `Init → Running → Provisioned` (items in dependency order; else `Failed` or `Partial`) |

A ServiceInstance that settles waiting for its client shows `Rejected`, `Failed` or `Refused` instead
(`instance.settled_problem`), never the `Realizing` it stopped in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from operators.calm.models import APP, BLUEPRINT
from operators.lsm.builtin import object_name, shipped
from operators.lsm.entity import (
    check_entity,
    check_lifecycle,
    entity_admission,
    entity_semantic_problems,
    lifecycle_semantic_problems,
    resolve_entity,
)
from operators.lsm.expert import expert_policy, expert_role
from operators.lsm.instance import admission, realize_step, release, take_in
from operators.lsm.models import (
    CLUSTER_LIFECYCLE,
    LIFECYCLE,
    LIFECYCLE_COLUMNS,
    SERVICE_ENTITY,
    SERVICE_ENTITY_COLUMNS,
    SERVICE_INSTANCE,
    SERVICE_INSTANCE_COLUMNS,
    SERVICE_ORDER,
    SERVICE_ORDER_COLUMNS,
    BuiltinName,
    LifecycleSpec,
    LifecycleStatus,
    ServiceEntitySpec,
    ServiceEntityStatus,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
    ServiceOrderSpec,
    ServiceOrderStatus,
)
from operators.lsm.order_rights import order_rights_policy
from operators.lsm.ordering import check_order, run_order
from operators.lsm.orders import order_spec_problems
from operators.lsm.relations import mentions
from operators.runtime import Kind, Pipeline, named_after


def _lifecycle_name(spec: Mapping[str, Any]) -> Any:
    return (spec.get("lifecycle") or {}).get("name")


def _cluster_lifecycle_name(spec: Mapping[str, Any]) -> Any:
    """The ClusterLifecycle an entity follows: `cluster`, or the one a built-in is shipped as."""
    ref = spec.get("lifecycle") or {}
    builtin = ref.get("builtin")
    return object_name(cast(BuiltinName, builtin)) if isinstance(builtin, str) else ref.get("cluster")


def _blueprint_name(spec: Mapping[str, Any]) -> Any:
    return (spec.get("realization") or {}).get("blueprint")


def _any_version(spec: Mapping[str, Any], named: Callable[[Mapping[str, Any]], Any], name: str) -> bool:
    """Whether the entity's current version or one of its other versions (`spec.versions`) refers to `name`."""
    return any(named(version) == name for version in (spec, *(spec.get("versions") or [])))


LIFECYCLE_KIND = Kind(
    kind=LIFECYCLE.kind,
    plural=LIFECYCLE.plural,
    short_names=("lc",),
    description="A service lifecycle: the states a service instance can be in and the transfers between them "
    "(Inmanta's LSM fields), for the ServiceEntities of its namespace.",
    spec_model=LifecycleSpec,
    status_model=LifecycleStatus,
    pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": check_lifecycle}),
    columns=LIFECYCLE_COLUMNS,
    problems=lifecycle_semantic_problems,
)

CLUSTER_LIFECYCLE_KIND = Kind(
    kind=CLUSTER_LIFECYCLE.kind,
    plural=CLUSTER_LIFECYCLE.plural,
    short_names=("clc",),
    description="A cluster-wide service lifecycle, for the ServiceEntities of every namespace (lifecycle: "
    "{cluster: NAME}); the same fields as a Lifecycle. Stead ships simple, service and testing-basic-lifecycle "
    "(lifecycle: {builtin: NAME}).",
    spec_model=LifecycleSpec,
    status_model=LifecycleStatus,
    pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": check_lifecycle}),
    columns=LIFECYCLE_COLUMNS,
    problems=lifecycle_semantic_problems,
    cluster_scoped=True,
    shipped=shipped,
)

SERVICE_ENTITY_KIND = Kind(
    kind=SERVICE_ENTITY.kind,
    plural=SERVICE_ENTITY.plural,
    short_names=("se",),
    description="A service of the catalog: typed attributes with modifiers (r, rw, rw+), an optional identity, "
    "the lifecycle its instances follow, and the Blueprint an instance is realized from.",
    spec_model=ServiceEntitySpec,
    status_model=ServiceEntityStatus,
    pipeline=Pipeline(phases=("Init", "Validated", "Provisioned"),
                      steps={"Init": check_entity, "Validated": resolve_entity}),
    columns=SERVICE_ENTITY_COLUMNS,
    problems=entity_semantic_problems,
    admission=entity_admission,
    # checked again when its lifecycle (of its namespace or cluster-wide) or Blueprint appears, is changed,
    # changes readiness or goes; its instances then are too (Reconciler.recheck_referrers)
    # (those of every version it holds: spec.versions)
    depends_on={LIFECYCLE.kind: lambda spec, name: _any_version(spec, _lifecycle_name, name),
                CLUSTER_LIFECYCLE.kind: lambda spec, name: _any_version(spec, _cluster_lifecycle_name, name),
                BLUEPRINT.kind: lambda spec, name: _any_version(spec, _blueprint_name, name)},
)

SERVICE_INSTANCE_KIND = Kind(
    kind=SERVICE_INSTANCE.kind,
    plural=SERVICE_INSTANCE.plural,
    short_names=("si",),
    description="A service instance of a ServiceEntity: the client's attributes and state requests in spec; "
    "its lifecycle state, version, candidate/active/rollback attribute sets, its App and a log of transfers "
    "in status.",
    spec_model=ServiceInstanceSpec,
    status_model=ServiceInstanceStatus,
    pipeline=Pipeline(phases=("Init", "Realizing", "Provisioned"),
                      steps={"Init": take_in, "Realizing": realize_step}),
    columns=SERVICE_INSTANCE_COLUMNS,
    admission=admission,
    admit_delete=True,
    cleanup=release,
    # checked again when its entity changes readiness (auto transfers switched on, ways out), when its
    # App (named after it) becomes Ready, stops being Ready or goes, and when an instance it names in a
    # relation does (a deployment waiting for it to be up goes on)
    depends_on={SERVICE_ENTITY.kind: lambda spec, name: spec.get("entity") == name, APP.kind: named_after,
                SERVICE_INSTANCE.kind: mentions},
    # expert mode's permission (verb expert) and its audit's honesty, enforced by the API server itself
    cluster_objects=lambda: (*expert_policy(), expert_role()),
)



def _orders_instance(spec: Mapping[str, Any], name: str) -> bool:
    return any(isinstance(item, Mapping) and item.get("instance") == name for item in spec.get("items") or [])


SERVICE_ORDER_KIND = Kind(
    kind=SERVICE_ORDER.kind,
    plural=SERVICE_ORDER.plural,
    short_names=("so",),
    description="A service order: several ServiceInstances of its namespace created, updated or deleted at once, "
    "in the order of the dependencies between its items (Inmanta's service orders); each item's state and "
    "failure type, and the order's result (completed, failed or partial) in status. Immutable once accepted.",
    spec_model=ServiceOrderSpec,
    status_model=ServiceOrderStatus,
    pipeline=Pipeline(phases=("Init", "Running", "Provisioned"),
                      steps={"Init": check_order, "Running": run_order},
                      ended=frozenset({"Failed", "Partial"})),
    columns=SERVICE_ORDER_COLUMNS,
    problems=order_spec_problems,
    # checked again when an instance it names becomes Ready or Stalled, or goes: an item's outcome
    depends_on={SERVICE_INSTANCE.kind: _orders_instance},
    # an order's author needs the verb of each item's action on the namespace's instances (the operator
    # carries the order out with its own rights), enforced by the API server itself
    cluster_objects=order_rights_policy,
)

KINDS: tuple[Kind, ...] = (LIFECYCLE_KIND, CLUSTER_LIFECYCLE_KIND, SERVICE_ENTITY_KIND, SERVICE_INSTANCE_KIND,
                           SERVICE_ORDER_KIND)
