"""Embedded entities: attributes whose value is a nested object (type dict) or a list of them (type list),
with attribute definitions of their own (`AttributeDefinition.embedded`, after Inmanta's embedded entities).

Its own module because an embedded value is checked, defaulted and updated by walking it, item by item,
with rules a flat attribute does not have:

- the definition (`definition_problems`): a dict or list type, unique attribute names, a key for a list
  (rw, required, scalar attributes), defaults that fit, nesting at most `MAX_EMBEDDED_DEPTH` deep;
- a value (`value_problems`): the shape, each item attribute's type and required-ness, unknown names,
  r attributes a client sent, the list's arity (lower, upper) and duplicate keys. The problems name the
  full path (`spec.attributes.ports[2].number`), and a client's are refused on the request (422), where
  the webhook can tell, rather than left to the lifecycle's validation: a nested value is the client's
  own structure, and a bad one is refused before anything is stored;
- an update (`update_problems`, `merge`): items are matched by key. An item whose key changed in place
  (same position, its old key gone from the list) is refused, naming the item, as is a change of an rw
  attribute of a kept item; items are added and removed only under an rw+ attribute (an rw one never
  changes at all). The new candidate value keeps each unchanged item exactly as the set held it
  (defaults it was given then, values Stead filled), so an update touches only what the client changed.

Messages name attributes by path; an item is named by its path and its key (a key is a short scalar that
identifies the item, as an identity does the instance); other values are never quoted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from operators.lsm.jsontypes import json_type, type_fits
from operators.lsm.models import MAX_EMBEDDED_DEPTH, AttributeDefinition, EmbeddedEntity
from operators.runtime import FirstSeen

Problem = tuple[str, str]
"""(reason, message): the reason is the CamelCase word a refusal carries."""

KEY_TYPES = ("string", "int", "float", "bool")
INVALID = "InvalidEmbeddedAttribute"


# --- the definition -------------------------------------------------------------------------------


def definition_problems(attribute: AttributeDefinition, path: str, depth: int = 1) -> list[str]:
    """The problems of an attribute's embedded definition (none when it has none); `path` names the
    attribute's definition (`spec.attributes[2]`)."""
    embedded = attribute.embedded
    if embedded is None:
        return []
    here = f"{path}.embedded"
    if depth > MAX_EMBEDDED_DEPTH:
        return [f"{here}: embedded entities nest {MAX_EMBEDDED_DEPTH} deep at most"]
    problems: list[str] = []
    if attribute.type not in ("dict", "list"):
        problems.append(f"{path}.type: an embedded attribute is of type dict (one item) or list (items), "
                        f"not {attribute.type}")
    if attribute.type == "dict" and (embedded.lower or embedded.upper is not None):
        problems.append(f"{here}: lower and upper bound a list; a dict holds one item (optional or not)")
    if embedded.upper is not None and embedded.lower > embedded.upper:
        problems.append(f"{here}.lower: {embedded.lower} is more than upper ({embedded.upper})")
    seen = FirstSeen(f"{here}.attributes", "attribute")
    for index, nested in enumerate(embedded.attributes):
        where = f"{here}.attributes[{index}]"
        repeat = seen.repeat(index, nested.name)
        if repeat is not None:
            problems.append(repeat)
        problems += definition_problems(nested, where, depth + 1)
        problems += default_problems(nested, f"{where}.default")
    defs = {a.name: a for a in embedded.attributes}
    if attribute.type == "list" and not embedded.key:
        problems.append(f"{here}.key: a list of embedded items needs a key (the attributes that identify an "
                        "item): an update matches items by it")
    for index, name in enumerate(embedded.key):
        where = f"{here}.key[{index}]"
        keyed = defs.get(name)
        if keyed is None:
            problems.append(f"{where}: {name} is not an attribute of the embedded entity (attributes: "
                            f"{', '.join(defs) or 'none'})")
            continue
        if keyed.modifier != "rw":
            problems.append(f"{where}: {name} has modifier {keyed.modifier}; a key is rw (given when the item is "
                            "added, never changed)")
        if keyed.optional:
            problems.append(f"{where}: {name} is optional; a key is required")
        if keyed.type not in KEY_TYPES or keyed.embedded is not None:
            problems.append(f"{where}: {name} is of type {keyed.type}; a key is a string, int, float or bool")
    return problems


