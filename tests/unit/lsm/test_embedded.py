"""Embedded entities: their definitions, their values (named by full path), defaults, and updates that match
items by key, keep unchanged items untouched and never change a key."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from operators.lsm import Refused, ResourceOutcome, ServiceEntitySpec, Update, advance, service_entity_problems
from operators.lsm.attributes import client_problems, set_problems, with_defaults
from operators.lsm.embedded import merge, update_problems
from operators.lsm.models import MAX_EMBEDDED_DEPTH
from operators.lsm.realization import app_inputs
from tests.unit.lsm.support import context, create

PORT = {"key": ["number"], "lower": 1, "upper": 3, "attributes": [
    {"name": "number", "type": "int"},
    {"name": "protocol", "type": "string", "modifier": "rw+", "default": "tcp"},
    {"name": "label", "type": "string", "modifier": "rw+", "optional": True},
    {"name": "opened", "type": "bool", "modifier": "r", "optional": True},
    {"name": "limits", "type": "dict", "modifier": "rw+", "optional": True, "embedded": {"attributes": [
        {"name": "rate", "type": "int", "modifier": "rw+"}]}},
]}
SPEC: dict[str, Any] = {
    "attributes": [
        {"name": "name", "type": "string"},
        {"name": "ports", "type": "list", "modifier": "rw+", "embedded": PORT},
        {"name": "owner", "type": "dict", "embedded": {"key": ["user"], "attributes": [
            {"name": "user", "type": "string"}, {"name": "mail", "type": "string", "optional": True}]}},
    ],
    "identity": "name",
    "lifecycle": {"builtin": "simple"},
    "realization": None,
}
ENTITY = ServiceEntitySpec.model_validate(SPEC)
CLIENT: dict[str, Any] = {"name": "edge", "owner": {"user": "ann"},
                          "ports": [{"number": 22}, {"number": 80, "label": "web"}, {"number": 443}]}


def spec_with(**changes: Any) -> dict[str, Any]:
    """SPEC with the ports attribute's embedded definition changed."""
    spec = copy.deepcopy(SPEC)
    spec["attributes"][1]["embedded"].update(changes)
    return spec


def nested(depth: int) -> dict[str, Any]:
    """An attribute definition with `depth` embedded entities, one inside the other."""
    attribute: dict[str, Any] = {"name": "leaf", "type": "int"}
    for level in range(depth):
        attribute = {"name": f"level{level}", "type": "dict", "embedded": {"attributes": [attribute]}}
    return attribute


def test_an_embedded_definition_is_checked_naming_its_field() -> None:
    assert service_entity_problems(SPEC) == []
    assert service_entity_problems(spec_with(key=[], lower=4)) == [
        "spec.attributes[1].embedded.lower: 4 is more than upper (3)",
        "spec.attributes[1].embedded.key: a list of embedded items needs a key (the attributes that identify an "
        "item): an update matches items by it",
    ]
    assert service_entity_problems(spec_with(key=["protocol", "label", "limits", "nope"])) == [
        "spec.attributes[1].embedded.key[0]: protocol has modifier rw+; a key is rw (given when the item is added, "
        "never changed)",
        "spec.attributes[1].embedded.key[1]: label has modifier rw+; a key is rw (given when the item is added, "
        "never changed)",
        "spec.attributes[1].embedded.key[1]: label is optional; a key is required",
        "spec.attributes[1].embedded.key[2]: limits has modifier rw+; a key is rw (given when the item is added, "
        "never changed)",
        "spec.attributes[1].embedded.key[2]: limits is optional; a key is required",
        "spec.attributes[1].embedded.key[2]: limits is of type dict; a key is a string, int, float or bool",
        "spec.attributes[1].embedded.key[3]: nope is not an attribute of the embedded entity (attributes: number, "
        "protocol, label, opened, limits)",
    ]
    bad = copy.deepcopy(SPEC)
    bad["attributes"][2]["type"] = "string"
    bad["attributes"][1]["embedded"]["attributes"][1]["default"] = 6
    bad["attributes"][1]["embedded"]["attributes"].append({"name": "number", "type": "int"})
    bad["attributes"][1]["default"] = [{"number": "x"}]
    assert service_entity_problems(bad) == [
        "spec.attributes[1].default[0].number: expected int, got string",
        "spec.attributes[1].embedded.attributes[1].default: expected string, got int",
        'spec.attributes[1].embedded.attributes[5].name: duplicate attribute "number" (first at '
        "spec.attributes[1].embedded.attributes[0])",
        "spec.attributes[2].type: an embedded attribute is of type dict (one item) or list (items), not string",
    ]
    # the schema's own checks of a nested definition name its field too
    assert service_entity_problems(spec_with(attributes=[{"name": "n", "type": "complex"}])) == [
        "spec.attributes[1].embedded.attributes[0].type: Input should be 'string', 'int', 'float', 'bool', 'dict' "
        "or 'list'",
    ]


