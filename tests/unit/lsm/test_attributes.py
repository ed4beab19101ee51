"""Attributes against their entity: types, required values, modifiers, defaults, the identity, and the
checks of a ServiceEntity spec."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.lsm import ServiceEntitySpec, service_entity_problems
from operators.lsm.attributes import (
    changed_after_creation,
    changed_keys,
    client_problems,
    entity_problems,
    identity_value,
    set_problems,
    type_fits,
    with_defaults,
)
from operators.lsm.models import AttributeType
from tests.unit.lsm.support import CLIENT, ENTITY, ENTITY_SPEC, FULL


@pytest.mark.parametrize(("kind", "fits", "misfits"), [
    ("string", ["", "x"], [1, True, None, {}, []]),
    ("int", [0, -3, 10**20], [1.5, True, "1", None]),
    ("float", [1.5, 2, -0.0], [True, "1.5", None]),
    ("bool", [True, False], [0, 1, "true", None]),
    ("dict", [{}, {"a": [1]}], [[], "{}", None]),
    ("list", [[], [1, "a"]], [{}, "[]", None]),
])
def test_json_values_against_attribute_types(kind: AttributeType, fits: list[Any], misfits: list[Any]) -> None:
    assert all(type_fits(kind, value) for value in fits)
    assert not any(type_fits(kind, value) for value in misfits)


def test_a_set_is_checked_for_types_required_values_and_unknown_names() -> None:
    assert set_problems(ENTITY, "database", FULL, "candidateAttributes") == []
    assert set_problems(ENTITY, "database", {**FULL, "size": None, "address": None}, "c") == []  # both optional
    problems = set_problems(ENTITY, "database", {"name": 7, "port": None, "tags": "db", "colour": "red"}, "c")
    assert problems == [
        "c.name: expected string, got int",
        "c.port: required (null given)",
        "c.tags: expected list, got string",
        "c.colour: not an attribute of service entity database (attributes: name, region, port, size, tags, "
        "address)",
        "c.region: required",
    ]


def test_what_a_client_may_send() -> None:
    assert client_problems(ENTITY, "database", CLIENT) == []
    assert client_problems(ENTITY, "database", {"address": "x", "other": 1}) == [
        ("ReadOnlyAttribute", "spec.attributes.address: read-only (modifier r): Stead sets it from the deployment, "
                              "a client never does"),
        ("UnknownAttribute", "spec.attributes.other: not an attribute of service entity database (attributes: "
                             "name, region, port, size, tags, address)"),
    ]
    assert changed_keys(CLIENT, {**CLIENT, "port": 1, "size": 2.0}) == ["port", "size"]
    assert changed_keys({**CLIENT, "size": 2.0}, CLIENT) == ["size"]
    assert changed_keys(CLIENT, dict(CLIENT)) == []
    assert changed_after_creation(ENTITY, ["port", "region", "size"]) == [
        ("ImmutableAttribute", "spec.attributes.region: set at creation only (modifier rw); rw+ attributes may "
                               "change")]


def test_defaults_fill_absent_attributes_only() -> None:
    assert with_defaults(ENTITY, CLIENT) == FULL
    assert with_defaults(ENTITY, {**CLIENT, "tags": []}) == {**CLIENT, "tags": []}


def test_the_identity_value_as_text() -> None:
    assert identity_value(ENTITY, CLIENT) == "db-1"
    numbered = ENTITY.model_copy(update={"identity": "port"})
    assert identity_value(numbered, CLIENT) == "5432"
    assert identity_value(ENTITY, {}) is None
    assert identity_value(ENTITY.model_copy(update={"identity": None}), CLIENT) is None


# --- the ServiceEntity spec ----------------------------------------------------------------------


def _entity(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(ENTITY_SPEC)
    spec.update(changes)
    return spec


def _attributes(index: int, **changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(ENTITY_SPEC)
    spec["attributes"][index].update(changes)
    return spec


def test_a_good_entity_has_no_problems() -> None:
    assert service_entity_problems(ENTITY_SPEC) == []


def test_the_schema_names_the_field() -> None:
    assert service_entity_problems(_attributes(2, type="integer"))[0].startswith("spec.attributes[2].type: Input "
                                                                                 "should be 'string', 'int'")
    assert service_entity_problems(_attributes(2, modifier="w"))[0].startswith("spec.attributes[2].modifier: ")
    assert service_entity_problems(_entity(lifecycle={"builtin": "simplest"}))[0].startswith(
        "spec.lifecycle.builtin: Input should be 'simple', 'service' or 'testing_basic_lifecycle'")
    assert service_entity_problems(_entity(lifecycle={"name": "mine", "builtin": "simple"})) == [
        "spec.lifecycle: Value error, exactly one of name (a Lifecycle of this namespace), "
        "cluster (a ClusterLifecycle) or builtin must be set"]
    assert service_entity_problems(_entity(lifecycle={}))[0].startswith("spec.lifecycle: Value error, exactly one")


@pytest.mark.parametrize(("changes", "problem"), [
    ({"identity": "nickname"}, "spec.identity: nickname is not an attribute (attributes: name, region, port, size, "
                               "tags, address)"),
    ({"identity": "port"}, "spec.identity: port has modifier rw+; an identity is rw (given at creation, never "
                           "changed)"),
    ({"identity": "address"}, "spec.identity: address has modifier r; an identity is rw (given at creation, never "
                              "changed)"),
])
def test_the_identity_is_an_rw_attribute(changes: dict[str, Any], problem: str) -> None:
    assert problem in service_entity_problems(_entity(**changes))


def test_the_identity_is_a_required_string_or_int() -> None:
    spec = _attributes(0, type="dict", optional=True)
    assert service_entity_problems(spec) == [
        "spec.identity: name is of type dict; an identity is a string or an int",
        "spec.identity: name is optional; an identity is required",
    ]
    assert service_entity_problems(_attributes(0, type="int")) == []


def test_duplicate_attributes_and_defaults_of_the_wrong_type() -> None:
    spec = _entity()
    spec["attributes"].append({"name": "port", "type": "string"})
    assert service_entity_problems(spec) == [
        'spec.attributes[6].name: duplicate attribute "port" (first at spec.attributes[2])']
    assert service_entity_problems(_attributes(4, default="db")) == [
        "spec.attributes[4].default: expected list, got string"]


def test_the_realization_maps_attributes_that_exist_and_fills_only_r_ones() -> None:
    realization = {
        "blueprint": "postgres",
        "inputs": [{"variable": "db_port", "attribute": "port"}, {"variable": "owner", "attribute": "owner"}],
        "outputs": [{"attribute": "address", "property": "ip"}, {"attribute": "port", "property": "port"},
                    {"attribute": "uptime", "property": "uptime"}],
    }
    assert entity_problems(ServiceEntitySpec.model_validate(_entity(realization=realization))) == [
        "spec.realization.inputs[1].attribute: owner is not an attribute (attributes: name, region, port, size, "
        "tags, address)",
        "spec.realization.outputs[1].attribute: port has modifier rw+; only r attributes are filled from the App",
        "spec.realization.outputs[2].attribute: uptime is not an attribute (attributes: name, region, port, size, "
        "tags, address)",
    ]
