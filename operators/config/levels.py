"""Points of an environment's configuration hierarchy.

An environment orders its levels, root first (for example `role`, `node`). A *point* names a
value for each of the first k levels: `()` is the environment root, `(("role", "controller"),)`
one role, `(("role", "controller"), ("node", "node-1.domain.tld"))` one node under it. Values
and overrides live at points; effective values walk the prefixes of a point.

A ConfigValues object writes its level as a mapping (`{node: node-1.domain.tld}`). Kubernetes
does not keep the order of mapping keys, so the order always comes from the environment: a
level mapping is valid when its keys are exactly the environment's first k levels.

Nodes are the one level whose values Stead knows: a node is written by its FQDN (as Fuel
does) or by its name, and `canonical_point` maps both to one spelling (the FQDN when the node
has one), so that `node-1` and `node-1.domain.tld` are the same point.

A node's role is known too, so the role level may be left out when a node is given and has
exactly one role: with levels `role, node`, `node=node-1.domain.tld` (Fuel's
`--level node=<fqdn>`) names the point `role=controller,node=node-1.domain.tld`. A node with
several roles needs its role named; a role the node does not have is an error
(`role_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `stead config` parses levels without importing the models
    from operators.environment.models import EnvironmentSpec, Node

Point = tuple[tuple[str, str], ...]
NODE_LEVEL = "node"
ROLE_LEVEL = "role"


class LevelError(ValueError):
    """A level mapping or path that does not fit the environment's hierarchy."""


def point_from_level(level: Mapping[str, str], hierarchy: Sequence[str]) -> Point:
    """The point a level mapping names, ordered by `hierarchy`; `LevelError` if not a prefix."""
    unknown = [name for name in level if name not in hierarchy]
    if unknown:
        raise LevelError(
            f"level {', '.join(repr(n) for n in unknown)} is not in the hierarchy ({', '.join(hierarchy)})"
        )
    depth = len(level)
    expected = list(hierarchy[:depth])
    if set(level) != set(expected):
        missing = ", ".join(repr(n) for n in expected if n not in level)
        deeper = ", ".join(repr(n) for n in level if n not in expected)
        raise LevelError(
            f"levels must be a prefix of the hierarchy ({', '.join(hierarchy)}): {missing} missing before {deeper}"
        )
    return tuple((name, level[name]) for name in expected)


def complete_pairs(pairs: Sequence[tuple[str, str]], env: EnvironmentSpec) -> list[tuple[str, str]]:
    """`pairs` with a left-out role level filled in from the node they name.

    Only when the environment's hierarchy has a `role` level above `node`, the pairs give a node
    but no role, and the node exists: then its one role is inserted at the role level's place
    (`LevelError` when it has several). Anything else is returned unchanged, for
    `point_from_pairs` and the node checks to judge.
    """
    hierarchy = list(env.hierarchy_levels)
    names = [name for name, _ in pairs]
    if (ROLE_LEVEL in names or NODE_LEVEL not in names or ROLE_LEVEL not in hierarchy
            or NODE_LEVEL not in hierarchy or hierarchy.index(ROLE_LEVEL) > hierarchy.index(NODE_LEVEL)):
        return list(pairs)
    ident = dict(pairs)[NODE_LEVEL]
    node = find_node(env, ident)
    if node is None:
        return list(pairs)
    if len(node.roles) != 1:
        raise LevelError(f'node "{ident}" has several roles ({", ".join(node.roles)}): name one, '
                         f"e.g. role={node.roles[0]},node={ident}")
    out = list(pairs)
    rank = hierarchy.index(ROLE_LEVEL)
    at = next((i for i, name in enumerate(names) if name in hierarchy and hierarchy.index(name) > rank), len(out))
    out.insert(at, (ROLE_LEVEL, node.roles[0]))
    return out


def complete_level(level: Mapping[str, str], env: EnvironmentSpec) -> dict[str, str]:
    """A level mapping with a left-out role filled in (see `complete_pairs`); order does not matter here."""
    return dict(complete_pairs(list(level.items()), env))


def role_problem(point: Point, env: EnvironmentSpec) -> str | None:
    """Why a point's role and node do not go together (the node exists but lacks that role), else None."""
    values = dict(point)
    if ROLE_LEVEL not in values or NODE_LEVEL not in values:
        return None
    node = find_node(env, values[NODE_LEVEL])
    if node is None or values[ROLE_LEVEL] in node.roles:
        return None
    return (f'node "{values[NODE_LEVEL]}" does not have role "{values[ROLE_LEVEL]}" '
            f"(its roles: {', '.join(node.roles)})")


def point_from_pairs(pairs: Sequence[tuple[str, str]], hierarchy: Sequence[str]) -> Point:
    """A point from an ordered list (a URL path, a `--level` option); the order must be the hierarchy's."""
    names = [name for name, _ in pairs]
    for name in names:
        if name not in hierarchy:
            raise LevelError(f"level {name!r} is not in the hierarchy ({', '.join(hierarchy)})")
    if len(set(names)) != len(names):
        raise LevelError(f"a level is given twice: {', '.join(names)}")
    if names != list(hierarchy[: len(names)]):
        raise LevelError(
            f"levels must follow the hierarchy from the root ({', '.join(hierarchy)}), got {', '.join(names)}"
        )
    return tuple((name, value) for name, value in pairs)


def find_node(env: EnvironmentSpec, ident: str) -> Node | None:
    """The environment's node whose FQDN or name is `ident`."""
    for node in env.nodes:
        if ident in (node.fqdn, node.name):
            return node
    return None


def node_ident(node: Node) -> str:
    """The canonical spelling of a node in a point: its FQDN, or its name when it has none."""
    return node.fqdn or node.name


def canonical_point(point: Point, env: EnvironmentSpec) -> Point:
    """`point` with node values spelled canonically; unknown nodes are left as written."""
    out = []
    for name, value in point:
        if name == NODE_LEVEL:
            node = find_node(env, value)
            value = node_ident(node) if node is not None else value
        out.append((name, value))
    return tuple(out)


def prefixes(point: Point) -> list[Point]:
    """`()` first, then each longer prefix, ending with `point` itself."""
    return [point[:depth] for depth in range(len(point) + 1)]


def format_point(point: Point) -> str:
    """`role=controller,node=node-1` (the `--level` syntax); the root is `(root)`."""
    return ",".join(f"{name}={value}" for name, value in point) if point else "(root)"


def parse_levels(text: str) -> list[tuple[str, str]]:
    """`role=controller,node=node-1` -> ordered pairs; raises `LevelError` on malformed text."""
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise LevelError(f"expected name=value, got {item.strip()!r}")
        pairs.append((name, value))
    return pairs