def test_embedded_entities_nest_a_bounded_depth() -> None:
    def spec(depth: int) -> dict[str, Any]:
        return {"attributes": [nested(depth)], "lifecycle": {"builtin": "simple"}}

    assert service_entity_problems(spec(MAX_EMBEDDED_DEPTH)) == []
    deep = "spec.attributes[0]" + ".embedded.attributes[0]" * MAX_EMBEDDED_DEPTH
    assert service_entity_problems(spec(MAX_EMBEDDED_DEPTH + 1)) == [
        f"{deep}.embedded: embedded entities nest {MAX_EMBEDDED_DEPTH} deep at most"]


def test_a_clients_embedded_value_is_refused_naming_the_full_path() -> None:
    assert client_problems(ENTITY, "router", CLIENT) == []
    given = {"owner": ["ann"], "ports": [
        {"number": 22}, {"number": 80, "opened": True}, {"number": "443", "colour": 1, "limits": {"rate": "x"}},
        {"number": 22, "protocol": None}]}
    assert [message for _, message in client_problems(ENTITY, "router", given)] == [
        "spec.attributes.owner: expected dict (an embedded item), got list",
        "spec.attributes.ports: at most 3 items, 4 given",
        "spec.attributes.ports[1].opened: read-only (modifier r): Stead sets it, a client never does",
        "spec.attributes.ports[2].number: expected int, got string",
        "spec.attributes.ports[2].colour: not an attribute of the embedded entity (attributes: number, protocol, "
        "label, opened, limits)",
        "spec.attributes.ports[2].limits.rate: expected int, got string",
        "spec.attributes.ports[3].protocol: required (null given)",
        "spec.attributes.ports[3]: its key number=22 is also the key of spec.attributes.ports[0]: a key identifies "
        "one item",
    ]
    assert [message for _, message in client_problems(ENTITY, "router", {"ports": [], "owner": {}})] == [
        "spec.attributes.ports: at least 1 item, 0 given",
        "spec.attributes.owner.user: required",
    ]
    # the webhook's engine refuses the creation with them (422)
    with pytest.raises(Refused) as refused:
        create(context(entity=ENTITY), {**CLIENT, "ports": [{"number": 22}, {"number": True}]})
    assert refused.value.code == 422
    assert str(refused.value) == "spec.attributes.ports[1].number: expected int, got bool"


def test_a_set_that_bypassed_the_webhook_fails_validation_naming_the_path() -> None:
    values = with_defaults(ENTITY, {**CLIENT, "ports": [{"number": 22, "opened": "yes"}]})
    assert set_problems(ENTITY, "router", values, "spec.attributes") == [
        "spec.attributes.ports[0].opened: expected bool, got string"]


def test_creation_fills_each_items_defaults_and_the_app_gets_json() -> None:
    outcome = create(context(entity=ENTITY), CLIENT)
    active = outcome.status.active_attributes
    assert active is not None and active["ports"] == [
        {"number": 22, "protocol": "tcp"}, {"number": 80, "label": "web", "protocol": "tcp"},
        {"number": 443, "protocol": "tcp"}]
    entity = ENTITY.model_copy(update={"realization": {"blueprint": "b", "inputs": [
        {"variable": "ports", "attribute": "ports"}, {"variable": "owner", "attribute": "owner"}]}})
    entity = ServiceEntitySpec.model_validate(entity.model_dump(by_alias=True))
    assert app_inputs(entity, active) == {
        "owner": '{"user":"ann"}',
        "ports": '[{"number":22,"protocol":"tcp"},{"label":"web","number":80,"protocol":"tcp"},'
                 '{"number":443,"protocol":"tcp"}]',
    }


def up_with(entity: ServiceEntitySpec = ENTITY) -> Any:
    """An instance of the entity, up with CLIENT's attributes (and the defaults they were given then)."""
    ctx = context(entity=entity)
    status = advance(ctx, create(ctx, CLIENT).status, ResourceOutcome(True)).status
    assert status.state == "up"
    return status


