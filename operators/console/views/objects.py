"""Every Stead object of a namespace, as `kubectl get stead` lists them, and one object's page: the object,
its conditions and its Events. Read as the user: a kind the user may not list is left out (and named), so a
user without rights sees nothing, not an error full of data."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute
from operators.runtime import ApiError, Kind, core_path, crd_for, custom_path, object_name_ok

_CONDITION = re.compile(r'^\.status\.conditions\[\?\(@\.type=="(\w+)"\)\]\.(\w+)$')


def column_value(obj: Mapping[str, Any], json_path: str) -> Any:
    """A printer column's cell: the JSONPath forms Stead's CRDs use (`.a.b`, a condition's field)."""
    match = _CONDITION.match(json_path)
    if match:
        conditions = (obj.get("status") or {}).get("conditions") or []
        found = next((c for c in conditions if isinstance(c, dict) and c.get("type") == match.group(1)), None)
        return None if found is None else found.get(match.group(2))
    value: Any = obj
    for part in json_path.lstrip(".").split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


@dataclass(frozen=True)
class KindInfo:
    kind: str
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool
    description: str
    columns: tuple[Mapping[str, Any], ...]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "plural": self.plural, "shortNames": list(self.short_names),
                "namespaced": self.namespaced, "description": self.description,
                "columns": [{"name": c["name"], "type": c.get("type", "string")} for c in self.columns]}

    def row(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        metadata = obj.get("metadata") or {}
        return {"kind": self.kind, "plural": self.plural, "name": metadata.get("name"),
                "namespace": metadata.get("namespace"),
                "cells": [column_value(obj, column["jsonPath"]) for column in self.columns]}


def kind_infos(kinds: Sequence[Kind]) -> tuple[KindInfo, ...]:
    infos = []
    for kind in kinds:
        version = crd_for(kind)["spec"]["versions"][0]
        infos.append(KindInfo(kind.kind, kind.plural, tuple(kind.short_names), not kind.cluster_scoped,
                              kind.description, tuple(version.get("additionalPrinterColumns") or ())))
    return tuple(infos)


def checked_name(call: ConsoleCall, key: str) -> str:
    value = call.params.get(key, "")
    if not object_name_ok(value):
        raise ConsoleError(400, f"{key}: {value[:64]!r} is not a Kubernetes name")
    return value


class ObjectViews:
    """The routes over the catalog's kinds (given: the console does not reach for the catalog itself)."""

    def __init__(self, kinds: Sequence[Kind]) -> None:
        self.infos = kind_infos(kinds)
        self.by_plural = {info.plural: info for info in self.infos}

    def info(self, call: ConsoleCall) -> KindInfo:
        plural = call.params.get("plural", "")
        found = self.by_plural.get(plural)
        if found is None:
            raise ConsoleError(404, f"{plural[:40]!r} is not one of Stead's kinds")
        return found

    async def kinds(self, call: ConsoleCall) -> Any:
        return {"kinds": [info.describe() for info in self.infos]}

    async def namespaces(self, call: ConsoleCall) -> Any:
        """The namespaces the user may list (none when RBAC says no: the page then asks for one by name)."""
        try:
            listed = await call.kube.request("GET", "/api/v1/namespaces")
        except ApiError as error:
            if error.status != 403:
                raise
            return {"namespaces": [], "listable": False}
        return {"namespaces": sorted(str(item["metadata"]["name"]) for item in listed.get("items") or []),
                "listable": True}

    async def objects(self, call: ConsoleCall) -> Any:
        """Every Stead object in the namespace, kind by kind (`kubectl get stead`), and the kinds refused."""
        namespace = checked_name(call, "namespace")
        namespaced = [info for info in self.infos if info.namespaced]

        async def listed(info: KindInfo) -> list[dict[str, Any]] | None:
            try:
                answer = await call.kube.request("GET", custom_path(info.plural, namespace))
            except ApiError as error:
                if error.status in (403, 404):
                    return None
                raise
            return [info.row(item) for item in answer.get("items") or []]

        results = await asyncio.gather(*(listed(info) for info in namespaced))
        groups = [{"kind": info.describe(), "rows": rows}
                  for info, rows in zip(namespaced, results, strict=True) if rows]
        refused = [info.kind for info, rows in zip(namespaced, results, strict=True) if rows is None]
        return {"namespace": namespace, "groups": groups, "refused": refused}

    async def one(self, call: ConsoleCall) -> Any:
        """One object, with its YAML and its Events (the Events left out when the user may not list them)."""
        info = self.info(call)
        name = checked_name(call, "name")
        namespace = checked_name(call, "namespace") if info.namespaced else None
        obj = await call.kube.request("GET", custom_path(info.plural, namespace, name))
        events: list[dict[str, Any]] | None = None
        if namespace is not None:
            try:
                listed = await call.kube.request("GET", core_path("events", namespace), params={
                    "fieldSelector": f"involvedObject.uid={obj['metadata']['uid']}"})
                events = [event_row(item) for item in listed.get("items") or []]
            except ApiError as error:
                if error.status != 403:
                    raise
        return {"object": obj, "kind": info.describe(), "yaml": as_yaml(obj), "events": events}


def event_row(event: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": event.get("type"), "reason": event.get("reason"), "message": event.get("message"),
            "count": event.get("count") or 1,
            "last": event.get("lastTimestamp") or event.get("eventTime")
            or (event.get("metadata") or {}).get("creationTimestamp"),
            "from": (event.get("source") or {}).get("component") or event.get("reportingComponent")}


def as_yaml(obj: Mapping[str, Any]) -> str:
    """The object as `kubectl get -o yaml` shows it, less the managed fields nobody reads."""
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return yaml.safe_dump({**obj, "metadata": metadata}, sort_keys=False, default_flow_style=False)


def routes(kinds: Sequence[Kind]) -> tuple[ConsoleRoute, ...]:
    views = ObjectViews(kinds)
    return (
        ConsoleRoute("GET", "/console/api/kinds", views.kinds),
        ConsoleRoute("GET", "/console/api/namespaces", views.namespaces),
        ConsoleRoute("GET", "/console/api/objects/{namespace}", views.objects),
        ConsoleRoute("GET", "/console/api/objects/{namespace}/{plural}/{name}", views.one),
    )
