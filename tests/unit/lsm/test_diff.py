"""What would change (issue 31, item 4): the engine followed on a copy, the diff assembled, then settled."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.calm.macros import SECRET_MASK
from operators.lsm import BUILTINS, Create, ServiceEntitySpec, ServiceInstanceStatus, SetState, Update, advance
from operators.lsm.diff import Path, assemble, follow, preview, settled, waits
from operators.lsm.machine import Context, Outcome, Trigger
from operators.lsm.models import LogEntry
from operators.runtime.kube.client import custom_path
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import NS, greeter_entity
from tests.unit.lsm.support import CLIENT, ENTITY_SPEC, NOW, at, context, failing
from tests.unit.lsm.test_inventory_api import INV, UP, Client
from tests.unit.lsm.test_inventory_api import instance as api_instance

SERVICE = BUILTINS["service"]
REALIZED = ServiceEntitySpec.model_validate({
    **ENTITY_SPEC, "lifecycle": {"builtin": "service"}, "config": {"auto_update_designed": False},
    "realization": {"blueprint": "db", "inputs": [{"variable": "port", "attribute": "port"},
                                                   {"variable": "region", "attribute": "region"},
                                                   {"variable": "password", "attribute": "size"}]}})
ACTIVE = {"name": "db-1", "region": "eu", "port": 5432, "tags": ["db"], "size": 1.5}
UID = "u-1"


def app(inputs: dict[str, str], update_action: bool = True, generation: int = 2) -> dict[str, Any]:
    actions = [{"name": "update", "tasks": []}] if update_action else []
    return {"metadata": {"name": "db-1", "generation": generation, "ownerReferences": [{"uid": UID}]},
            "spec": {"inputs": inputs},
            "status": {"snapshot": {"spec": {"actions": actions}}}}


def engine(ctx: Context) -> Any:
    async def run(status: ServiceInstanceStatus, trigger: Trigger) -> Outcome:
        return advance(ctx, status, trigger)
    return run


def waiting_update(ctx: Context, **changes: Any) -> ServiceInstanceStatus:
    """An instance of `service` up with ACTIVE, then updated: with auto_update_designed off it waits."""
    up = at("up", 4, lifecycle="service", active=ACTIVE, client={**CLIENT, "size": 1.5})
    return advance(ctx, up, Update({**CLIENT, "size": 1.5, **changes})).status


def live_inputs() -> dict[str, str]:
    return {"port": "5432", "region": "eu", "password": "1.5"}


def test_an_update_held_by_the_entitys_config_waits_and_its_diff_names_the_request_action_and_changes() -> None:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, port=6543)
    assert status.state == "update_acknowledged" and waits(SERVICE, status)
    path = asyncio.run(follow(engine(ctx), SERVICE, status))
    diff = assemble(REALIZED, SERVICE, status, path, app(live_inputs()), UID, "db-1", secret={"password"})
    assert diff.status == "pending" and diff.version == status.version and diff.state == "update_acknowledged"
    assert diff.requests == ["update_designed"] and diff.target == "update_inprogress"
    assert "update_designed -> update_inprogress (auto) [promote]" in diff.transfers
    assert diff.action == "update" and diff.action_run == "db-1-update-3" and diff.app == "db-1"
    assert [(c.name, c.old, c.new) for c in diff.attributes] == [("port", 5432, 6543)]
    assert [(i.variable, i.old, i.new) for i in diff.inputs] == [("port", "5432", "6543")]
    assert "update action runs" in diff.message and "port changes" in diff.message


def test_nothing_is_written_while_the_engine_is_followed() -> None:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, port=6543)
    before = status.model_dump()
    asyncio.run(follow(engine(ctx), SERVICE, status))
    assert status.model_dump() == before and status.state == "update_acknowledged"


def test_a_secret_inputs_values_are_masked_never_shown() -> None:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, size=2.5)
    path = asyncio.run(follow(engine(ctx), SERVICE, status))
    diff = assemble(REALIZED, SERVICE, status, path, app(live_inputs()), UID, "db-1", secret={"password"})
    dumped = diff.model_dump_json()
    assert "2.5" not in dumped and "1.5" not in dumped
    (change,) = diff.inputs
    assert (change.variable, change.old, change.new, change.secret) == ("password", SECRET_MASK, SECRET_MASK, True)
    (attribute,) = diff.attributes
    assert (attribute.name, attribute.old, attribute.new) == ("size", SECRET_MASK, SECRET_MASK)


def test_a_designed_creation_would_launch_the_app_with_every_input_new() -> None:
    ctx = context("service", config={"auto_creating": False}, entity=REALIZED)
    status = advance(ctx, ServiceInstanceStatus(), Create(CLIENT)).status
    assert status.state == "designed" and waits(SERVICE, status)
    path = asyncio.run(follow(engine(ctx), SERVICE, status))
    diff = assemble(REALIZED, SERVICE, status, path, None, UID, "db-1")
    assert diff.requests == ["creating"] and diff.action == "create" and diff.target == "creating"
    assert {i.variable: (i.old, i.new) for i in diff.inputs} == {"port": (None, "5432"), "region": (None, "eu")}
    assert {c.name for c in diff.attributes} == {"name", "region", "port", "tags"}


def test_an_app_of_another_owner_is_not_the_instances_so_the_diff_says_create() -> None:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, port=6543)
    path = asyncio.run(follow(engine(ctx), SERVICE, status))
    foreign = {**app(live_inputs()), "metadata": {"name": "db-1", "ownerReferences": [{"uid": "other"}]}}
    assert assemble(REALIZED, SERVICE, status, path, foreign, UID, "db-1").action == "create"


def test_without_an_update_action_the_app_only_takes_the_inputs() -> None:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, port=6543)
    path = asyncio.run(follow(engine(ctx), SERVICE, status))
    diff = assemble(REALIZED, SERVICE, status, path, app(live_inputs(), update_action=False), UID, "db-1")
    assert diff.action == "none" and diff.action_run is None and "no update action" in diff.message
    assert [i.variable for i in diff.inputs] == ["port"]


def test_a_rejected_candidate_says_why_and_that_nothing_runs() -> None:
    ctx = context("simple", check=failing("spec.attributes.port: too big"), entity=REALIZED)
    up = at("up", 4, active=ACTIVE, client={**CLIENT, "size": 1.5})
    status = advance(ctx, up, Update({**CLIENT, "size": 1.5, "port": 99999})).status
    assert status.state == "update_rejected" and waits(BUILTINS["simple"], status)
    path = asyncio.run(follow(engine(ctx), BUILTINS["simple"], status))
    assert path.requests == ()  # the only request from update_rejected clears the candidate: an abort
    diff = assemble(REALIZED, BUILTINS["simple"], status, path, app(live_inputs()), UID, "db-1")
    assert diff.action == "none" and "failed validation" in diff.message and "too big" in diff.message
    assert [(c.name, c.new) for c in diff.attributes] == [("port", 99999)]


def test_a_validation_that_would_fail_on_approval_is_said() -> None:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, port=6543)
    failing_ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED,
                          check=failing("spec.attributes.port: taken meanwhile"))
    path = asyncio.run(follow(engine(failing_ctx), SERVICE, status))
    assert path.failed is not None and not path.promoted
    diff = assemble(REALIZED, SERVICE, status, path, app(live_inputs()), UID, "db-1")
    assert diff.action == "none" and "approving it would fail" in diff.message and "taken meanwhile" in diff.message


def test_a_rollback_states_candidate_is_no_waiting_update() -> None:
    status = at("rollback", 9, lifecycle="service", candidate=ACTIVE, active=ACTIVE)
    assert not waits(SERVICE, status)


def entry(version: int, trigger: str, operation: str | None = None) -> LogEntry:
    return LogEntry.model_validate({"from": "a", "to": "b", "trigger": trigger, "version": version, "time": NOW,
                                    "operation": operation})


def pending(version: int = 6) -> Any:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, port=6543)
    path = Path((), (), status)
    return assemble(REALIZED, SERVICE, status, path, None, UID, "db-1").model_copy(update={"version": version})


def test_a_promote_since_marks_the_diff_applied_at_its_version() -> None:
    log = [entry(6, "auto"), entry(7, "api_set_state"), entry(8, "auto", "promote")]
    applied = settled(pending(), log)
    assert applied.status == "applied" and applied.applied_version == 8


def test_a_cleared_or_replaced_candidate_marks_it_discarded() -> None:
    assert settled(pending(), [entry(7, "api_set_state", "clear candidate")]).status == "discarded"
    replaced = [entry(7, "on_update"), entry(8, "auto"), entry(9, "auto", "promote")]
    assert settled(pending(), replaced).status == "discarded"


def test_preview_reads_the_app_only_while_a_candidate_waits_and_settles_the_diff_after() -> None:
    ctx = context("service", config={"auto_update_designed": False}, entity=REALIZED)
    status = waiting_update(ctx, port=6543)
    reads: list[str] = []

    async def live() -> dict[str, Any]:
        reads.append("app")
        return app(live_inputs())

    async def secret() -> set[str]:
        return set()

    diff = asyncio.run(preview(engine(ctx), REALIZED, SERVICE, status, live, secret, UID, "db-1"))
    assert diff is not None and diff.status == "pending" and reads == ["app"]
    approved = advance(ctx, status.model_copy(update={"diff": diff}), SetState("update_designed")).status
    assert approved.state == "update_inprogress" and approved.candidate_attributes is None
    after = asyncio.run(preview(engine(ctx), REALIZED, SERVICE, approved, live, secret, UID, "db-1"))
    assert after is not None and after.status == "applied" and after.applied_version == approved.version
    assert reads == ["app"]  # nothing waits: the App is not read again


# --- the inventory API's route ---------------------------------------------------------------------------------


def test_the_inventory_serves_the_diff_in_inmantas_spelling_to_a_caller_who_may_get_the_instance(
        kube: FakeApi) -> None:
    kube.add(custom_path("serviceentities", NS, "greeter"), {"spec": greeter_entity(realized=False)})
    client = Client(kube)
    stored = {"status": "pending", "version": 6, "state": "update_acknowledged", "requests": ["update_designed"],
              "action": "update", "actionRun": "db-1-update-3", "message": "...",
              "inputs": [{"variable": "who", "old": "one", "new": "two"}]}
    api_instance(kube, status={**UP, "version": 6, "state": "update_acknowledged", "diff": stored})
    api_instance(kube, "db-2")
    status, body = client.call("GET", f"{INV}/name=db-1/diff")
    assert status == 200 and body["action_run"] == "db-1-update-3" and body["requests"] == ["update_designed"]
    assert (body["name"], body["instance_version"], body["version"]) == ("db-1", 6, 6)
    assert client.call("GET", f"{INV}/db-2/diff") == (200, None)  # nothing ever waited
    assert client.call("GET", f"{INV}/db-1/diff", token="reader")[0] == 200
    assert ("get", "db-1") in {(a.verb, a.name) for a in client.auth.checked}
    assert client.call("GET", f"{INV}/db-1/diff", token="nobody")[0] == 401
    assert client.call("GET", f"{INV}/db-9/diff")[0] == 404
    document = client.call("GET", "/api/v1/config/openapi.json")[1]
    assert "/lsm/v1/service_inventory/{entity}/{id}/diff" in document["paths"]
