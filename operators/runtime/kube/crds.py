"""CustomResourceDefinitions generated from the pydantic models, so the models are the one source.

Pydantic's JSON schema is close to, but not, a Kubernetes *structural* schema: it uses `$ref`,
`anyOf` with `null` for optional fields, titles, and defaults that the API server would write
into the user's spec (a GitOps tool would then see a diff). `structural` rewrites it.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Sequence
from typing import Any

import yaml

from operators import GROUP, VERSION
from operators.runtime.core.kinds import Kind, Model
from operators.runtime.kube.client import ApiError, KubeClient, custom_path

log = logging.getLogger(__name__)

CATEGORY = "stead"
SHIPPED_LABEL = "stead.dev/shipped"
"""On the objects Stead ships (`Kind.shipped`): the built-in ClusterLifecycles."""
MUTATING_ANNOTATION = "stead.dev/mutating-webhook"
VALIDATING_ANNOTATION = "stead.dev/validating-webhook"
FINALIZER_ANNOTATION = "stead.dev/finalizer"
ADMIT_DELETE_ANNOTATION = "stead.dev/admit-delete"
"""The validating webhook also sees DELETE requests of this kind (the chart reads it)."""
"""On the CRDs of kinds with a `cleanup`: their objects hold `kinds.FINALIZER`, which the operator
JSON-patches into and out of metadata.finalizers (the chart grants `patch` on exactly these kinds)."""


def _webhook_annotations(kind: Kind) -> dict[str, str]:
    annotations = {}
    if kind.validates:
        annotations[VALIDATING_ANNOTATION] = "true"
    if kind.mutates:
        annotations[MUTATING_ANNOTATION] = "true"
    if kind.cleanup is not None:
        annotations[FINALIZER_ANNOTATION] = "true"
    if kind.admit_delete:
        annotations[ADMIT_DELETE_ANNOTATION] = "true"
    return annotations

_DROP = {"title", "default", "examples"}


def structural(model: type[Model]) -> dict[str, Any]:
    """The structural openAPIV3Schema of a model."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})
    out: dict[str, Any] = _rewrite(schema, defs)
    return out


def _rewrite(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_rewrite(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _rewrite(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) == 1:
            single: dict[str, Any] = _rewrite({**options[0], **rest}, defs)
            if len(options) < len(node["anyOf"]):
                single["nullable"] = True
            return single
        raise ValueError(f"a union of several types is not structural: {node['anyOf']}")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key.startswith("x-kubernetes-"):
            out[key] = copy.deepcopy(value)  # CEL rules, list types: verbatim
        elif key == "properties":
            out[key] = {name: _rewrite(sub, defs) for name, sub in value.items()}
        elif key == "additionalProperties":
            if value is False:
                continue  # extra="forbid": the API server prunes unknown fields anyway
            if value is True or value == {}:  # dict[str, Any]: keep whatever is there, or it is pruned
                out["x-kubernetes-preserve-unknown-fields"] = True
                continue
            out[key] = _rewrite(value, defs)
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = _rewrite(value, defs)
    if not out.get("type") and "properties" not in out and "enum" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True  # `Any`: free-form data
    if "properties" in out:
        out.setdefault("type", "object")
    return out


def _columns(kind: Kind) -> list[dict[str, Any]]:
    cols: list[dict[str, Any]] = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
         "description": "Pipeline phase, from Init to Provisioned."},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
         "description": "Whether the object is Ready."},
    ]
    for c in kind.columns:
        col: dict[str, Any] = {"name": c.name, "type": c.type, "jsonPath": c.json_path}
        if c.description:
            col["description"] = c.description
        if c.priority:
            col["priority"] = c.priority
        cols.append(col)
    cols.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    return cols


