"""The ServiceInstance page's shaping (operators/console/views/lifecycle_view.py, lifecycle_diagram.py): the
diagram's layout, the lit state and the path taken, the actions allowed now, the writes and the attribute diff.

Statuses come from the real engine (`advance`) walking an instance through the built-in `simple` lifecycle:
up, an update whose deployment fails, a rollback and up again, as the e2e test walks it in a browser."""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.console.views.lifecycle_diagram import diagram, edge_id, layers
from operators.console.views.lifecycle_view import (
    Invalid,
    allowed_actions,
    attribute_diff,
    busy,
    check_version,
    instance_page,
    offered,
    state_patch,
    update_patch,
)
from operators.lsm import BUILTINS, LifecycleSpec, ResourceOutcome, ServiceInstanceSpec, SetState, Update, advance
from operators.lsm.models import LogEntry, RefusedRequest, ServiceInstanceStatus
from tests.unit.lsm.support import CLIENT, ENTITY, at, context, create

SIMPLE = BUILTINS["simple"]


def walked() -> list[ServiceInstanceStatus]:
    """The statuses of one instance: up (v4), update_failed (v8), up again after a rollback (v10)."""
    ctx = context()
    up = advance(ctx, create(ctx).status, ResourceOutcome(success=True)).status
    updated = advance(ctx, up, Update({**CLIENT, "port": 6000}, current_version=4)).status
    failed = advance(ctx, updated, ResourceOutcome(success=False, message="boom")).status
    rolling = advance(ctx, failed, SetState("rollback", current_version=failed.version)).status
    again = advance(ctx, rolling, ResourceOutcome(success=True)).status
    return [up, failed, again]


def instance(status: ServiceInstanceStatus, generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "db-1", "namespace": "ns", "generation": generation},
            "spec": {"entity": "database", "attributes": dict(status.client_attributes or CLIENT), **spec},
            "status": status.model_dump(by_alias=True, mode="json", exclude_none=True)}


# --- the layout ----------------------------------------------------------------------------------


def test_layers_are_bfs_distances_from_the_initial_state_and_unreachable_states_come_last() -> None:
    found = layers(SIMPLE)
    assert found[0] == ["start"]
    assert sorted(found[1]) == ["acknowledged", "rejected"]
    assert "up" in found[3] and found[-1] == ["rollback"]
    orphan = LifecycleSpec.model_validate({
        "initialState": "a", "states": [{"name": "lost"}, {"name": "a"}, {"name": "b"}],
        "transfers": [{"source": "a", "target": "b", "auto": True}, {"source": "b", "target": "a", "onUpdate": True}]})
    assert layers(orphan) == [["a"], ["b"], ["lost"]]


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_no_two_states_overlap_and_the_view_box_holds_every_state_and_label(name: str) -> None:
    drawn = diagram(BUILTINS[name])
    x0, y0, width, height = drawn.box
    boxes = [(n.x - n.width / 2, n.y - n.height / 2, n.x + n.width / 2, n.y + n.height / 2) for n in drawn.nodes]
    for index, (left, top, right, bottom) in enumerate(boxes):
        assert x0 <= left and right <= x0 + width and y0 <= top and bottom <= y0 + height
        for other in boxes[index + 1:]:
            assert right <= other[0] or other[2] <= left or bottom <= other[1] or other[3] <= top
    for edge in drawn.edges:
        assert x0 <= edge.label_x <= x0 + width and y0 <= edge.label_y <= y0 + height
    assert {n.name for n in drawn.nodes} == {s.name for s in BUILTINS[name].states}


def test_edges_start_and_end_on_the_states_borders_and_a_transfer_to_itself_is_a_loop() -> None:
    drawn = diagram(SIMPLE)
    nodes = {n.name: n for n in drawn.nodes}
    edges = {e.id: e for e in drawn.edges}
    straight = edges[edge_id("acknowledged", "creating")]  # one layer down: a straight line
    numbers = [float(v) for v in straight.path.replace("M", "").replace("Q", "").split()]
    start, end = numbers[:2], numbers[-2:]
    assert start[1] == pytest.approx(nodes["acknowledged"].y + nodes["acknowledged"].height / 2, abs=0.1)
    assert end[1] == pytest.approx(nodes["creating"].y - nodes["creating"].height / 2, abs=0.1)
    assert straight.label == "auto [promote]" and not straight.error
    loop = edges[edge_id("up", "up")]
    assert " C " in loop.path and loop.label_x > nodes["up"].x + nodes["up"].width / 2
    assert loop.label == "App ok"
    failing = edges[edge_id("up", "failed")]
    assert failing.error and failing.label == "App failed"
    back = edges[edge_id("update_failed", "rollback")]
    assert back.label == "set-state [rollback]"


