"""ConfigComponent and ConfigValues: models, hierarchy points, JSON schema subset, semantic checks."""

from __future__ import annotations

from typing import Any

import pytest

from operators.config.levels import (
    LevelError,
    canonical_point,
    complete_pairs,
    format_point,
    parse_levels,
    point_from_level,
    point_from_pairs,
)
from operators.config.models import (
    ConfigComponentSpec,
    ConfigValuesSpec,
    ValuesContext,
    component_problems,
    values_problems,
)
from operators.config.schema import schema_at, schema_problems, validate, value_from_text
from operators.environment.models import EnvironmentSpec
from operators.runtime.kube import crds as crdgen

ENV = EnvironmentSpec.model_validate({
    "release": "mitaka-9.0",
    "hierarchyLevels": ["role", "node"],
    "components": ["fuel", "missing-one"],
    "nodes": [{"name": "node-1", "fqdn": "node-1.domain.tld", "roles": ["controller"]},
              {"name": "node-2", "roles": ["compute"]},
              {"name": "node-3", "roles": ["compute", "cinder"]}],
})
SCHEMA = {"type": "object", "properties": {"deployment_id": {"type": "integer", "minimum": 1}},
          "additionalProperties": True}
COMPONENTS = {"fuel": ConfigComponentSpec.model_validate({
    "resources": [{"name": "astute", "schema": SCHEMA}, {"name": "override/plugins"}],
})}


def ctx(**kw: Any) -> ValuesContext:
    return ValuesContext(**{"environment": ENV, "components": COMPONENTS, **kw})


def spec(**kw: Any) -> dict[str, Any]:
    return {"environment": "env1", "resource": "astute", **kw}


# --- levels -------------------------------------------------------------------------------


def test_points_follow_the_environment_order_whatever_the_mapping_order() -> None:
    assert point_from_level({}, ["role", "node"]) == ()
    assert point_from_level({"node": "n", "role": "r"}, ["role", "node"]) == (("role", "r"), ("node", "n"))
    with pytest.raises(LevelError, match="'role' missing before 'node'"):
        point_from_level({"node": "n"}, ["role", "node"])
    with pytest.raises(LevelError, match="level 'rack' is not in the hierarchy"):
        point_from_level({"rack": "1"}, ["role", "node"])
    assert point_from_pairs([("role", "r")], ["role", "node"]) == (("role", "r"),)
    with pytest.raises(LevelError, match="must follow the hierarchy"):
        point_from_pairs([("node", "n"), ("role", "r")], ["role", "node"])


def test_a_left_out_role_comes_from_the_node_when_it_has_one() -> None:
    assert complete_pairs([("node", "node-1.domain.tld")], ENV) == [
        ("role", "controller"), ("node", "node-1.domain.tld")]
    assert complete_pairs([("node", "ghost")], ENV) == [("node", "ghost")]  # the node check reports it
    assert complete_pairs([("role", "x"), ("node", "node-2")], ENV) == [("role", "x"), ("node", "node-2")]
    with pytest.raises(LevelError, match='node "node-3" has several roles'):
        complete_pairs([("node", "node-3")], ENV)
    racks = EnvironmentSpec.model_validate({**ENV.model_dump(by_alias=True),
                                            "hierarchyLevels": ["rack", "role", "node"]})
    assert complete_pairs([("rack", "r1"), ("node", "node-2")], racks) == [
        ("rack", "r1"), ("role", "compute"), ("node", "node-2")]
    flat = EnvironmentSpec.model_validate({**ENV.model_dump(by_alias=True), "hierarchyLevels": ["node", "role"]})
    assert complete_pairs([("node", "node-2")], flat) == [("node", "node-2")]
    assert values_problems(spec(level={"node": "node-1"}), ctx()) == []


def test_nodes_are_the_same_point_by_name_or_fqdn() -> None:
    point = (("role", "controller"), ("node", "node-1"))
    assert canonical_point(point, ENV) == (("role", "controller"), ("node", "node-1.domain.tld"))
    assert canonical_point((("node", "node-2"),), ENV) == (("node", "node-2"),)


