"""An instance's App: its inputs from the attributes, r attributes from its properties, and the
Blueprint's variable rules as a validation of an attribute set."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.calm.compiler import compile_blueprint
from operators.calm.models import BlueprintSpec
from operators.lsm import ServiceEntitySpec
from operators.lsm.realization import app_inputs, app_outputs, as_input, blueprint_rules, from_property
from tests.unit.lsm.support import ENTITY, ENTITY_SPEC, FULL

ROOT = Path(__file__).resolve().parents[3]

REALIZED = ServiceEntitySpec.model_validate({
    **ENTITY_SPEC,
    "attributes": [*ENTITY_SPEC["attributes"], {"name": "replicas", "type": "int", "modifier": "r", "optional": True},
                   {"name": "extra", "type": "dict", "modifier": "rw+", "optional": True}],
    "realization": {
        "blueprint": "postgres",
        "inputs": [{"variable": "db_name", "attribute": "name"}, {"variable": "db_port", "attribute": "port"},
                   {"variable": "db_tags", "attribute": "tags"}, {"variable": "db_size", "attribute": "size"},
                   {"variable": "db_extra", "attribute": "extra"}],
        "outputs": [{"attribute": "address", "property": "Service_DB_address", "deployment": "db_tier", "replica": 1},
                    {"attribute": "replicas", "property": "replica_count"}],
    },
})


@pytest.mark.parametrize(("value", "text"), [
    ("a b", "a b"), (5432, "5432"), (2.5, "2.5"), (True, "true"), (False, "false"),
    ({"b": 1, "a": [1, 2]}, '{"a":[1,2],"b":1}'), (["x"], '["x"]'),
])
def test_attributes_become_text_inputs(value: Any, text: str) -> None:
    assert as_input(value) == text


def test_the_inputs_of_an_app_come_from_the_mapped_attributes() -> None:
    assert app_inputs(REALIZED, {**FULL, "size": None, "extra": {"k": True}}) == {
        "db_name": "db-1", "db_port": "5432", "db_tags": '["db"]', "db_extra": '{"k":true}'}
    assert app_inputs(ENTITY, FULL) == {}  # no realization: no App


@pytest.mark.parametrize(("kind", "text", "value"), [
    ("string", "10.0.0.1", "10.0.0.1"), ("int", "3", 3), ("float", "3", 3.0), ("bool", "true", True),
    ("dict", '{"a": 1}', {"a": 1}), ("list", "[1]", [1]),
])
def test_properties_are_read_by_the_attribute_type(kind: Any, text: str, value: Any) -> None:
    assert from_property(kind, text) == value


@pytest.mark.parametrize(("kind", "text"), [("int", "three"), ("int", "1.5"), ("bool", "1"), ("list", "{}")])
def test_a_property_that_is_not_of_the_type(kind: Any, text: str) -> None:
    with pytest.raises(ValueError):
        from_property(kind, text)


def test_r_attributes_are_read_from_the_apps_entities() -> None:
    status = {"entities": {
        "properties": {"replica_count": "2"},
        "deployments": [{"name": "db_tier", "replicas": [
            {"index": 0, "properties": {"Service_DB_address": "10.0.0.1"}},
            {"index": 1, "properties": {"Service_DB_address": "10.0.0.2"}},
        ]}],
    }}
    assert app_outputs(REALIZED, status) == ({"address": "10.0.0.2", "replicas": 2}, [])
    missing, problems = app_outputs(REALIZED, {"entities": {"properties": {"replica_count": "two"}}})
    assert missing == {}
    assert problems == ["address: the App has no property Service_DB_address of db_tier[1]",
                        "replicas: the App's property replica_count is not a int"]
    assert app_outputs(ENTITY, status) == ({}, [])


def test_the_blueprints_variable_rules_validate_a_set_naming_the_attribute() -> None:
    blueprint = BlueprintSpec.model_validate({"variables": [
        {"name": "db_name", "runtime": True, "regex": "[a-z0-9-]+"},
        {"name": "db_port", "type": "int", "runtime": True, "options": ["5432", "5433"]},
        {"name": "db_tags", "type": "dict", "runtime": True},
        {"name": "db_size", "runtime": True, "mandatory": True},
        {"name": "db_extra", "runtime": True},
    ]})
    check = blueprint_rules(REALIZED, blueprint)
    assert check({**FULL, "tags": {}, "size": 1.0}, "spec.attributes") == []
    assert check({**FULL, "name": "DB", "port": 1}, "spec.attributes") == [
        "spec.attributes.name (Blueprint variable db_name): 'DB' does not match '[a-z0-9-]+'",
        "spec.attributes.port (Blueprint variable db_port): '1' is not one of 5432, 5433",
        "spec.attributes.tags (Blueprint variable db_tags): '[\"db\"]': not a JSON object (type dict)",
        "spec.attributes.size (Blueprint variable db_size): required (a mandatory runtime variable without a default)",
    ]


def test_the_greeter_examples_update_action_publishes_again_what_the_entity_reads_back() -> None:
    """examples/service-entity.yaml: an r attribute read from a property (`address`) must follow an update,
    so the compiled `update` action sets that property again on the same entity, as `create` does."""
    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples" / "service-entity.yaml").read_text())}
    raw = docs["Blueprint"]
    result = compile_blueprint(BlueprintSpec.model_validate(raw["spec"]), None)
    assert result.ok, result.errors
    entity = ServiceEntitySpec.model_validate(docs["ServiceEntity"]["spec"])
    assert entity.realization is not None and entity.realization.outputs

    def sets(action: str) -> set[tuple[str | None, str]]:
        """(target, variable) of every setvar task of an application action, read from the task's spec."""
        compiled = next(a for a in result.actions if a.name == action and a.owner is None)
        found = set()
        for task in compiled.tasks:
            if task.type == "setvar":
                node: Any = raw  # task.source is its field, e.g. spec.actions[0].tasks[1]
                for key, index in re.findall(r"(\w+)(?:\[(\d+)\])?", task.source):
                    node = node[key][int(index)] if index else node[key]
                found |= {(task.target, variable) for variable in node["variables"]}
        return found

    for output in entity.realization.outputs:
        kind, name, variable = output.property_.split("_", 2)
        assert kind == "Service" and output.deployment is not None
        assert (name, variable) in sets("create") and (name, variable) in sets("update"), output
