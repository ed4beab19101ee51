"""JSON values against attribute types: the one rule `operators.lsm.attributes` (flat attributes) and
`operators.lsm.embedded` (the attributes of embedded items) share, in a module of its own so that neither
imports the other's rules to get it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.lsm.models import AttributeType

_JSON_NAMES = {str: "string", bool: "bool", int: "int", float: "float", dict: "dict", list: "list"}


def json_type(value: Any) -> str:
    """The attribute type name of a JSON value (null for None)."""
    if value is None:
        return "null"
    return _JSON_NAMES.get(type(value), type(value).__name__)


def type_fits(kind: AttributeType, value: Any) -> bool:
    """Whether a (non-null) JSON value is of an attribute type. A bool is not an int (JSON tells them
    apart, Python does not); an int is a float (JSON writes 2.0 as 2)."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "dict":
        return isinstance(value, Mapping)
    return isinstance(value, list)
