"""Points of an environment's configuration hierarchy.

An environment orders its levels, root first (for example `role`, `node`). A *point* names a
value for each of the first k levels: `()` is the environment root, `(("role", "controller"),)`
one role, `(("role", "controller"), ("node", "node-1.domain.tld"))` one node under it. Values
and overrides live at points; effective values walk the prefixes of a point.

A ConfigValues object writes its level as a mapping (`{node: node-1.domain.tld}`). Kubernetes
does not keep the order of mapping keys, so the order always comes from the environment: a
level mapping is valid when its keys are exactly the environment's first k levels.

Nodes are the one level whose values Stead knows: a node is written by its FQDN (as the seed
does) or by its name, and `canonical_point` maps both to one spelling (the FQDN when the node
has one), so that `node-1` and `node-1.domain.tld` are the same point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from operators.environment.models import EnvironmentSpec, Node

Point = tuple[tuple[str, str], ...]
NODE_LEVEL = "node"


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
