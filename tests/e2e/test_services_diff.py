"""What would change, and diagnose (issue 31, items 4 and 8), end to end: an entity of the built-in `service`
lifecycle whose config switches off the auto transfer after an update's validation (auto_update_designed), so
that an update waits in update_acknowledged with its diff until a state request approves it; then a failing
update diagnosed with its failing task. Through `stead service`, the inventory API and kubectl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess, api_call
from tests.e2e.test_apps import apply, blueprint, get, stead
from tests.e2e.test_config_api import client_certificate
from tests.e2e.test_services import entity, greeter_spec, in_state, instance, merge


def cli(operator: OperatorProcess, namespace: str, *args: str) -> str:
    done = stead(operator, "service", *args, "-n", namespace)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli_json(operator: OperatorProcess, namespace: str, *args: str) -> Any:
    return json.loads(cli(operator, namespace, *args, "-o", "json"))


def test_app_service_diff_before_an_update_then_applied_and_a_failing_update_diagnosed(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    apply(kubectl, blueprint("greeter", namespace, greeter_spec()))
    apply(kubectl, entity("greeter", namespace, {"builtin": "service"}, config={"auto_update_designed": False}))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "40s", "blueprint/greeter",
            "serviceentity/greeter")
    apply(kubectl, instance("db-1", namespace, who="one"))
    up = in_state(kubectl, namespace, "db-1", "up")
    assert "diff" not in up  # created at once (auto_creating is on): nothing waited

    # an update waits after its validation: the diff says what approving it would do, before anything runs
    merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"who": "two"}, "currentVersion": up["version"]}})
    waiting = in_state(kubectl, namespace, "db-1", "update_acknowledged", version_above=up["version"])
    diff = cli_json(operator, namespace, "diff", "db-1")
    assert diff["status"] == "pending" and diff["version"] == waiting["version"]
    assert diff["requests"] == ["update_designed"] and diff["target"] == "update_inprogress"
    assert diff["action"] == "update" and diff["actionRun"] == "db-1-update-2"
    assert diff["attributes"] == [{"name": "who", "old": "one", "new": "two"}]
    assert diff["inputs"] == [{"variable": "who", "old": "one", "new": "two", "secret": False}]
    assert get(kubectl, "app", "db-1", namespace)["spec"]["inputs"]["who"] == "one"  # nothing ran
    assert kubectl("get", "actionrun", "db-1-update-2", "-n", namespace, check=False).returncode != 0
    shown = cli(operator, namespace, "diff", "db-1")
    assert f"stead service set-state db-1 update_designed -n {namespace}" in shown
    admin = client_certificate(operator.cluster, tmp_path, "diff-admin", ("system:masters",))
    status, answer = api_call(operator, admin, namespace, "GET", "/lsm/v1/service_inventory/greeter/db-1/diff")
    assert status == 200, answer
    assert answer["data"]["action_run"] == "db-1-update-2" and answer["data"]["requests"] == ["update_designed"]

    # approved: the update runs as the diff said, and the diff is marked applied
    cli(operator, namespace, "set-state", "db-1", "update_designed")
    after = in_state(kubectl, namespace, "db-1", "up", version_above=waiting["version"])
    assert after["activeAttributes"]["who"] == "two"
    assert after["diff"]["status"] == "applied" and after["diff"]["appliedVersion"] > waiting["version"]
    assert get(kubectl, "actionrun", "db-1-update-2", namespace)["status"]["state"] == "Succeeded"

    # a failing update (the update action refuses who=boom), approved, then diagnosed
    merge(kubectl, namespace, "db-1", {"spec": {"attributes": {"who": "boom"}, "currentVersion": after["version"]}})
    boom = in_state(kubectl, namespace, "db-1", "update_acknowledged", version_above=after["version"])
    assert cli_json(operator, namespace, "diff", "db-1")["actionRun"] == "db-1-update-3"
    cli(operator, namespace, "set-state", "db-1", "update_designed")
    failed = in_state(kubectl, namespace, "db-1", "update_failed", version_above=boom["version"])
    report = cli_json(operator, namespace, "diagnose", "db-1")
    assert report["state"] == "update_failed" and report["version"] == failed["version"]
    newest = report["findings"][0]
    assert (newest["kind"], newest["state"], newest["trigger"]) == ("realization", "update_failed", "resource_based")
    assert newest["run"] == "db-1-update-3" and str(newest["task"]).startswith("apply")
    assert newest["version"] == failed["version"]
    text = cli(operator, namespace, "diagnose", "db-1")
    assert "failing task: apply" in text and f"stead actionrun logs db-1-update-3 -n {namespace}" in text