def crd_for(kind: Kind) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    spec_schema = structural(kind.spec_model)
    status_schema = structural(kind.status_model)
    status_schema["description"] = "Written by Stead only."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {"app.kubernetes.io/part-of": "stead"},
            # Tell the Helm chart (which renders webhooks and RBAC from the CRD files) which webhooks a kind
            # has and whether its objects hold a finalizer.
            **({"annotations": webhooks} if (webhooks := _webhook_annotations(kind)) else {}),
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster" if kind.cluster_scoped else "Namespaced",
            "names": {
                "kind": kind.kind,
                "plural": kind.plural,
                "singular": kind.singular,
                "listKind": f"{kind.kind}List",
                "shortNames": list(kind.short_names),
                # `kubectl get stead` lists every kind, the cluster-wide ClusterLifecycles too (docs/README.md
                # promises it: a user looking for the lifecycles a ServiceEntity may name finds them there)
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _columns(kind),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": kind.description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def render(kind: Kind) -> str:
    """The YAML text checked in as `crds/<plural>.yaml`."""
    header = "# Generated by `stead crds` from the pydantic models. Do not edit.\n"
    return header + yaml.safe_dump(crd_for(kind), sort_keys=False, width=100)


async def install_crds(kube: KubeClient, kinds: Sequence[Kind], wait_seconds: float = 30.0) -> None:
    """Server-side apply each kind's CRD and wait (bounded) until the API server serves it."""
    for kind in kinds:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind.crd_name}"
        await kube.apply(path, crd_for(kind))
    deadline = time.monotonic() + wait_seconds
    for kind in kinds:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind.crd_name}"
        while True:
            conds = (await kube.request("GET", path)).get("status", {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {kind.crd_name} not established after {wait_seconds:.0f}s")
            await asyncio.sleep(0.2)


CLUSTER_OBJECT_PATHS = {
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
}
"""Where the kinds' cluster objects (`Kind.cluster_objects`) are applied: the kinds they may be."""


async def install_cluster_objects(kube: KubeClient, kinds: Sequence[Kind]) -> None:
    """Server-side apply each kind's cluster objects (`stead operator --install-crds`)."""
    for kind in kinds:
        for obj in kind.cluster_objects() if kind.cluster_objects else ():
            await kube.apply(f"{CLUSTER_OBJECT_PATHS[obj['kind']]}/{obj['metadata']['name']}", dict(obj))


def shipped_objects(kind: Kind) -> list[dict[str, Any]]:
    """The objects Stead ships of a kind (`Kind.shipped`), whole, as they are applied."""
    if kind.shipped is None:
        return []
    return [{
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind.kind,
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "stead", SHIPPED_LABEL: "true"}},
        "spec": copy.deepcopy(dict(spec)),
    } for name, spec in kind.shipped().items()]


def render_object(obj: dict[str, Any]) -> str:
    """The YAML text of a shipped object, as the chart's `files/objects/<plural>-<name>.yaml`."""
    header = "# Generated by `stead crds` from the code's data. Do not edit.\n"
    return header + yaml.safe_dump(obj, sort_keys=False, width=100)


async def apply_shipped(kube: KubeClient, kinds: Sequence[Kind], wait_seconds: float = 60.0) -> None:
    """Install or update the objects Stead ships (the built-in ClusterLifecycles), at every start.

    The operator does it rather than the chart: a Helm hook could only apply them after the release
    (and an upgrade deleted and re-created them, so instances briefly lost their lifecycle), and
    needed `--wait` for the webhook to serve. Here they are applied once the webhook serves, and an
    upgraded operator brings its new built-ins with it. An object of the same name that is not
    Stead's (no `stead.dev/shipped` label) is an admin's: left as it is, said once. Errors the API
    server may stop giving (the webhook not serving yet, an outage) are retried until
    `wait_seconds`; a refusal that will not change (403: the chart's RBAC leaves shipped objects to
    someone else) is said once."""
    deadline = time.monotonic() + wait_seconds
    for kind in kinds:
        for obj in shipped_objects(kind):
            await _ship(kube, kind, obj, deadline)


async def _ship(kube: KubeClient, kind: Kind, obj: dict[str, Any], deadline: float) -> None:
    name = obj["metadata"]["name"]
    path = custom_path(kind.plural, None if kind.cluster_scoped else "default", name)
    while True:
        try:
            try:
                current = await kube.request("GET", path)
            except ApiError as error:
                if error.status != 404:
                    raise
                current = None
            if current is not None:
                labels = (current.get("metadata") or {}).get("labels") or {}
                if labels.get(SHIPPED_LABEL) != "true":
                    log.warning("%s %s exists and is not Stead's (no %s label): left as it is",
                                kind.kind, name, SHIPPED_LABEL)
                    return
                if current.get("spec") == obj["spec"]:
                    return
            await kube.apply(path, obj)
            log.info("%s %s %s", kind.kind, name, "installed" if current is None else "updated")
            return
        except ApiError as error:
            if error.status in (401, 403) or time.monotonic() > deadline:
                log.warning("%s %s not applied: %s", kind.kind, name, error)
                return
            await asyncio.sleep(1.0)
