"""The service inventory HTTP API end to end: the `simple` lifecycle walked through `/lsm/v1` on the operator's
configuration API server (TLS, a client certificate of the cluster's client CA as the admin), with the real API
server, admission webhook and operator behind it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess, api_call
from tests.e2e.test_config_api import client_certificate
from tests.e2e.test_services import catalog, in_state
from tests.polling import wait_until

INV = "/lsm/v1/service_inventory/greeter"


def call(operator: OperatorProcess, cert: tuple[Path, Path], namespace: str, method: str, path: str,
         body: Any = None, query: str = "") -> tuple[int, Any]:
    """`api_call`, the answer's `data` unwrapped from Inmanta's envelope (which every success has)."""
    status, answer = api_call(operator, cert, namespace, method, path, body, query)
    if status >= 400:
        return status, answer
    assert isinstance(answer, dict) and "data" in answer, answer  # Inmanta's envelope
    return status, answer["data"] if set(answer) == {"data"} else answer


def test_app_service_api_walks_the_simple_lifecycle(operator: OperatorProcess, kubectl: Kubectl, namespace: str,
                                                    tmp_path: Path) -> None:
    admin = client_certificate(operator.cluster, tmp_path, "inventory-admin", ("system:masters",))
    catalog(kubectl, namespace)

    # create -> up
    status, created = call(operator, admin, namespace, "POST", INV,
                           {"attributes": {"name": "db-1", "who": "one", "region": "eu"}})
    assert status == 201, created
    assert created["name"] == "db-1" and created["service_entity"] == "greeter"
    assert (created["version"], created["state"]) == (1, "start")  # as Inmanta answers a creation
    in_state(kubectl, namespace, "db-1", "up")
    status, listed = call(operator, admin, namespace, "GET", INV, query="filter.state=up&limit=5")
    assert status == 200 and [i["name"] for i in listed["data"]] == ["db-1"] and listed["metadata"]["total"] == 1
    status, up = call(operator, admin, namespace, "GET", f"{INV}/name=db-1")
    assert status == 200 and up["state"] == "up" and up["version"] == 4 and up["id"] == created["id"]
    assert up["active_attributes"]["who"] == "one" and up["service_identity_attribute_value"] == "db-1"

    # update -> up: the rollback set holds the old values
    status, body = call(operator, admin, namespace, "PATCH", f"{INV}/db-1",
                        {"current_version": 4, "attributes": {"who": "two"}})
    assert status == 200, body
    after = in_state(kubectl, namespace, "db-1", "up", version_above=4)
    status, up = call(operator, admin, namespace, "GET", f"{INV}/{created['id']}")
    assert up["version"] == after["version"] > 4 and up["active_attributes"]["who"] == "two"
    assert up["rollback_attributes"]["who"] == "one"

    # a stale current_version -> 409, nothing changes
    status, body = call(operator, admin, namespace, "PATCH", f"{INV}/db-1",
                        {"current_version": 4, "attributes": {"who": "three"}})
    assert status == 409 and body["message"] == (f"The given current version (4) doesn't match the actual current "
                                                 f"version ({up['version']}) of service instance db-1")
    # a state the lifecycle has no api_set_state transfer to -> 409, passed from the engine
    status, body = call(operator, admin, namespace, "POST", f"{INV}/db-1/state",
                        {"current_version": up["version"], "target_state": "rollback"})
    assert status == 409, body

    # an update rejected by validation, then set-state back to up (the seed's spelling of the path)
    status, body = call(operator, admin, namespace, "PATCH", f"{INV}/db-1",
                        {"current_version": up["version"], "attributes": {"who": "NOT-VALID"}})
    assert status == 200, body
    rejected = in_state(kubectl, namespace, "db-1", "update_rejected", version_above=up["version"])
    status, body = call(operator, admin, namespace, "POST", "/lsm/v1/services/greeter/db-1/state",
                        {"current_version": rejected["version"], "target_state": "up", "message": "keep two"})
    assert status == 200, body
    back = in_state(kubectl, namespace, "db-1", "up", version_above=rejected["version"])
    assert "candidateAttributes" not in back and back["activeAttributes"]["who"] == "two"

    # delete -> terminated: the object and its App go
    status, body = call(operator, admin, namespace, "DELETE", f"{INV}/name=db-1",
                        query=f"current_version={back['version']}")
    assert status == 200, body
    wait_until(lambda: kubectl("get", "si", "db-1", "-n", namespace, check=False).returncode != 0, 60,
               "the instance gone")
    assert kubectl("get", "app", "db-1", "-n", namespace, check=False).returncode != 0
    status, body = call(operator, admin, namespace, "GET", f"{INV}/db-1")
    assert status == 404 and body["notFound"] == "service_instance"