def test_an_update_keeps_unchanged_items_untouched() -> None:
    status = up_with()
    # the entity's default changed since: an item kept as it was keeps the default it was given
    changed = copy.deepcopy(SPEC)
    changed["attributes"][1]["embedded"]["attributes"][1]["default"] = "udp"
    ctx = context(entity=ServiceEntitySpec.model_validate(changed))
    ports = [{"number": 80, "label": "site"}, {"number": 443}, {"number": 8080}]  # 22 removed, 8080 added
    outcome = advance(ctx, status, Update({**CLIENT, "ports": ports}, status.version))
    assert outcome.status.state == "update_inprogress"
    active = outcome.status.active_attributes
    assert active is not None and active["ports"] == [
        {"number": 80, "label": "site", "protocol": "tcp"},   # only the client's change applied
        {"number": 443, "protocol": "tcp"},                   # untouched
        {"number": 8080, "protocol": "udp"},                  # new: today's default
    ]
    # an item the client changed keeps what it did not change, and loses what the client removed
    base = [{"number": 80, "label": "web", "protocol": "tcp", "opened": True}]
    attribute = ENTITY.attributes[1]
    assert merge(attribute, base, [{"number": 80, "label": "web"}], [{"number": 80, "protocol": "udp"}]) == [
        {"number": 80, "protocol": "udp", "opened": True}]
    kept = merge(attribute, base, [{"number": 80, "label": "web"}], [{"number": 80, "label": "web"}])
    assert kept[0] is base[0]


def test_an_update_may_not_change_a_key_nor_an_rw_attribute_of_a_kept_item() -> None:
    status = up_with()
    ctx = context(entity=ENTITY)
    renamed = [{"number": 22}, {"number": 81, "label": "web"}, {"number": 443}]
    with pytest.raises(Refused) as refused:
        advance(ctx, status, Update({**CLIENT, "ports": renamed}, status.version))
    assert (refused.value.code, refused.value.reason) == (422, "KeyChanged")
    assert str(refused.value) == (
        "spec.attributes.ports[1]: the key of an item cannot change (from number=80 to number=81): items are "
        "matched by key; remove the item in one update and add the new one in another")
    # removing an item, then adding the new one, is two updates the lifecycle takes
    removed = advance(ctx, status, Update({**CLIENT, "ports": [{"number": 22}, {"number": 443}]}, status.version))
    removed = advance(ctx, removed.status, ResourceOutcome(True))
    ports = [{"number": 22}, {"number": 443}, {"number": 81}]
    added = advance(ctx, removed.status, Update({**CLIENT, "ports": ports}, removed.status.version)).status
    assert added.active_attributes is not None
    assert [p["number"] for p in added.active_attributes["ports"]] == [22, 443, 81]
    # an rw attribute holding an embedded value never changes; a single item's key neither
    with pytest.raises(Refused) as refused:
        advance(ctx, status, Update({**CLIENT, "owner": {"user": "bob"}}, status.version))
    assert str(refused.value) == ("spec.attributes.owner: set at creation only (modifier rw); rw+ attributes may "
                                  "change")
    owner = ENTITY.attributes[2]
    assert update_problems(owner, {"user": "ann"}, {"user": "bob"}, "p") == [
        ("KeyChanged", "p: the key of an item cannot change (from user=ann to user=bob): items are matched by key; "
                       "remove the item in one update and add the new one in another")]
    # inside a kept item, rw attributes never change and rw+ ones do, at any depth
    rw = copy.deepcopy(SPEC)
    rw["attributes"][1]["embedded"]["attributes"][2]["modifier"] = "rw"
    rw["attributes"][1]["embedded"]["attributes"][4]["embedded"]["attributes"][0]["modifier"] = "rw"
    attribute = ServiceEntitySpec.model_validate(rw).attributes[1]
    assert update_problems(attribute, [{"number": 80, "label": "a", "limits": {"rate": 1}}],
                           [{"number": 80, "label": "b", "limits": {"rate": 2}}, {"number": 9, "label": "c"}],
                           "p") == [
        ("ImmutableAttribute", "p[0].label: set when the item is added only (modifier rw); rw+ attributes may change"),
        ("ImmutableAttribute", "p[0].limits.rate: set when the item is added only (modifier rw); rw+ attributes may "
                               "change"),
    ]