def test_level_text() -> None:
    assert parse_levels("role=controller,node=node-1.domain.tld") == [
        ("role", "controller"), ("node", "node-1.domain.tld")]
    assert format_point((("role", "c"), ("node", "n"))) == "role=c,node=n"
    assert format_point(()) == "(root)"
    with pytest.raises(LevelError, match="expected name=value, got 'node'"):
        parse_levels("node")


# --- JSON schema subset -------------------------------------------------------------------


def test_schema_keywords_are_checked_and_messages_start_with_the_path() -> None:
    schema = {"type": "object", "required": ["a"], "additionalProperties": False,
              "properties": {"a": {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
                             "s": {"type": "string", "pattern": "^x", "maxLength": 3}}}
    assert validate({"a": [1, 2]}, schema) == []
    assert validate({"a": [1, 3, 1], "s": "yyyy", "z": 0}, schema) == [
        "data.a[1]: must be one of [1, 2]",
        "data.a[2]: duplicate item",
        "data.s: longer than 3 characters",
        "data.s: does not match the pattern '^x'",
        "data.z: not allowed (allowed: a, s)",
    ]
    assert validate({}, schema) == ["data.a: required"]
    assert validate(True, {"type": "integer"}) == ["data: expected integer, got boolean"]
    assert validate(2.0, {"type": "integer", "multipleOf": 2}) == []
    assert validate(5, {"anyOf": [{"type": "string"}, {"minimum": 6}]}) == ["data: matches none of the anyOf schemas"]


def test_unsupported_keywords_are_refused_rather_than_ignored() -> None:
    # `$ref` is supported since the jsonschema library (draft 2020-12): a reference to nothing is the error now
    assert schema_problems({"$ref": "#/x", "properties": {"a": {"type": "strin"}}, "minItems": -1}) == [
        "schema.$ref: '#/x' points to nothing in the schema",
        "schema.properties.a.type: must be one of null, boolean, integer, number, string, array, object "
        "(or a list of them)",
        "schema.minItems: must be a non-negative integer",
    ]
    assert schema_problems({"title": "t", "description": "d", "type": ["string", "null"]}) == []
    assert schema_problems({"minimun": 1}) == ["schema.minimun: unsupported keyword (did you mean 'minimum'?)"]


# --- ConfigComponent ----------------------------------------------------------------------


def test_component_problems() -> None:
    assert component_problems({"resources": [{"name": "astute", "schema": SCHEMA}, {"name": "globals"}]}) == []
    assert component_problems({"resources": [{"name": "a"}, {"name": "a", "schema": {"type": "x"}}]}) == [
        'spec.resources[1].name: duplicate resource "a" (first at spec.resources[0])',
        "spec.resources[1].schema.type: must be one of null, boolean, integer, number, string, array, object "
        "(or a list of them)",
    ]


def test_resource_names_are_url_safe_with_slashes() -> None:
    ConfigComponentSpec.model_validate({"resources": [{"name": "override/configuration/node"}]})
    for bad in ["a b", "/lead", "trail/", "a//b", "q?x"]:
        with pytest.raises(ValueError):
            ConfigComponentSpec.model_validate({"resources": [{"name": bad}]})


# --- ConfigValues -------------------------------------------------------------------------


def test_good_values_have_no_problems() -> None:
    assert values_problems(spec(level={"role": "controller", "node": "node-1.domain.tld"},
                                data={"deployment_id": 2}), ctx()) == []
    assert values_problems(spec(resource="override/plugins", kind="overrides", data={"x": [1]}), ctx()) == []


@pytest.mark.parametrize("fields,message", [
    ({"resource": "nope"}, 'spec.resource: resource "nope" is not defined by any component enabled in environment '
                           '"env1" (enabled components: fuel, missing-one); ConfigComponent not found: missing-one'),
    ({"level": {"rack": "r1"}}, "spec.level: level 'rack' is not in the hierarchy (role, node) of environment "
                                '"env1"'),
    ({"level": {"node": "node-3"}}, 'spec.level: node "node-3" has several roles (compute, cinder): name one, '
                                    'e.g. role=compute,node=node-3 of environment "env1"'),
    ({"level": {"role": "compute", "node": "node-1"}},
     'spec.level.role: node "node-1" does not have role "compute" (its roles: controller) in environment "env1"'),
    ({"level": {"role": "compute", "node": "node-9"}},
     'spec.level.node: node "node-9" is not a node of environment "env1"'),
    ({"data": {"deployment_id": "two"}}, "spec.data.deployment_id: expected integer, got string"),
    ({"data": {"deployment_id": 0}}, "spec.data.deployment_id: below the minimum 1"),
    ({"kind": "override"}, "spec.kind: Input should be 'values' or 'overrides'"),
    ({"revertTo": 0}, "spec.revertTo: Input should be greater than or equal to 1"),
    ({"level": {"role": "a/b"}}, "spec.level.role: String should match pattern"),
    ({"extra": 1}, "spec.extra: Extra inputs are not permitted"),
])
def test_bad_values_are_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    problems = values_problems(spec(**fields), ctx())
    assert problems and problems[0].startswith(message), problems


def test_missing_environment_and_duplicates() -> None:
    assert values_problems(spec(), ctx(environment=None)) == ['spec.environment: Environment "env1" not found']
    mine = spec(level={"role": "controller", "node": "node-1"})
    twin = spec(level={"node": "node-1.domain.tld", "role": "controller"})
    others = [("twin", twin), ("me", mine), ("ov", {**twin, "kind": "overrides"})]
    assert values_problems(mine, ctx(others=others, name="me")) == [
        'spec: ConfigValues "twin" already holds the values of resource "astute" at this level of environment "env1"'
    ]
    assert values_problems(mine, ctx(others=others[1:], name="me")) == []


def test_crd_schemas_are_structural_and_keep_free_form_data() -> None:
    values = crdgen.structural(ConfigValuesSpec)
    assert values["properties"]["data"] == {
        "description": values["properties"]["data"]["description"],
        "type": "object", "x-kubernetes-preserve-unknown-fields": True,
    }
    assert values["properties"]["revertTo"]["nullable"] is True
    component = crdgen.structural(ConfigComponentSpec)
    resource = component["properties"]["resources"]["items"]
    assert resource["properties"]["schema"]["x-kubernetes-preserve-unknown-fields"] is True
    for schema in (values, component):
        assert all("description" in p for p in schema["properties"].values())
    assert ConfigValuesSpec.model_validate({"environment": "e", "resource": "r"}).kind == "values"


def test_command_line_values_take_the_type_the_schema_declares() -> None:
    schema = {"type": "object", "properties": {
        "id": {"type": "integer"}, "ratio": {"type": "number"}, "on": {"type": "boolean"},
        "name": {"type": ["string", "null"]}, "maybe": {"type": ["integer", "null"]},
        "servers": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
        "tags": {"type": "object", "additionalProperties": {"type": "boolean"}}}}
    assert schema_at(schema, ("id",)) == {"type": "integer"}
    assert schema_at(schema, ("servers", "0", "port")) == {"type": "integer"}
    assert schema_at(schema, ("tags", "anything")) == {"type": "boolean"}
    assert schema_at(schema, ("unknown",)) is None and schema_at(None, ("id",)) is None
    assert value_from_text("2", {"type": "integer"}) == 2
    assert value_from_text("2.5", {"type": "integer"}) == "2.5"  # not an integer: the schema check will say so
    assert value_from_text("2.5", {"type": "number"}) == 2.5
    assert value_from_text("True", {"type": "boolean"}) is True
    assert value_from_text("2", {"type": ["string", "null"]}) == "2"
    assert value_from_text("null", {"type": ["integer", "null"]}) is None
    assert value_from_text("[1, 2]", {"type": "array"}) == [1, 2]
    assert value_from_text('{"a": 1}', {"type": "object"}) == {"a": 1}
    assert value_from_text("2", None) == "2" and value_from_text("2", {}) == "2"
