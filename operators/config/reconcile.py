"""The pipeline steps and the admission check of the configuration kinds.

Steps run in the operator with `ctx.services.kube` (anything with `KubeClient.request`); they
read the context a ConfigValues needs (its Environment, the components, the other
ConfigValues) from the API server, so they work for objects written by kubectl, GitOps or the
HTTP API alike.

ConfigValues: Init -> Validated -> Versioned -> Provisioned.
- Init: the checks of `models.values_problems`. A missing Environment or ConfigComponent is
  temporary (GitOps may apply them a moment later: retried with backoff); a level or data that
  does not fit is permanent (Stalled until the spec changes).
- Validated: record the data in force as a version if it changed, apply the retention limit
  (`history.sync`). A `revertTo` naming a version that is not kept is permanent.
- Versioned: publish the effective values into the ConfigMaps asked for by this object and by
  the objects below its point (their effective values include this one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from operators import API_VERSION
from operators.config.history import History, HistoryError, Owner, StaleHistory, data_hash, sync
from operators.config.levels import LevelError, format_point
from operators.config.merge import effective
from operators.config.models import (
    CONFIG_COMPONENT,
    CONFIG_VALUES,
    DEFAULT_HISTORY_LIMIT,
    ConfigComponentSpec,
    ConfigValuesSpec,
    ValuesContext,
    component_problems,
    parse_values_spec,
    values_point,
    values_problems,
)
from operators.config.repository import KubeConfigRepository, StoredValues
from operators.environment.models import ENVIRONMENT, EnvironmentSpec
from operators.runtime import (
    AdmissionRequest,
    ApiError,
    Objects,
    PermanentError,
    Refusal,
    Requester,
    StepContext,
    TemporaryError,
    core_path,
    spec_step,
)

FIELD_MANAGER = "stead-config"


def _kube(ctx: StepContext) -> Requester:
    kube = getattr(ctx.services, "kube", None)
    if kube is None:
        raise TemporaryError("NoApiAccess", "the operator has no Kubernetes client for this step")
    return kube  # type: ignore[no-any-return]


async def load_context(kube: Requester, namespace: str, environment: str, name: str) -> ValuesContext:
    """The Environment, the namespace's ConfigComponents and other ConfigValues, read from the API server."""
    objects = Objects(kube)
    env_raw = await objects.find(ENVIRONMENT, namespace, environment)
    env = None
    if env_raw is not None:
        try:
            env = EnvironmentSpec.model_validate(env_raw.get("spec") or {})
        except ValueError:
            env = None
    components: dict[str, ConfigComponentSpec] = {}
    for item in await objects.list(CONFIG_COMPONENT, namespace):
        try:
            components[str(item["metadata"]["name"])] = ConfigComponentSpec.model_validate(item.get("spec") or {})
        except (ValueError, KeyError):
            continue
    others = [(str(item["metadata"]["name"]), item.get("spec") or {})
              for item in await objects.list(CONFIG_VALUES, namespace)]
    return ValuesContext(environment=env, components=components, others=others, name=name)


def missing_environment(name: str) -> PermanentError:
    return PermanentError("EnvironmentNotFound", f'spec.environment: no Environment "{name}" in this namespace '
                          "(checked again when it appears)")


async def validate_values(ctx: StepContext) -> Mapping[str, Any]:
    """Init -> Validated."""
    model, problems = parse_values_spec(ctx.obj.spec)
    if model is None:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    context = await load_context(_kube(ctx), ctx.obj.namespace, model.environment, ctx.obj.name)
    env = context.environment
    if env is None:  # Stalled, not polled: it is checked again when the Environment appears (DEPENDS_ON)
        raise missing_environment(model.environment)
    missing = [name for name in env.components if name not in context.components]
    problems = values_problems(ctx.obj.spec, context)
    if problems and missing and any(p.startswith("spec.resource:") for p in problems):
        raise PermanentError("ComponentNotFound", f"spec.resource: no ConfigComponent {', '.join(missing)} in this "
                             "namespace (checked again when it appears)")
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    return {"point": format_point(values_point(model, env))}


@spec_step(ConfigValuesSpec)
async def record_version(ctx: StepContext[ConfigValuesSpec]) -> Mapping[str, Any]:
    """Validated -> Versioned."""
    spec = ctx.spec
    history = History(_kube(ctx), Owner(ctx.obj.namespace, ctx.obj.name, ctx.obj.uid))
    try:
        recorded = await sync(history, spec.data, spec.revert_to, spec.history_limit or DEFAULT_HISTORY_LIMIT)
    except StaleHistory as error:
        raise TemporaryError("HistoryBusy", str(error), delay=5) from error
    except HistoryError as error:
        reason = "RevertUnavailable" if spec.revert_to is not None and "revertTo" in str(error) else "HistoryFailed"
        raise PermanentError(reason, str(error)) from error
    return {
        "version": recorded.current.number,
        "dataHash": recorded.current.data_hash,
        "revertedTo": spec.revert_to,
        "versions": [v.info() for v in recorded.kept],
    }


def published_configmap(owner: StoredValues, namespace: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap carrying `owner`'s effective values, as its `spec.publish` asks."""
    publish = owner.spec.publish
    assert publish is not None
    text = (yaml.safe_dump(dict(values), sort_keys=True) if publish.format == "yaml"
            else json_text(values))
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": publish.config_map, "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "stead", "app.kubernetes.io/managed-by": FIELD_MANAGER},
            "annotations": {"stead.dev/data-hash": data_hash(values), "stead.dev/environment": owner.spec.environment,
                            "stead.dev/resource": owner.spec.resource, "stead.dev/level": format_point(owner.point)},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "ConfigValues", "name": owner.name,
                                 "uid": owner.uid, "blockOwnerDeletion": False, "controller": True}],
        },
        "data": {publish.data_key: text},
    }


