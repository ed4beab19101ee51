"""DeploymentGraph objects as the API server holds them (dicts): their owner and type, a namespace's graphs, the
graph of an owner and type, a new graph's object name. Without the models (pydantic), so that `stead graph list`
and `stead graph delete` answer at once; `operators.graphs.api` and `operators.graphs.cli` share them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from operators.runtime import Requester, custom_path

GRAPHS = "deploymentgraphs"
"""The DeploymentGraph's plural, as its model declares it (a test checks that they agree)."""
OWNER_KINDS = ("release", "plugin", "environment")


def owner_of(item: Mapping[str, Any]) -> tuple[str, str] | None:
    """(owner kind, owner name) of a DeploymentGraph object, as written (None when it names none)."""
    spec = item.get("spec") or {}
    return next(((kind, str(spec[kind])) for kind in OWNER_KINDS if spec.get(kind)), None)


def type_of(item: Mapping[str, Any]) -> str:
    return str((item.get("spec") or {}).get("type") or "default")


def graph_name(kind: str, owner: str, graph_type: str) -> str:
    """The object name of a new graph: `<owner kind>-<owner>-<type>`, made a valid name (lower case,
    `_` as `-`, at most 253 characters)."""
    raw = f"{kind}-{owner}-{graph_type}".lower().replace("_", "-")
    name = re.sub(r"[^a-z0-9.-]", "-", raw)[:253].strip("-.")
    return name or "graph"


async def graph_items(kube: Requester, namespace: str) -> list[dict[str, Any]]:
    """The namespace's DeploymentGraph objects, oldest first."""
    listed = await kube.request("GET", custom_path(GRAPHS, namespace))
    items = [dict(item) for item in listed.get("items") or []]
    return sorted(items, key=lambda i: (str(i["metadata"].get("creationTimestamp") or ""), str(i["metadata"]["name"])))


def find_graph(items: Sequence[Mapping[str, Any]], kind: str, owner: str, graph_type: str) -> dict[str, Any] | None:
    """The graph of (owner, type) among `items` (the oldest, if the webhook was bypassed)."""
    return next((dict(i) for i in items if owner_of(i) == (kind, owner) and type_of(i) == graph_type), None)