def test_two_transfers_between_the_same_states_are_one_edge_with_both_labels() -> None:
    drawn = diagram(BUILTINS["service"])
    edges = [e for e in drawn.edges if (e.source, e.target) == ("acknowledged", "designed")]
    assert len(edges) == 1
    assert edges[0].label == "auto, valid | set-state, valid" and len(edges[0].parts) == 2


def test_opposite_edges_bend_apart() -> None:
    drawn = diagram(SIMPLE)
    edges = {e.id: e for e in drawn.edges}
    there, back = edges[edge_id("start", "rejected")], edges[edge_id("rejected", "start")]
    assert (there.label_x, there.label_y) != (back.label_x, back.label_y)


# --- the lit state and the path taken --------------------------------------------------------------


def test_the_current_state_is_lit_and_the_path_carries_the_versions() -> None:
    _, failed, again = walked()
    drawn = diagram(SIMPLE, failed.state, failed.log)
    nodes = {n.name: n for n in drawn.nodes}
    assert [n.name for n in drawn.nodes if n.lit] == ["update_failed"]
    assert nodes["up"].versions == (4,) and nodes["update_failed"].versions == (8,)
    assert nodes["start"].versions == (1,) and nodes["rollback"].versions == ()
    edges = {e.id: e for e in drawn.edges}
    assert edges[edge_id("update_inprogress", "update_failed")].versions == (8,)
    assert [(s.source, s.target, s.version) for s in drawn.path][-2:] == [
        ("update_acknowledged", "update_inprogress", 7), ("update_inprogress", "update_failed", 8)]
    assert drawn.path[0].edge is None and drawn.path[-1].edge == edge_id("update_inprogress", "update_failed")
    assert drawn.path_complete

    final = diagram(SIMPLE, again.state, again.log)
    nodes = {n.name: n for n in final.nodes}
    assert [n.name for n in final.nodes if n.lit] == ["up"] and nodes["up"].versions == (4, 10)
    assert {e.id: e for e in final.edges}[edge_id("rollback", "up")].versions == (10,)


def test_a_log_that_lost_its_oldest_transfers_says_the_path_is_incomplete() -> None:
    *_, again = walked()
    assert not diagram(SIMPLE, again.state, again.log[3:]).path_complete
    gone = diagram(SIMPLE, "vanished", [LogEntry(from_="up", to="vanished", trigger="auto", version=9, time="t")])
    assert gone.notes and "vanished" in gone.notes[0] and gone.path[0].edge is None
    assert not any(n.lit for n in gone.nodes)


# --- the actions allowed now ------------------------------------------------------------------------


def kinds(status: ServiceInstanceStatus, **options: bool) -> list[tuple[str, str]]:
    return [(a.kind, a.target) for a in allowed_actions(SIMPLE, status, **options)]


def test_only_the_transfers_allowed_now_are_offered() -> None:
    up, failed, _ = walked()
    assert kinds(up) == [("update", "update_start"), ("delete", "deleting")]  # no state request leaves up
    assert kinds(failed) == [("set-state", "rollback"), ("delete", "deleting")]  # and no update
    assert kinds(at("update_rejected")) == [("update", "update_start"), ("set-state", "up")]
    assert kinds(at("creating")) == [("delete", "deleting")]
    assert kinds(at("terminated")) == [] and kinds(up, deleting=True) == []
    assert kinds(ServiceInstanceStatus()) == [("delete", "")]  # never taken in: it may always go
    fixed = ENTITY.model_copy(update={"attributes": [a for a in ENTITY.attributes if a.modifier != "rw+"]})
    assert [a.kind for a in allowed_actions(SIMPLE, up, entity=fixed)] == ["delete"]  # nothing an update may change
    assert [a.kind for a in allowed_actions(SIMPLE, up, entity=ENTITY)] == ["update", "delete"]
    tests = [a.test for a in allowed_actions(SIMPLE, failed)]
    assert tests == ["action-set-state-rollback", "action-delete"]


def test_nothing_is_offered_while_a_request_is_on_its_way() -> None:
    up, failed, _ = walked()
    request = {"target": "rollback", "currentVersion": failed.version}
    waiting = instance_page(instance(failed, stateRequest=request), SIMPLE, ENTITY)
    assert not waiting["actions"] and "rollback" in waiting["busy"]
    spec = ServiceInstanceSpec.model_validate({"entity": "database", "attributes": {**CLIENT, "port": 1}})
    assert busy(spec, up, 2) == "the update has not been taken in yet"
    refused = up.model_copy(update={"refused": RefusedRequest(trigger="on_update", reason="R", message="m",
                                                              generation=2, time="t")})
    assert busy(spec, refused, 2) is None  # refused: handled, the page shows why


def test_offered_refuses_an_action_the_state_does_not_allow_naming_what_is() -> None:
    up, failed, _ = walked()
    actions = allowed_actions(SIMPLE, up)
    assert offered(actions, "update").target == "update_start"
    with pytest.raises(Invalid) as refused:
        offered(actions, "set-state", "rollback")
    assert refused.value.status == 409 and "allowed now: update, delete" in refused.value.message
    assert offered(allowed_actions(SIMPLE, failed), "set-state", "rollback").operation == "rollback"


