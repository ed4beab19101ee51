"""An Environment's configuration in the console (issue 29, "Configuration"): its levels, the effective values
at a point with the trace of where each value comes from, and a diff between any two versions of a layer.

Where each part comes from, always as the signed-in user:

- the levels, the layers and the effective values: the Environment, its ConfigComponents and ConfigValues
  read from the API server (`KubeConfigRepository.snapshot`, the repository the configuration API serves
  from) and merged by the configuration store's own rule (`operators.config.merge.effective`): the same
  values and trace `stead config get --trace` prints;
- a layer's versions and their data: the configuration API (`?history`, `?version=N`), since versions are
  ConfigMaps a user allowed to read ConfigValues may still not be allowed to list.

The diff is computed here, key by key over dotted paths (`operators.config.keys`), and sent as data and as
text: the browser shows it as text, never as markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from operators.config.keys import format_key, leaf_paths
from operators.config.levels import (
    NODE_LEVEL,
    ROLE_LEVEL,
    LevelError,
    Point,
    canonical_point,
    complete_pairs,
    format_point,
    node_ident,
    parse_levels,
    point_from_pairs,
    prefixes,
)
from operators.config.merge import effective
from operators.config.repository import Snapshot

ROOT = "(root)"
MAX_DIFF_LINES = 2000
"""Changed keys a diff lists (the rest are counted): a page must stay readable and small."""


# --- levels ------------------------------------------------------------------------------------------------


def points_of(snapshot: Snapshot) -> list[Point]:
    """The points of the environment's hierarchy worth showing: the root, each role and each node under its
    roles (when the levels are `role`, `node`), and every point where a layer is stored (and its prefixes)."""
    env = snapshot.environment
    hierarchy = list(env.hierarchy_levels)
    found: dict[Point, None] = {(): None}
    for node in env.nodes:
        roles: list[str | None] = [*node.roles] or [None]
        for role in roles:
            point: list[tuple[str, str]] = []
            for level in hierarchy:
                if level == ROLE_LEVEL and role is not None:
                    point.append((level, role))
                elif level == NODE_LEVEL:
                    point.append((level, node_ident(node)))
                else:
                    break
            found.update(dict.fromkeys(prefixes(tuple(point))))
    for stored in snapshot.values:
        for prefix in prefixes(stored.point):
            found[prefix] = None
    return sorted(found)  # tuples: the root, then each role followed by its nodes


def environment_view(snapshot: Snapshot) -> dict[str, Any]:
    """The environment's hierarchy, its points (each with the layers stored there), and its resources."""
    env = snapshot.environment
    resources = sorted({r.name for name in env.components if (c := snapshot.components.get(name)) is not None
                        for r in c.resources})
    stored_at: dict[Point, list[dict[str, Any]]] = {}
    for stored in sorted(snapshot.values, key=lambda s: (s.spec.resource, s.spec.kind, s.name)):
        stored_at.setdefault(stored.point, []).append({
            "object": stored.name, "resource": stored.spec.resource, "kind": stored.spec.kind,
            "version": stored.version, "revertTo": stored.spec.revert_to})
    points = [{"level": format_point(p), "depth": len(p), "pairs": [list(pair) for pair in p],
               "layers": stored_at.get(p, [])} for p in points_of(snapshot)]
    return {"environment": snapshot.name, "hierarchy": ["(root)", *env.hierarchy_levels], "resources": resources,
            "points": points, "nodes": [{"name": n.name, "fqdn": n.fqdn, "roles": list(n.roles)} for n in env.nodes]}


def parse_point(text: str, snapshot: Snapshot) -> Point:
    """A point from its `level` text (`role=controller,node=node-1`, `node=node-1` for a node of one role, or
    `(root)`), canonical; LevelError when it does not fit the hierarchy."""
    if text in ("", ROOT):
        return ()
    env = snapshot.environment
    return canonical_point(point_from_pairs(complete_pairs(parse_levels(text), env), env.hierarchy_levels), env)


