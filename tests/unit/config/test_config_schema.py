"""Resource schemas: JSON Schema draft 2020-12 through the jsonschema library, tenant-safe."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from operators.config.models import component_problems
from operators.config.schema import MAX_PATTERN, schema_at, schema_problems, validate

LOCAL_ONLY = "is not inside the schema: only local references (such as '#/$defs/name') are allowed, nothing is fetched"


def test_refs_and_defs() -> None:
    schema = {"$defs": {"port": {"type": "integer", "minimum": 1, "maximum": 65535},
                        "server": {"type": "object", "required": ["port"],
                                   "properties": {"port": {"$ref": "#/$defs/port"}}}},
              "type": "object",
              "properties": {"main": {"$ref": "#/$defs/server"},
                             "others": {"type": "array", "items": {"$ref": "#/$defs/server"}}}}
    assert schema_problems(schema) == []
    assert validate({"main": {"port": 80}, "others": [{"port": 443}]}, schema) == []
    assert validate({"main": {"port": 0}, "others": [{}, {"port": "x"}]}, schema) == [
        "data.main.port: below the minimum 1",
        "data.others[0].port: required",
        "data.others[1].port: expected integer, got string",
    ]
    assert schema_at(schema, ("others", "0", "port")) == schema["$defs"]["port"]  # the command line follows $ref


def test_recursive_schemas_are_fine_but_a_cycle_on_the_same_value_is_refused() -> None:
    tree = {"type": "object", "properties": {"name": {"type": "string"},
                                             "children": {"type": "array", "items": {"$ref": "#"}}}}
    assert schema_problems(tree) == []
    assert validate({"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]}, tree) == [
        "data.children[0].children[0].name: expected string, got integer",
    ]
    assert schema_problems({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
                            "$ref": "#/$defs/a"}) == [
        "schema: a reference cycle never reaches a part of the value (a $ref back to a schema in use)"]


def test_one_of_any_of_all_of() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}],
              "allOf": [{"not": {"const": 13}}]}
    assert validate(-1, schema) == []  # integer, not >= 0
    assert validate(0.5, schema) == []  # number >= 0, not an integer
    assert validate(5, schema) == ["data: must match exactly one of the oneOf schemas, matches 2"]
    assert validate(-0.5, schema) == ["data: must match exactly one of the oneOf schemas, matches 0"]
    assert validate(13, schema)[-1] == "data: must not match the schema under 'not'"
    assert validate("x", {"anyOf": [{"type": "integer"}, {"type": "null"}]}) == [
        "data: matches none of the anyOf schemas"]


def test_pattern_properties_and_if_then_else() -> None:
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "string"}},
              "properties": {"kind": {"enum": ["a", "b"]}}, "additionalProperties": False,
              "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x-a"]}}
    assert schema_problems(schema) == []
    assert validate({"kind": "b", "x-anything": "ok"}, schema) == []
    assert validate({"kind": "a", "x-n": 1, "other": True}, schema) == [
        "data.x-n: expected string, got integer",
        "data.other: not allowed (allowed: kind, names matching '^x-')",
        "data.x-a: required",
    ]
    assert schema_at(schema, ("x-y",)) == {"type": "string"}


@pytest.mark.parametrize("fmt,good,bad", [
    ("email", "ops@example.com", "ops"),
    ("ipv4", "10.0.0.1", "10.0.0.300"),
    ("date", "2024-02-29", "2023-02-29"),
    ("date-time", "2024-01-01T10:00:00Z", "2024-01-01 10:00"),
    ("time", "10:00:00+02:00", "25:00:00Z"),
    ("hostname", "node-1.domain.tld", "-bad-.tld"),
    ("uuid", "2b1f6a3e-8f6c-4f7e-9d3a-1c2b3d4e5f60", "nope"),
])
def test_formats_are_asserted(fmt: str, good: str, bad: str) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    assert schema_problems(schema) == []
    assert validate({"v": good}, schema) == []
    assert validate({"v": bad}, schema) == [f"data.v: not a valid {fmt}"]


def test_meta_schema_refusals_name_the_path_inside_the_schema() -> None:
    assert schema_problems({"properties": {"a": {"items": {"minLength": "3"}}, "b": 5},
                            "anyOf": [], "pattern": "(", "patternProperties": {"[": {}}}) == [
        "schema.properties.a.items.minLength: must be a non-negative integer",
        "schema.properties.b: a schema is a mapping (or true/false), got a integer",
        "schema.anyOf: must be a non-empty list of schemas",
        "schema.pattern: '(' is not a valid regular expression (missing ): ( (RE2 syntax: no backreferences or "
        "lookaround))",
        "schema.patternProperties: '[' is not a valid regular expression (missing ]: [ (RE2 syntax: no "
        "backreferences or lookaround))",
    ]
    assert schema_problems({"properties": {"d": {"format": "colour", "definitions": {}}},
                            "$schema": "http://json-schema.org/draft-07/schema#"}) == [
        "schema.properties.d.format: format 'colour' is not checked by Stead (checked: date, date-time, email, "
        "hostname, idn-email, idn-hostname, ipv4, ipv6, json-pointer, regex, relative-json-pointer, time, uuid)",
        "schema.properties.d.definitions: not a draft 2020-12 keyword (use $defs)",
        "schema.$schema: Stead validates with JSON Schema draft 2020-12 only "
        "(https://json-schema.org/draft/2020-12/schema)",
    ]
    assert schema_problems({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}) == []
    assert component_problems({"resources": [{"name": "a", "schema": {"properties": {"p": {"minimum": "1"}}}}]}) == [
        "spec.resources[0].schema.properties.p.minimum: must be a number"]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Any attempt to connect or to open a URL is recorded (and fails)."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return attempts


@pytest.mark.parametrize("ref", ["http://127.0.0.1:9/x", "file:///etc/passwd", "https://json-schema.example/s.json",
                                 "urn:uuid:2b1f6a3e-8f6c-4f7e-9d3a-1c2b3d4e5f60", "other.json#/$defs/a"])
def test_references_outside_the_schema_are_refused_and_nothing_is_fetched(ref: str, no_network: list[Any]) -> None:
    schema = {"type": "object", "properties": {"remote": {"$ref": ref}}}
    assert schema_problems(schema) == [f"schema.properties.remote.$ref: {ref!r} {LOCAL_ONLY}"]
    assert component_problems({"resources": [{"name": "r", "schema": schema}]}) == [
        f"spec.resources[0].schema.properties.remote.$ref: {ref!r} {LOCAL_ONLY}"]
    # refused schemas check nothing (and fetch nothing) if they reach validation anyway
    assert validate({"remote": 1}, schema)[0].startswith("data: cannot be checked, the schema is invalid")
    assert no_network == []


def test_an_embedded_id_does_not_open_a_way_out(no_network: list[Any]) -> None:
    schema = {"$id": "http://127.0.0.1:9/root.json", "properties": {"a": {"$ref": "other.json"}},
              "$defs": {"inner": {"$id": "inner.json", "type": "integer"}}}
    assert schema_problems(schema) == [f"schema.properties.a.$ref: 'other.json' {LOCAL_ONLY}"]
    local = {**schema, "properties": {"a": {"$ref": "inner.json"}}}
    assert schema_problems(local) == []  # an embedded resource resolves in place
    assert validate({"a": "x"}, local) == ["data.a: expected integer, got string"]
    assert no_network == []


def test_the_work_is_bounded() -> None:
    assert schema_problems({"enum": ["x" * 70_000]}) == ["schema: 70013 bytes as JSON, more than the 65536 allowed"]
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(40):
        node["items"] = {}
        node = node["items"]
    assert schema_problems(deep) == ["schema: nested 33 levels deep, more than the 32 allowed"]
    # small, but 2**30 evaluations once the references are expanded
    laughs: dict[str, Any] = {"$defs": {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(30)},
                              "$ref": "#/$defs/d0"}
    laughs["$defs"]["d30"] = {"type": "string"}
    assert schema_problems(laughs) == ["schema: more than 10000 subschemas once its references are expanded"]
    chain: dict[str, Any] = {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(1000)} | {"d1000": {}},
                             "$ref": "#/$defs/d0"}  # the stack, not the time: would exhaust Python's recursion
    assert schema_problems(chain) == ["schema: subschemas nest more than 128 deep once its references are expanded"]
    assert schema_problems({"pattern": "a" * (MAX_PATTERN + 1)}) == [
        f"schema.pattern: longer than {MAX_PATTERN} characters"]


def test_decimal_multiples_and_json_equality() -> None:
    assert validate(0.3, {"multipleOf": 0.1}) == []
    assert validate(0.35, {"multipleOf": 0.1}) == ["data: not a multiple of 0.1"]
    assert validate(True, {"enum": [1]}) == ["data: must be one of [1]"]
    assert validate([1, 1.0], {"uniqueItems": True}) == ["data[1]: duplicate item"]
    assert validate("a", {"type": "integer", "enum": [1]}) == ["data: expected integer, got string"]
    assert validate({"Bad": 1}, {"propertyNames": {"pattern": "^[a-z]+$"}}) == [
        "data: key 'Bad': does not match the pattern '^[a-z]+$'"]
    assert validate({"a": 1}, {"dependentRequired": {"a": ["b"]}}) == ["data.b: required when 'a' is present"]


def test_patterns_are_re2_so_a_tenants_pattern_cannot_backtrack() -> None:
    """Issue 25 (the regex freeze, here in ConfigComponent schemas): `pattern` and `patternProperties`
    are matched by RE2, in time linear in the value, also where the library itself would call `re`
    (`additionalProperties`, Stead's own messages). What only backtracking can do is refused at apply."""
    assert schema_problems({"pattern": r"^(a)\1$"}) == [
        "schema.pattern: '^(a)\\\\1$' is not a valid regular expression (invalid escape sequence: \\1 (RE2 "
        "syntax: no backreferences or lookaround))"]
    assert schema_problems({"patternProperties": {"(?=x)": {}}})[0].startswith(
        "schema.patternProperties: '(?=x)' is not a valid regular expression")
    assert schema_problems({"patternProperties": {"^x": {}}, "allOf": [{"unevaluatedProperties": False}]}) == [
        "schema.allOf[0].unevaluatedProperties: not supported in a schema with patternProperties (Stead matches "
        "patterns with RE2, and this combination would not be): use additionalProperties"]
    # `re` takes minutes over 40 characters of these; the child is killed at its deadline if it backtracks.
    program = """
from operators.config.schema import validate
evil = "^(a+)+$"
print(validate({"v": "a" * 5000 + "!"}, {"properties": {"v": {"pattern": evil}}}))
print(len(validate({"a" * 5000 + "!": 1}, {"patternProperties": {evil: {}}, "additionalProperties": False})))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['["data.v: does not match the pattern \'^(a+)+$\'"]', "1"]