# --- the writes ---------------------------------------------------------------------------------------


def spec_of(**attributes: Any) -> ServiceInstanceSpec:
    return ServiceInstanceSpec.model_validate({"entity": "database", "attributes": {**CLIENT, **attributes}})


def test_an_update_reads_values_by_type_and_changes_rw_plus_attributes_only() -> None:
    patch = update_patch(ENTITY, spec_of(size=1.5), {"port": "6000", "tags": '["a", "b"]', "size": ""}, 4)
    assert patch == {"spec": {"attributes": {**CLIENT, "port": 6000, "tags": ["a", "b"], "size": None},
                              "currentVersion": 4}}  # null: a merge patch removes size
    for given, field in (({"region": "us"}, "attributes.region"), ({"port": "many"}, "attributes.port"),
                         ({"nope": "1"}, "attributes.nope"), ({}, "attributes")):
        with pytest.raises(Invalid) as refused:
            update_patch(ENTITY, spec_of(), given, 4)
        assert refused.value.status == 422 and refused.value.message.startswith(field), refused.value.message
    with pytest.raises(Invalid, match="nothing changed"):
        update_patch(ENTITY, spec_of(), {"port": "5432"}, 4)


def test_a_state_request_is_the_patch_stead_service_set_state_writes() -> None:
    assert state_patch("rollback", 8) == {"spec": {"stateRequest": {"target": "rollback", "currentVersion": 8}}}
    assert state_patch("up", 8, "why")["spec"]["stateRequest"]["message"] == "why"
    with pytest.raises(Invalid) as refused:
        state_patch("no such state", 8)
    assert refused.value.status == 422 and refused.value.message.startswith("target")


def test_a_stale_or_missing_version_is_refused() -> None:
    status = at("up", version=4)
    assert check_version(4, status, "db-1") == 4
    with pytest.raises(Invalid) as stale:
        check_version(3, status, "db-1")
    assert stale.value.status == 409 and "(3) doesn't match the actual current version (4)" in stale.value.message
    for bad in (None, "4", True, 0):
        with pytest.raises(Invalid) as missing:
            check_version(bad, status, "db-1")
        assert missing.value.status == 422


# --- the attribute sets ----------------------------------------------------------------------------------


def test_the_diff_compares_the_sets_key_by_key_into_dicts_with_values_as_text() -> None:
    diff = attribute_diff(
        {"port": 6000, "tags": ["a"], "limits": {"cpu": 2, "mem": "1G"}, "note": "<script>alert(1)</script>"},
        {"port": 5432, "tags": ["a"], "limits": {"cpu": 1, "mem": "1G"}, "old": True},
        None)
    rows = {r.key: r for r in diff.rows}
    assert list(rows) == ["limits.cpu", "limits.mem", "note", "old", "port", "tags"]
    port = rows["port"]
    assert (port.candidate, port.active, port.candidate_vs_active) == ("6000", "5432", "changed")
    assert rows["limits.mem"].candidate_vs_active == "same" and rows["limits.cpu"].candidate_vs_active == "changed"
    assert rows["note"].candidate_vs_active == "added" and rows["note"].candidate == "<script>alert(1)</script>"
    assert rows["old"].candidate_vs_active == "removed" and rows["old"].active == "true"
    assert rows["tags"].candidate == '["a"]' and rows["port"].rollback is None
    assert rows["port"].active_vs_rollback is None and diff.present == {"candidate": True, "active": True,
                                                                        "rollback": False}
    typed = attribute_diff({"n": "1"}, {"n": 1}, {"n": 1})
    assert typed.rows[0].candidate_vs_active == "changed" and typed.rows[0].active_vs_rollback == "same"


def test_the_page_is_json_with_the_rollback_offered_after_a_failed_update() -> None:
    _, failed, _ = walked()
    page = instance_page(instance(failed), SIMPLE, ENTITY)
    json.dumps(page)
    assert page["state"] == "update_failed" and page["version"] == 8
    assert [a["test"] for a in page["actions"]] == ["action-set-state-rollback", "action-delete"]
    assert not page["fields"]  # no update offered: no form
    rows = {r["key"]: r for r in page["diff"]["rows"]}
    assert rows["port"]["active"] == "6000" and rows["port"]["rollback"] == "5432"
    assert [n["name"] for n in page["diagram"]["nodes"] if n["lit"]] == ["update_failed"]
    up = instance_page(instance(walked()[0]), SIMPLE, ENTITY)
    assert [f["name"] for f in up["fields"]] == ["port", "size", "tags"] and up["fields"][0]["value"] == "5432"
    unknown = instance_page(instance(failed), None, ENTITY, "no Lifecycle")
    assert unknown["diagram"] is None and not unknown["actions"] and unknown["lifecycle_problem"] == "no Lifecycle"