# --- effective values and their trace -------------------------------------------------------------------


def effective_view(snapshot: Snapshot, resource: str, point: Point) -> dict[str, Any]:
    """The effective values of `resource` at `point`, the layers merged (root first), and one row per leaf:
    its dotted key, its value (as JSON text) and the layer that gave it."""
    result = effective(point, snapshot.layers(resource))
    rows = []
    lookup = result.lookup
    for path, value in leaf_paths(result.values):
        if not path:
            continue
        key = format_key(path)
        layer = lookup.get(key)
        origin = layer.describe() if layer is not None else {}
        rows.append({"key": key, "value": shown(value), **origin})
    layers = [layer.describe() for layer in result.layers]
    return {"resource": resource, "level": format_point(point), "values": result.values, "trace": rows,
            "layers": layers}


# --- diff --------------------------------------------------------------------------------------------------


def shown(value: Any) -> str:
    """A value as one line of JSON text."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _leaves(data: Any) -> dict[str, Any]:
    return {format_key(path): value for path, value in leaf_paths(data) if path}


def values_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Key by key (dotted paths to leaves: scalars, lists, empty mappings), what changed from `old` to `new`:
    `added`, `removed` or `changed` (a value of another type is a change too: 1 and true differ), in the order
    of the keys of `old` then the new ones of `new`."""
    before, after = _leaves(old), _leaves(new)
    changes: list[dict[str, Any]] = []
    for key in dict.fromkeys([*before, *after]):
        if key not in after:
            changes.append({"key": key, "change": "removed", "old": shown(before[key])})
        elif key not in before:
            changes.append({"key": key, "change": "added", "new": shown(after[key])})
        elif shown(before[key]) != shown(after[key]):
            changes.append({"key": key, "change": "changed", "old": shown(before[key]), "new": shown(after[key])})
    return changes


def diff_text(changes: Sequence[Mapping[str, Any]], limit: int = MAX_DIFF_LINES) -> str:
    """The diff as lines of text: `- key: old`, `+ key: new`, `~ key: old -> new`."""
    lines = []
    for change in changes[:limit]:
        if change["change"] == "removed":
            lines.append(f"- {change['key']}: {change['old']}")
        elif change["change"] == "added":
            lines.append(f"+ {change['key']}: {change['new']}")
        else:
            lines.append(f"~ {change['key']}: {change['old']} -> {change['new']}")
    if len(changes) > limit:
        lines.append(f"... and {len(changes) - limit} more keys")
    return "\n".join(lines) if lines else "(no difference)"


def version_diff(resource: str, level: str, kind: str, old: tuple[int, Mapping[str, Any]],
                 new: tuple[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The diff between two versions (number, data) of one layer, as data and as text."""
    changes = values_diff(old[1], new[1])
    header = f"{kind} of {resource} at {level}: version {old[0]} -> version {new[0]}"
    return {"resource": resource, "level": level, "kind": kind, "from": old[0], "to": new[0],
            "changes": changes[:MAX_DIFF_LINES], "more": max(0, len(changes) - MAX_DIFF_LINES),
            "text": f"{header}\n{diff_text(changes)}"}


def values_api_path(environment: str, point: Point, resource: str, kind: str) -> str:
    """The configuration API's path of a layer (`operators.config.api`): levels root first, names escaped
    (a resource's `/` kept: the API takes it as part of the name)."""
    levels = "".join(f"/{quote(name, safe='')}/{quote(value, safe='')}" for name, value in point)
    return (f"/api/v1/config/environments/{quote(environment, safe='')}{levels}/resources/"
            f"{quote(resource, safe='/')}/{'overrides' if kind == 'overrides' else 'values'}")


__all__ = ["LevelError", "diff_text", "effective_view", "environment_view", "parse_point", "points_of",
           "values_api_path", "values_diff", "version_diff"]