def default_problems(attribute: AttributeDefinition, path: str) -> list[str]:
    """Why an attribute's default does not fit it, naming `path` (`spec.attributes[2].default`)."""
    value = attribute.default
    if value is None:
        return []
    if not type_fits(attribute.type, value):
        return [f"{path}: expected {attribute.type}, got {json_type(value)}"]
    return [message for _, message in value_problems(attribute, value, path, client=False)]


# --- a value --------------------------------------------------------------------------------------


def value_problems(attribute: AttributeDefinition, value: Any, path: str, *, client: bool) -> list[Problem]:
    """The problems of an embedded attribute's (non-null) value, each naming its path under `path`
    (`spec.attributes.ports`). With `client`, r attributes in items are a problem too (Stead fills them)."""
    embedded = attribute.embedded
    if embedded is None or value is None:
        return []
    if attribute.type == "dict":
        if not isinstance(value, Mapping):
            return [(INVALID, f"{path}: expected dict (an embedded item), got {json_type(value)}")]
        return _item_problems(embedded, value, path, client)
    if not isinstance(value, list):
        return [(INVALID, f"{path}: expected list (of embedded items), got {json_type(value)}")]
    problems: list[Problem] = []
    if len(value) < embedded.lower:
        problems.append((INVALID, f"{path}: at least {_items(embedded.lower)}, {len(value)} given"))
    if embedded.upper is not None and len(value) > embedded.upper:
        problems.append((INVALID, f"{path}: at most {_items(embedded.upper)}, {len(value)} given"))
    first: dict[tuple[Any, ...], int] = {}
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(item, Mapping):
            problems.append((INVALID, f"{where}: expected dict (an embedded item), got {json_type(item)}"))
            continue
        problems += _item_problems(embedded, item, where, client)
        key = key_of(embedded, item)
        if key is None:
            continue
        if key in first:
            problems.append(("DuplicateKey", f"{where}: its key {describe_key(embedded, item)} is also the key of "
                                              f"{path}[{first[key]}]: a key identifies one item"))
        else:
            first[key] = index
    return problems


def _items(count: int) -> str:
    return f"{count} item" if count == 1 else f"{count} items"


def _item_problems(embedded: EmbeddedEntity, item: Mapping[str, Any], path: str, client: bool) -> list[Problem]:
    defs = {a.name: a for a in embedded.attributes}
    problems: list[Problem] = []
    for name, value in item.items():
        where = f"{path}.{name}"
        nested = defs.get(name)
        if nested is None:
            problems.append(("UnknownAttribute", f"{where}: not an attribute of the embedded entity (attributes: "
                                                 f"{', '.join(defs)})"))
        elif client and nested.modifier == "r":
            problems.append(("ReadOnlyAttribute", f"{where}: read-only (modifier r): Stead sets it, a client "
                                                  "never does"))
        elif value is None:
            if not nested.optional:
                problems.append((INVALID, f"{where}: required (null given)"))
        elif not type_fits(nested.type, value):
            problems.append((INVALID, f"{where}: expected {nested.type}, got {json_type(value)}"))
        else:
            problems += value_problems(nested, value, where, client=client)
    for nested in embedded.attributes:
        if nested.name not in item and not nested.optional and nested.modifier != "r" and nested.default is None:
            problems.append((INVALID, f"{path}.{nested.name}: required"))
    return problems


def key_of(embedded: EmbeddedEntity, item: Any) -> tuple[Any, ...] | None:
    """The item's key (None when the embedded entity has none, or the item is not an object). Values are
    compared as JSON writes them, so that 1 and true are different keys."""
    if not embedded.key or not isinstance(item, Mapping):
        return None
    return tuple(json.dumps(item.get(name), sort_keys=True) for name in embedded.key)


def describe_key(embedded: EmbeddedEntity, item: Mapping[str, Any]) -> str:
    """How a message names an item by its key: `number=80` (long values clipped)."""
    parts = []
    for name in embedded.key:
        text = json.dumps(item.get(name)) if not isinstance(item.get(name), str) else str(item.get(name))
        parts.append(f"{name}={text if len(text) <= 40 else text[:37] + '...'}")
    return ", ".join(parts)


# --- defaults -------------------------------------------------------------------------------------


def fill_defaults(attribute: AttributeDefinition, value: Any) -> Any:
    """The value with each item's absent attributes given their defaults, at every depth. Present values
    are kept as they are (an item the set already holds keeps what it was given)."""
    embedded = attribute.embedded
    if embedded is None or value is None:
        return value
    if isinstance(value, Mapping):
        return _fill_item(embedded, value)
    if isinstance(value, list):
        return [_fill_item(embedded, item) if isinstance(item, Mapping) else item for item in value]
    return value


