"""Dotted key paths: nested mappings, list indexes, escapes, and errors that name the segment."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.config.keys import (
    KeyPathError,
    delete_key,
    format_key,
    get_key,
    has_key,
    leaf_paths,
    parse_key,
    set_key,
)

DATA: dict[str, Any] = {"a": {"b": [10, {"c": "x"}], "0": "zero"}, "flag": True, "dotted.key": 1}


def test_get_walks_mappings_and_list_indexes() -> None:
    assert get_key(DATA, "a.b.0") == 10
    assert get_key(DATA, "a.b.1.c") == "x"
    assert get_key(DATA, "a.0") == "zero"  # under a mapping, "0" is a key
    assert get_key(DATA, "") == DATA
    assert get_key(DATA, "dotted\\.key") == 1


@pytest.mark.parametrize("key,message", [
    ("a.missing", 'key "a.missing": no "missing" in "a"'),
    ("nope", 'key "nope": no "nope" in the top level'),
    ("a.b.5", 'key "a.b.5": no index 5 in the list at "a.b" (length 2)'),
    ("a.b.x", 'key "a.b.x": "x" is not a list index, and "a.b" is a list'),
    ("a.b.01", 'key "a.b.01": "01" is not a list index, and "a.b" is a list'),
    ("flag.deeper", 'key "flag.deeper": "flag" is a boolean, it has no "deeper"'),
    ("a..b", 'key "a..b": segment 2 is empty'),
    ("a\\b", "key \"a\\b\": a backslash must be followed by '.' or '\\'"),
])
def test_errors_name_the_missing_segment(key: str, message: str) -> None:
    with pytest.raises(KeyPathError) as error:
        get_key(DATA, key)
    assert str(error.value) == message
    assert not has_key(DATA, key)


def test_set_creates_mappings_appends_and_copies_only_the_path() -> None:
    out = set_key(DATA, "a.b.1.d", 5)
    assert out["a"]["b"][1] == {"c": "x", "d": 5}
    assert DATA["a"]["b"][1] == {"c": "x"}  # the input is untouched
    assert out["flag"] is DATA["flag"]
    assert set_key({}, "x.y.z", None) == {"x": {"y": {"z": None}}}
    assert set_key({"l": [1]}, "l.1", 2) == {"l": [1, 2]}  # index == length appends
    assert set_key({"l": [1]}, "l.1.k", "v") == {"l": [1, {"k": "v"}]}
    assert set_key(DATA, "", {"new": 1}) == {"new": 1}
    with pytest.raises(KeyPathError, match=r"no index 3 in the list at \"l\" \(length 1\)"):
        set_key({"l": [1]}, "l.3", 2)
    with pytest.raises(KeyPathError, match='"flag" is a boolean'):
        set_key(DATA, "flag.x", 1)


def test_delete_removes_keys_and_list_items() -> None:
    assert delete_key(DATA, "a.b.0")["a"]["b"] == [{"c": "x"}]
    assert "flag" not in delete_key(DATA, "flag")
    assert delete_key(DATA, "a.b.1.c")["a"]["b"][1] == {}
    assert DATA["a"]["b"] == [10, {"c": "x"}]
    with pytest.raises(KeyPathError, match='no "zz" in "a"'):
        delete_key(DATA, "a.zz")
    with pytest.raises(KeyPathError, match="the empty key"):
        delete_key(DATA, "")


def test_leaf_paths_treat_lists_and_empty_mappings_as_leaves() -> None:
    leaves = dict((format_key(p), v) for p, v in leaf_paths({"a": {"b": [1, 2], "e": {}}, "d.x": 1}))
    assert leaves == {"a.b": [1, 2], "a.e": {}, "d\\.x": 1}


segment = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)


@given(st.lists(segment, min_size=1, max_size=5))
def test_format_and_parse_round_trip(parts: list[str]) -> None:
    assert parse_key(format_key(tuple(parts))) == tuple(parts)


@given(st.lists(segment.filter(lambda s: not s.isdigit()), min_size=1, max_size=4), st.integers())
def test_set_then_get(parts: list[str], value: int) -> None:
    key = format_key(tuple(parts))
    assert get_key(set_key({}, key, value), key) == value