def stead_published(config_map: Mapping[str, Any]) -> bool:
    """Whether a ConfigMap is one Stead published: controlled by a ConfigValues. Anything else of
    the same name is a user's, and is never overwritten or taken over."""
    refs = (config_map.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("kind") == "ConfigValues" and r.get("apiVersion") == API_VERSION
               for r in refs)


async def _foreign_configmap(kube: Requester, namespace: str, name: str) -> bool:
    try:
        current = await kube.request("GET", core_path("configmaps", namespace, name))
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return not stead_published(current)


def json_text(values: Mapping[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


@spec_step(ConfigValuesSpec)
async def publish(ctx: StepContext[ConfigValuesSpec]) -> Mapping[str, Any]:
    """Versioned -> Provisioned: write the published ConfigMaps at and below this point."""
    kube = _kube(ctx)
    spec = ctx.spec
    snapshot = await KubeConfigRepository(kube).snapshot(ctx.obj.namespace, spec.environment)
    if snapshot is None:
        raise missing_environment(spec.environment)
    try:
        mine = values_point(spec, snapshot.environment)
    except LevelError as error:
        raise PermanentError("InvalidSpec", f"spec.level: {error}") from error
    layers = snapshot.layers(spec.resource)
    facts: dict[str, Any] = {"published": None}
    for stored in snapshot.values:
        if stored.spec.publish is None or stored.spec.resource != spec.resource:
            continue
        if stored.point[: len(mine)] != mine:
            continue  # not at or below this object: its effective values do not include ours
        values = effective(stored.point, layers).values
        body = published_configmap(stored, ctx.obj.namespace, values)
        name = stored.spec.publish.config_map
        try:
            if await _foreign_configmap(kube, ctx.obj.namespace, name):
                if stored.name == ctx.obj.name:
                    raise PermanentError(
                        "ConfigMapNotOwned", f"spec.publish.configMap: ConfigMap {name} exists and was not "
                        "published by Stead; it is left as it is: choose another name, or delete it and apply again")
                continue  # another object's publication: its own reconcile reports it
            await kube.request(
                "PATCH", core_path("configmaps", ctx.obj.namespace, stored.spec.publish.config_map),
                body, content_type="application/apply-patch+yaml",
                params={"fieldManager": FIELD_MANAGER, "force": "true"},
            )
        except ApiError as error:
            if stored.name == ctx.obj.name:
                raise TemporaryError("PublishFailed", error.message) from error
            continue  # another object's publication: its own reconcile reports the failure
        if stored.name == ctx.obj.name:
            facts["published"] = {"configMap": stored.spec.publish.config_map, "key": stored.spec.publish.data_key,
                                  "dataHash": data_hash(values)}
    return facts


@spec_step(ConfigComponentSpec)
async def validate_component(ctx: StepContext[ConfigComponentSpec]) -> Mapping[str, Any]:
    """ConfigComponent Init -> Provisioned: its checks again, for objects that bypassed the webhook."""
    problems = component_problems(ctx.obj.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    spec = ctx.spec
    return {"resourceCount": len(spec.resources), "resources": [r.name for r in spec.resources]}


async def admit_values(request: AdmissionRequest) -> None:
    """The validating webhook's context checks of a ConfigValues (the model's ran already).

    What may still arrive is not refused: a missing Environment, or a resource that no
    component defines while a component the environment enables is missing. A GitOps tool
    applies a directory in an order of its own, so the ConfigValues can come first; the
    pipeline waits for them (Reconciling) instead. Everything else wrong is refused here.
    """
    kube = getattr(request.services, "kube", None)
    if kube is None:
        return  # no API access in this process: the pipeline checks again
    environment = str(request.spec.get("environment") or "")
    context = await load_context(kube, request.namespace, environment, request.name)
    env = context.environment
    if env is None:
        return
    problems = values_problems(request.spec, context)
    missing = [name for name in env.components if name not in context.components]
    if missing:
        problems = [p for p in problems if not p.startswith("spec.resource:")]
    if problems:
        raise Refusal("; ".join(problems), code=422)


# --- re-checking ConfigValues when what they refer to changes -----------------------------
#
# A ConfigValues is checked against its Environment (levels, nodes, roles, enabled components)
# and the ConfigComponent defining its resource (the schema). The runtime re-runs a pipeline
# only when the object's own spec changes, so a later change of those objects is not seen:
# a node removed, a schema tightened, a missing component applied. These say which
# ConfigValues a change concerns, for the runtime's cross-kind trigger to re-check them.


def refers_to_environment(values_spec: Mapping[str, Any], environment: str) -> bool:
    """Does this ConfigValues spec (same namespace) depend on the Environment named so?"""
    return values_spec.get("environment") == environment


def refers_to_component(values_spec: Mapping[str, Any], component: str) -> bool:
    """Does it depend on the ConfigComponent named so? Any component of the namespace may define
    (or stop defining, or start defining) its resource, so every ConfigValues there does."""
    return bool(values_spec.get("resource"))


DEPENDS_ON = {ENVIRONMENT.kind: refers_to_environment, CONFIG_COMPONENT.kind: refers_to_component}
"""For the runtime: re-check a ConfigValues when an object of these kinds, in its namespace,
changes (a new generation Provisioned, or deleted) and the function says it refers to it."""