def _fill_item(embedded: EmbeddedEntity, item: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(item)
    for nested in embedded.attributes:
        if nested.name not in out and nested.default is not None:
            out[nested.name] = nested.default
        if nested.embedded is not None and out.get(nested.name) is not None:
            out[nested.name] = fill_defaults(nested, out[nested.name])
    return out


# --- updates --------------------------------------------------------------------------------------


def update_problems(attribute: AttributeDefinition, old: Any, new: Any, path: str) -> list[Problem]:
    """What a client's change of an (rw+) embedded attribute from `old` to `new` (both as the client wrote
    them) may not do: change an item's key, or an rw attribute of an item it keeps."""
    embedded = attribute.embedded
    if embedded is None or old is None or new is None:
        return []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        if key_of(embedded, old) != key_of(embedded, new):
            return [_key_changed(embedded, old, new, path)]
        return _kept_item_problems(embedded, old, new, path)
    if not (isinstance(old, list) and isinstance(new, list)):
        return []
    before = {key_of(embedded, item): item for item in old if isinstance(item, Mapping)}
    after = {key_of(embedded, item) for item in new}
    problems: list[Problem] = []
    for index, item in enumerate(new):
        if not isinstance(item, Mapping):
            continue
        where = f"{path}[{index}]"
        kept = before.get(key_of(embedded, item))
        if kept is not None:
            problems += _kept_item_problems(embedded, kept, item, where)
        elif index < len(old) and isinstance(old[index], Mapping) and key_of(embedded, old[index]) not in after:
            problems.append(_key_changed(embedded, old[index], item, where))
    return problems


def _key_changed(embedded: EmbeddedEntity, old: Mapping[str, Any], new: Mapping[str, Any], path: str) -> Problem:
    return ("KeyChanged", f"{path}: the key of an item cannot change (from {describe_key(embedded, old)} to "
                          f"{describe_key(embedded, new)}): items are matched by key; remove the item in one "
                          "update and add the new one in another")


def _kept_item_problems(embedded: EmbeddedEntity, old: Mapping[str, Any], new: Mapping[str, Any], path: str
                        ) -> list[Problem]:
    problems: list[Problem] = []
    for nested in embedded.attributes:
        before, after = old.get(nested.name), new.get(nested.name)
        if before == after:
            continue
        where = f"{path}.{nested.name}"
        if nested.modifier == "rw":
            problems.append(("ImmutableAttribute", f"{where}: set when the item is added only (modifier rw); rw+ "
                                                   "attributes may change"))
        elif nested.embedded is not None:
            problems += update_problems(nested, before, after, where)
    return problems


def merge(attribute: AttributeDefinition, base: Any, old: Any, new: Any) -> Any:
    """The new candidate value of an embedded attribute: `new` (the client's) with each item the client
    kept taken from `base` (the set's value, with its defaults and r values), untouched when the client did
    not change it, and only the client's changes applied when it did. `old` is the client's previous
    value, which tells a removed attribute from one the client never gave."""
    embedded = attribute.embedded
    if embedded is None or base is None or new is None:
        return new
    if isinstance(base, Mapping) and isinstance(new, Mapping):
        if key_of(embedded, base) != key_of(embedded, new):
            return new
        return _merge_item(embedded, base, old if isinstance(old, Mapping) else {}, new)
    if not (isinstance(base, list) and isinstance(new, list)):
        return new
    held = {key_of(embedded, item): item for item in base if isinstance(item, Mapping)}
    given = {key_of(embedded, item): item for item in old if isinstance(item, Mapping)} if isinstance(old, list) \
        else {}
    out: list[Any] = []
    for item in new:
        key = key_of(embedded, item)
        kept = held.get(key) if isinstance(item, Mapping) else None
        out.append(item if kept is None else _merge_item(embedded, kept, given.get(key) or {}, item))
    return out


def _merge_item(embedded: EmbeddedEntity, base: Mapping[str, Any], old: Mapping[str, Any], new: Mapping[str, Any]
                ) -> Any:
    if old == new:
        return base  # unchanged: exactly as the set held it
    defs = {a.name: a for a in embedded.attributes}
    out = dict(base)
    for name in {*old, *new}:
        nested = defs.get(name)
        if name in new:
            if old.get(name) != new[name]:
                out[name] = merge(nested, base.get(name), old.get(name), new[name]) if nested else new[name]
        elif nested is None or nested.modifier != "r":
            out.pop(name, None)  # the client removed it (its default, if any, comes back)
    return out
