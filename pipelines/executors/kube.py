"""`kubernetes`: apply or delete rendered manifests, then wait until they are ready (or gone).

Parameters: ``action`` (``apply``, the default, or ``delete``), ``manifest`` (YAML text with one
or more documents, a mapping, or a list of mappings; rendered at step start like every parameter),
``namespace`` (for namespaced objects that name none), ``namespaceOnly`` (default false: true
refuses the whole manifest, before anything is applied or deleted, unless every object is of a kind
the API server serves as namespaced, by API discovery, and in ``namespace``), ``wait`` (default
true), ``pollIntervalSeconds`` (default 1). The step's ``timeoutSeconds`` bounds the wait.

``namespaceOnly`` judges the objects as rendered, right before they are sent, by what the API
server says of their kinds: a manifest that is YAML only once rendered, a kind decided by a
variable, or a cluster-scoped kind no list foresaw (a ValidatingAdmissionPolicy, a
CertificateSigningRequest, a custom resource) is refused all the same.

Readiness is judged per kind the way ``kubectl rollout status`` and Helm's ``--wait`` do:
workloads when their updated replicas are available, Jobs when complete (failed is a failure),
Pods when ready or succeeded, claims when bound, anything with a ``Ready`` condition when it is
true (a ``Stalled=True`` condition is a failure), and anything else as soon as it exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from pipelines.executors.base import ParameterError, StepContext, StepFailed, StepResult, number, parameter
from pipelines.kubeapi import KubeApi, KubeApiError

CLUSTER_SCOPED = frozenset({  # well-known ones, for early messages; `namespaceOnly` asks API discovery
    "Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass",
    "CustomResourceDefinition", "PriorityClass", "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration", "APIService", "IngressClass", "RuntimeClass",
})


def manifests(ctx: StepContext) -> list[dict[str, Any]]:
    raw = parameter(ctx, "manifest", (str, dict, list))
    docs: list[Any]
    if isinstance(raw, str):
        try:
            docs = [d for d in yaml.safe_load_all(raw) if d is not None]
        except yaml.YAMLError as exc:
            raise ParameterError(f"kubernetes step {ctx.step_id!r}: manifest is not YAML: {exc}") from None
    else:
        docs = raw if isinstance(raw, list) else [raw]
    namespace = parameter(ctx, "namespace", str, "")
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            raise ParameterError(f"kubernetes step {ctx.step_id!r}: document {index} has no apiVersion/kind")
        meta = doc.setdefault("metadata", {})
        if not meta.get("name"):
            raise ParameterError(f"kubernetes step {ctx.step_id!r}: document {index} has no metadata.name")
        if namespace and not meta.get("namespace") and doc["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = namespace
        out.append(doc)
    return out


def scope_problem(objs: list[dict[str, Any]], namespace: str, namespaced: Callable[[str, str], bool]) -> str | None:
    """Why `objs` may not all be applied (or deleted) by a step confined to `namespace`: an object
    of a kind `namespaced` (API discovery) says is cluster-scoped, or of another namespace; None
    when every one is a namespaced object of `namespace`."""
    for index, obj in enumerate(objs):
        api_version, kind, other, name = _ident(obj)
        what = f"document {index} ({kind} {name})"
        if not namespaced(api_version, kind):
            return f"{what}: {kind} is cluster-scoped; this step may only touch objects in namespace {namespace}"
        if other not in (None, "", namespace):
            return f"{what}: names namespace {other}; this step may only touch objects in namespace {namespace}"
    return None


def readiness(obj: Mapping[str, Any]) -> tuple[bool, str]:
    """(ready, why not). Raises `StepFailed` when the object reports a terminal failure."""
    kind = obj.get("kind", "")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    if generation is not None and observed is not None and observed < generation:
        return False, "the controller has not seen the latest spec yet"
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        want = spec.get("replicas", 1)
        if kind == "Deployment":
            if conditions.get("Progressing", {}).get("reason") == "ProgressDeadlineExceeded":
                raise StepFailed(f"Deployment {meta.get('name')}: progress deadline exceeded")
            have = min(status.get("updatedReplicas", 0), status.get("availableReplicas", 0))
            if status.get("replicas", 0) > want:
                return False, f"{status.get('replicas')} replicas, old ones still terminating"
        elif kind == "StatefulSet":
            have = status.get("readyReplicas", 0)
            if status.get("updateRevision") and status.get("currentRevision") != status.get("updateRevision"):
                return False, "rolling update in progress"
        else:
            have = status.get("readyReplicas", 0)
        return have >= want, f"{have}/{want} replicas ready"
    if kind == "DaemonSet":
        want = status.get("desiredNumberScheduled", 0)
        have = min(status.get("numberReady", 0), status.get("updatedNumberScheduled", 0))
        return have >= want, f"{have}/{want} pods ready"
    if kind == "Job":
        if conditions.get("Failed", {}).get("status") == "True":
            raise StepFailed(f"Job {meta.get('name')} failed: {conditions['Failed'].get('message', '')}")
        return conditions.get("Complete", {}).get("status") == "True", "not complete"
    if kind == "Pod":
        phase = status.get("phase")
        if phase == "Failed":
            raise StepFailed(f"Pod {meta.get('name')} failed")
        return phase == "Succeeded" or conditions.get("Ready", {}).get("status") == "True", f"phase {phase}"
    if kind == "PersistentVolumeClaim":
        return status.get("phase") == "Bound", f"phase {status.get('phase')}"
    if kind == "Service" and spec.get("type") == "LoadBalancer":
        return bool((status.get("loadBalancer") or {}).get("ingress")), "no load balancer address yet"
    if conditions.get("Stalled", {}).get("status") == "True":
        raise StepFailed(f"{kind} {meta.get('name')} is stalled: {conditions['Stalled'].get('message', '')}")
    if "Ready" in conditions:
        return conditions["Ready"].get("status") == "True", str(conditions["Ready"].get("message", "not ready"))
    return True, ""


def _ident(obj: Mapping[str, Any]) -> tuple[str, str, str | None, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]


def _describe(obj: Mapping[str, Any]) -> str:
    _, kind, namespace, name = _ident(obj)
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


class KubernetesExecutor:
    def __init__(self, api: KubeApi | None) -> None:
        self.api = api

    def run(self, ctx: StepContext) -> StepResult:
        if self.api is None:
            raise ParameterError("kubernetes steps need a Kubernetes client; none was configured for this run")
        api = self.api
        action = parameter(ctx, "action", str, "apply")
        if action not in ("apply", "delete"):
            raise ParameterError(f"kubernetes step {ctx.step_id!r}: action must be apply or delete")
        objs = manifests(ctx)
        wait = parameter(ctx, "wait", bool, True)
        poll = number(ctx, "pollIntervalSeconds", 1.0)
        if parameter(ctx, "namespaceOnly", bool, False):
            self._confine(ctx, objs)
        ctx.check()
        for obj in objs if action == "apply" else reversed(objs):
            if action == "apply":
                api.apply(obj)
                ctx.output(f"applied {_describe(obj)}", "stdout")
            else:
                gone = not api.delete(*_ident(obj))
                ctx.output(f"{'not found' if gone else 'deleted'} {_describe(obj)}", "stdout")
        if not wait:
            return StepResult(message=f"{action} {len(objs)} object(s)")
        pending = list(objs)
        why = ""
        while pending:
            still: list[dict[str, Any]] = []
            for obj in pending:
                live = api.get(*_ident(obj))
                if action == "delete":
                    if live is not None:
                        still.append(obj)
                        why = f"{_describe(obj)} still exists"
                    continue
                if live is None:
                    still.append(obj)
                    why = f"{_describe(obj)} does not exist yet"
                    continue
                ready, reason = readiness(live)
                if ready:
                    ctx.output(f"ready {_describe(obj)}", "stdout")
                else:
                    still.append(obj)
                    why = f"{_describe(obj)}: {reason}"
            pending = still
            if not pending:
                break
            if ctx.timed_out():
                raise StepFailed(f"timed out after {ctx.timeout:g}s waiting: {why}")
            ctx.wait(poll)
        return StepResult(message=f"{action} {len(objs)} object(s): {'ready' if action == 'apply' else 'gone'}")

    def _confine(self, ctx: StepContext, objs: list[dict[str, Any]]) -> None:
        """Refuse the manifest unless every rendered object is a namespaced one of ``namespace``."""
        assert self.api is not None
        api = self.api
        namespace = parameter(ctx, "namespace", str, "")
        if not namespace:
            raise ParameterError(f"kubernetes step {ctx.step_id!r}: namespaceOnly needs the parameter 'namespace'")

        def namespaced(api_version: str, kind: str) -> bool:
            try:
                return api.namespaced(api_version, kind)
            except KubeApiError as error:
                raise ParameterError(f"kubernetes step {ctx.step_id!r}: {kind} of {api_version}: "
                                     f"{error}") from None

        # a namespaced object that names no namespace goes to `namespace` (manifests() knew a list only)
        for obj in objs:
            meta = obj["metadata"]
            if not meta.get("namespace") and namespaced(obj["apiVersion"], obj["kind"]):
                meta["namespace"] = namespace
        problem = scope_problem(objs, namespace, namespaced)
        if problem is not None:
            raise ParameterError(f"kubernetes step {ctx.step_id!r}: {problem}")
