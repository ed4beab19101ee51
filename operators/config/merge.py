"""Effective values: the layers of one resource from the root to a point, merged, with a trace.

Order. For a point `(role=controller, node=node-1)` the layers are, first to last:
root values, root overrides, role values, role overrides, node values, node overrides.
A later layer wins. Overrides of a shallow level therefore lose to values of a deeper one:
the walk goes "from the root to the deepest level, values then overrides at each level"
(docs/configuration.md, "The merge rule"), and an override is a correction *at its level*,
not a veto over every level below it.

Decision: a deep merge of mappings, lists and scalars replaced whole.
- Fuel's configuration store replaced top-level keys (a shallow `dict.update`). With that,
  overriding `nova.debug` on one node (what `stead config override --key nova.debug` does) would drop
  every other `nova.*` key inherited from the role and the root: a one-key change silently
  becomes a whole-section change. Deep merge makes a key path the unit of overriding, the same
  unit the CLI and the lookup trace use.
- Lists are replaced, not merged by index or concatenated: list items have no identity, so an
  index-wise merge of `[a, b]` over `[x, y, z]` would produce a configuration nobody wrote.
- `null` is a value like any other (the CLI's `--type null`): a deeper layer cannot remove an
  inherited key, it can only replace it. A deletion marker would be a value nobody could store.
- A mapping over a scalar (or the reverse) replaces it.

The trace (`?trace`, or `?show_lookup` as Fuel spelled it) says, for every leaf of the result,
which layer gave it. Leaves are scalars, lists and empty mappings, keyed by their dotted key path
(`operators.config.keys.format_key`). It is built alongside the merge as a tree mirroring
the data, so replacing a subtree replaces its trace in O(1) instead of scanning every path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from operators.config.keys import KeyPath, format_key
from operators.config.levels import Point, format_point

ValuesKind = Literal["values", "overrides"]


@dataclass(frozen=True)
class Layer:
    """The data of one ConfigValues object in force, and where it sits."""

    point: Point
    kind: ValuesKind
    data: Mapping[str, Any]
    version: int | None = None
    source: str = ""  # the ConfigValues object's name

    def describe(self) -> dict[str, Any]:
        """The layer as the lookup trace shows it."""
        out: dict[str, Any] = {"level": format_point(self.point), "kind": self.kind}
        if self.version is not None:
            out["version"] = self.version
        if self.source:
            out["object"] = self.source
        return out


@dataclass(frozen=True)
class Effective:
    """Merged values, and for each leaf (by dotted key path) the layer that gave it.

    Treat `values` as read-only: the HTTP API caches an `Effective` per snapshot and serves it
    to every lookup. The flat `lookup` is built on first use only, since most reads never ask.
    """

    values: dict[str, Any]
    tree: Any
    layers: tuple[Layer, ...]

    @cached_property
    def lookup(self) -> dict[str, Layer]:
        """Each leaf's dotted key path, with the layer that gave it."""
        out: dict[str, Layer] = {}
        _flatten(self.tree, (), out)
        return out

    def trace(self) -> dict[str, dict[str, Any]]:
        """The lookup trace as JSON: `{"nova.debug": {"level": "node=n1", "kind": "overrides", ...}}`."""
        return {key: layer.describe() for key, layer in self.lookup.items()}


def ordered_layers(point: Point, layers: Iterable[Layer]) -> list[Layer]:
    """The layers that apply at `point`, in merge order (root first; values before overrides).

    Layers at points that are not prefixes of `point` (another node, another role) are left out.
    """
    depth_of = {point[:depth]: depth for depth in range(len(point) + 1)}
    chosen = [layer for layer in layers if layer.point in depth_of]
    return sorted(chosen, key=lambda layer: (depth_of[layer.point], 0 if layer.kind == "values" else 1))


def effective(point: Point, layers: Iterable[Layer]) -> Effective:
    """Merge the layers that apply at `point`; see the module docstring for the rules."""
    applied = ordered_layers(point, layers)
    values: dict[str, Any] = {}
    trace: dict[str, Any] = {}
    for layer in applied:
        _merge(values, trace, layer.data, layer)
    return Effective(values=values, tree=trace, layers=tuple(applied))


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` merged over `base` by the same rules, without a trace; neither input is modified."""
    out: dict[str, Any] = copy_json(base)
    _merge(out, {}, top, None)
    return out


def _merge(target: dict[str, Any], trace: dict[str, Any], top: Mapping[str, Any], origin: Layer | None) -> None:
    """Merge `top` into `target` (owned by the caller) and record `origin` in the trace tree.

    The trace tree has a dict wherever the data has a non-empty mapping, and the origin
    layer wherever the data has a leaf. Below the top level, data is JSON-shaped (mappings are
    dicts): exact type checks are several times faster than `isinstance(x, Mapping)`, and this
    loop runs once per key of every layer.
    """
    for name, value in top.items():
        current = target.get(name)
        value_is_dict = type(value) is dict or (not isinstance(value, list | str) and isinstance(value, Mapping))
        if value_is_dict and value and type(current) is dict and current:
            sub = trace.get(name)
            if type(sub) is not dict:
                sub = {}
                trace[name] = sub
            _merge(current, sub, value, origin)
        elif value_is_dict and not value and type(current) is dict:
            if not current:
                trace[name] = origin  # an empty mapping over an empty mapping: the later one is the leaf
            # an empty mapping merged into a non-empty one changes nothing
        else:
            target[name] = copy_json(value)
            trace[name] = _trace_of(value, origin)


def _trace_of(value: Any, origin: Layer | None) -> Any:
    if type(value) in _SCALARS:
        return origin
    if isinstance(value, Mapping) and value:
        return {name: _trace_of(sub, origin) for name, sub in value.items()}
    return origin


def _flatten(trace: Any, prefix: KeyPath, out: dict[str, Layer]) -> None:
    if isinstance(trace, dict):
        for name, sub in trace.items():
            _flatten(sub, (*prefix, str(name)), out)
    elif isinstance(trace, Layer):
        out[format_key(prefix)] = trace


_SCALARS = (str, int, float, bool, type(None))


def copy_json(value: Any) -> Any:
    """A copy of JSON-shaped data (mappings become dicts, lists are copied, scalars shared)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {name: sub if type(sub) in _SCALARS else copy_json(sub) for name, sub in value.items()}
    if kind is list:
        return [item if type(item) in _SCALARS else copy_json(item) for item in value]
    return value


def origin_of(result: Effective, key: KeyPath) -> Sequence[tuple[str, Layer]]:
    """The trace entries at or under `key` (for `get --key` with a trace)."""
    text = format_key(key)
    if not key:
        return list(result.lookup.items())
    return [
        (path, layer) for path, layer in result.lookup.items()
        if path == text or path.startswith(text + ".")
    ]
