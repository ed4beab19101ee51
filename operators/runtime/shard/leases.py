"""Lease objects (coordination.k8s.io/v1) through the project's API client, and their time format.

Only `Requester.request` is used (GET, POST, PUT with `metadata.resourceVersion`, list with a
label selector), so `KubeClient` and the unit tests' `FakeApi` both serve, and nothing had to be
added to `operators.runtime.kube`. A PUT carrying the resourceVersion we read is the
compare-and-swap: the API server answers 409 when anyone wrote the Lease since.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from operators.runtime.kube.client import Requester, list_all, segment

API_VERSION = "coordination.k8s.io/v1"
NAME_LABEL = "app.kubernetes.io/name"
ROLE_LABEL = "stead.dev/role"
APP = "stead"


def leases_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{segment(namespace)}/leases"
    return path if name is None else f"{path}/{segment(name)}"


def micro_time(moment: datetime) -> str:
    """A Lease's MicroTime (`acquireTime`, `renewTime`): RFC 3339 in UTC to the microsecond, the
    only form the API server accepts for these fields."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(stamp: object) -> datetime | None:
    """A MicroTime (or any RFC 3339 time) as an aware datetime; None when absent or unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def wall_now() -> datetime:
    return datetime.now(UTC)


def lease_body(
    namespace: str, name: str, role: str, spec: Mapping[str, Any], *, labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None, resource_version: str | None = None,
) -> dict[str, Any]:
    """A whole Lease as Stead writes it (a PUT replaces everything: say it all every time)."""
    meta: dict[str, Any] = {
        "name": name, "namespace": namespace,
        "labels": {NAME_LABEL: APP, ROLE_LABEL: role, **(labels or {})},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": meta,
            "spec": {k: v for k, v in spec.items() if v is not None}}


async def get_lease(api: Requester, namespace: str, name: str) -> dict[str, Any]:
    return await api.request("GET", leases_path(namespace, name))


async def create_lease(api: Requester, body: Mapping[str, Any]) -> dict[str, Any]:
    """Create; 409 (ApiError) when it exists: someone else created it first."""
    meta = body["metadata"]
    return await api.request("POST", leases_path(meta["namespace"]), dict(body))


async def replace_lease(api: Requester, body: Mapping[str, Any]) -> dict[str, Any]:
    """Replace, conditional on `metadata.resourceVersion` in `body`; 409 when it changed since."""
    meta = body["metadata"]
    if not meta.get("resourceVersion"):
        raise ValueError("an unconditional Lease replace would not be a compare-and-swap")
    return await api.request("PUT", leases_path(meta["namespace"], meta["name"]), dict(body))


async def list_leases(api: Requester, namespace: str, role: str) -> list[dict[str, Any]]:
    """Stead's Leases of one role in the namespace, found by label (filtered by the API server)."""
    items, _ = await list_all(api, leases_path(namespace), {"labelSelector": lease_selector(role)})
    return items


def lease_selector(role: str) -> str:
    """The label selector of Stead's Leases of one role (for a LIST or a WATCH)."""
    return f"{NAME_LABEL}={APP},{ROLE_LABEL}={role}"


def spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}
