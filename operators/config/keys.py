"""Dotted key paths into a resource's nested data: `nova.debug`, `servers.0.address`.

A key is a dot-separated list of segments. A segment names a mapping key, or, where the data
at that point is a list, an index (a non-negative decimal integer). The same segment `0` is a
mapping key under a mapping and an index under a list: the data decides, so keys stay short
and need no type annotations. A literal dot or backslash inside a mapping key is written
`\\.` or `\\\\`; `format_key` produces that form, so every path `leaf_paths` reports can be fed
back to `get_key`.

Every function is pure: `set_key` and `delete_key` return new data and copy only the
containers on the path, so a caller can keep the old version (the history, a merge input)
without defensive deep copies. Errors name the first segment that could not be followed and
the path that led to it, because "key not found" alone sends a user hunting through YAML.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

KeyPath = tuple[str, ...]


class KeyPathError(Exception):
    """A key path that does not lead anywhere in the data; `message` names the failing segment."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f'key "{key}": {message}')
        self.key = key
        self.message = message


def parse_key(key: str) -> KeyPath:
    """`a.b\\.c.0` -> `("a", "b.c", "0")`; the empty key is the whole data (`()`)."""
    if key == "":
        return ()
    parts: list[str] = []
    current: list[str] = []
    chars = iter(key)
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped not in (".", "\\"):
                raise KeyPathError(key, "a backslash must be followed by '.' or '\\'")
            current.append(escaped)
        elif char == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    for index, part in enumerate(parts):
        if part == "":
            raise KeyPathError(key, f"segment {index + 1} is empty")
    return tuple(parts)


def format_key(path: KeyPath) -> str:
    """The inverse of `parse_key`: dots and backslashes inside segments are escaped."""
    return ".".join(part.replace("\\", "\\\\").replace(".", "\\.") for part in path)


def _index(key: str, path: KeyPath, depth: int, size: int, allow_append: bool) -> int:
    segment = path[depth]
    where = _where(path, depth)
    if not segment.isdigit() or (len(segment) > 1 and segment.startswith("0")):
        raise KeyPathError(key, f'"{segment}" is not a list index, and {where} is a list')
    index = int(segment)
    limit = size + 1 if allow_append else size
    if index >= limit:
        raise KeyPathError(key, f"no index {index} in the list at {where} (length {size})")
    return index


def _where(path: KeyPath, depth: int) -> str:
    return f'"{format_key(path[:depth])}"' if depth else "the top level"


def get_key(data: Any, key: str | KeyPath) -> Any:
    """The value at `key`; raises `KeyPathError` naming the first segment that is missing."""
    path = parse_key(key) if isinstance(key, str) else key
    text = key if isinstance(key, str) else format_key(key)
    node = data
    for depth, segment in enumerate(path):
        if isinstance(node, Mapping):
            if segment not in node:
                raise KeyPathError(text, f'no "{segment}" in {_where(path, depth)}')
            node = node[segment]
        elif isinstance(node, list):
            node = node[_index(text, path, depth, len(node), allow_append=False)]
        else:
            raise KeyPathError(
                text, f'{_where(path, depth)} is a {type_name(node)}, it has no "{segment}"'
            )
    return node


def has_key(data: Any, key: str | KeyPath) -> bool:
    try:
        get_key(data, key)
    except KeyPathError:
        return False
    return True


def set_key(data: Any, key: str | KeyPath, value: Any) -> Any:
    """New data with `value` at `key`.

    Missing mapping keys on the way are created as mappings; a list grows by one when the
    index equals its length (appending), never further, so a typo cannot pad a list with
    nulls. A scalar in the way is an error rather than silently replaced by a mapping.
    """
    path = parse_key(key) if isinstance(key, str) else key
    text = key if isinstance(key, str) else format_key(key)
    return _set(data, path, 0, value, text)


def _set(node: Any, path: KeyPath, depth: int, value: Any, text: str) -> Any:
    if depth == len(path):
        return value
    segment = path[depth]
    if isinstance(node, Mapping):
        out = dict(node)
        child = node.get(segment, {})
        out[segment] = _set(child, path, depth + 1, value, text)
        return out
    if isinstance(node, list):
        index = _index(text, path, depth, len(node), allow_append=True)
        items = list(node)
        if index == len(items):
            items.append(_set({}, path, depth + 1, value, text))
        else:
            items[index] = _set(items[index], path, depth + 1, value, text)
        return items
    raise KeyPathError(text, f'{_where(path, depth)} is a {type_name(node)}, it has no "{segment}"')


def delete_key(data: Any, key: str | KeyPath) -> Any:
    """New data without `key` (a list item is removed and the later ones shift down)."""
    path = parse_key(key) if isinstance(key, str) else key
    text = key if isinstance(key, str) else format_key(key)
    if not path:
        raise KeyPathError(text, "the empty key is the whole data; delete the values instead")
    return _delete(data, path, 0, text)


def _delete(node: Any, path: KeyPath, depth: int, text: str) -> Any:
    segment = path[depth]
    last = depth == len(path) - 1
    if isinstance(node, Mapping):
        if segment not in node:
            raise KeyPathError(text, f'no "{segment}" in {_where(path, depth)}')
        out = dict(node)
        if last:
            del out[segment]
        else:
            out[segment] = _delete(node[segment], path, depth + 1, text)
        return out
    if isinstance(node, list):
        index = _index(text, path, depth, len(node), allow_append=False)
        items = list(node)
        if last:
            del items[index]
        else:
            items[index] = _delete(items[index], path, depth + 1, text)
        return items
    raise KeyPathError(text, f'{_where(path, depth)} is a {type_name(node)}, it has no "{segment}"')


def leaf_paths(data: Any, prefix: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    """Every leaf under `data` with its path. Lists and empty mappings are leaves: a list is
    replaced whole by a merge, so its items have no separate origin."""
    if isinstance(data, Mapping) and data:
        for name, value in data.items():
            yield from leaf_paths(value, (*prefix, str(name)))
    else:
        yield prefix, data


def type_name(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__
