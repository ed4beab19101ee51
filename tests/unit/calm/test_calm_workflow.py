"""Compiled actions to workflows (pure), the run-time render hook, and the run log tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.calm import workflow as wf
from operators.calm.compiler import compile_blueprint
from operators.calm.models import BlueprintSpec
from operators.calm.runhooks import hooks, render
from pipelines.control import read_status, run_paths
from pipelines.hooks import Hooks, SealedSecrets, new_run_key, seal
from pipelines.model import Workflow
from pipelines.runner import run_workflow

ROOT = Path(__file__).resolve().parents[3]


def three_tier() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "blueprint-three-tier.yaml").read_text())["spec"]
    return data


def build(spec_data: dict[str, Any], action: str, **app: Any) -> tuple[wf.Built, wf.Layout]:
    spec = BlueprintSpec.model_validate(spec_data)
    actions = compile_blueprint(spec).actions
    place = wf.layout(spec)
    info = wf.AppInfo(name="shop", uid="u-1", project="p", blueprint_name="bp", blueprint_uid="b-1", **app)
    chosen = next(a for a in actions if a.name == action)
    return wf.build_workflow(spec_data, actions, chosen, info, place), place


def test_create_becomes_a_dag_per_replica_with_groups_and_kept_macros() -> None:
    built, place = build(three_tier(), "create", inputs={"app_port": "9090"})
    steps = {s["id"]: s for s in built.data["steps"]}
    assert place.replicas["app_tier"] == ("app_tier-0", "app_tier-1")
    assert steps["App.configure"]["target"] == ["app_tier-0", "app_tier-1"]
    assert steps["DB"]["type"] == "noop" and "DB.publish" in steps["DB"]["dependsOn"]
    assert "DB" in steps["App.configure"]["dependsOn"]  # the explicit/implicit dependency, via the group
    script = steps["App.configure"]["parameters"]["script"]
    assert "@@{Service_DB_db_url}@@" in script and "PORT=9090" in script  # kept for run time / resolved now
    assert set(built.secrets) == {"db_cred.secret"}
    assert "@@{db_cred.secret}@@" in steps["DB.init"]["parameters"]["script"]
    assert built.scripts_on_runner == ("app_host", "db_host", "web_host")
    Workflow.model_validate({**built.data, "secrets": {"db_cred.secret": "sealed::x"}})


def test_an_attribute_without_a_value_and_no_setter_is_a_clear_error() -> None:
    with pytest.raises(wf.WorkflowError, match=r"task report .*db_url. of Service DB has no value before the run"):
        build(three_tier(), "scale-report")  # DB.db_url is set only by create: not known before it ran
    built, _ = build(three_tier(), "scale-report", properties={"DB": {"db_url": "postgres://x"}})
    assert "database: postgres://x" in built.data["steps"][0]["parameters"]["script"]


def test_render_hook_reads_replica_properties_secrets_and_builtins() -> None:
    layout = '{"prefixes":{"Service_App_":"app_tier"},"replicas":{"app_tier":["app_tier-0","app_tier-1"]}}'
    variables = {"calm.layout": layout, "app_tier-0:url": "a", "app_tier-1:url": "b", "calm_array_index": "1",
                 "calm_target": "app_tier-1", "db_cred.secret": "pw", "greeting": "hi"}
    assert render("@@{Service_App_url}@@", variables) == "b"  # its own replica's value
    assert render("@@{Service_App_url}@@", {**variables, "calm_target": "web-0"}) == "a,b"
    assert render("@@{calm_int(calm_array_index) + 1}@@", variables) == "2"
    assert render("x=@@{db_cred.secret}@@ @@{Application.greeting}@@", variables) == "x=pw hi"
    assert hooks.render is render


APP_DIR = "/tmp/three-tier-@@{calm_application_uuid}@@"  # where the example writes, per app


def test_a_run_of_create_sets_entity_properties_and_masks_the_secret(tmp_path: Path) -> None:
    spec = three_tier()
    for service in spec["services"]:
        for action in service["actions"]:
            for task in action["tasks"]:
                task["script"] = task["script"].replace(APP_DIR, str(tmp_path / "tt"))
    spec["packages"][0]["install"]["tasks"][0]["script"] = f"mkdir -p {tmp_path}/tt/db"
    built, place = build(spec, "create")
    key = new_run_key()
    workflow = Workflow.model_validate({**built.data, "secrets": {"db_cred.secret": seal("s3cr3t-pw", key,
                                                                                          "db_cred.secret")}})
    outcome = run_workflow(workflow, "r1", tmp_path / "state", hooks=Hooks(render=render, secret=SealedSecrets(key)))
    assert outcome.phase == "Succeeded"
    status = read_status(run_paths(tmp_path / "state", "r1"))
    assert status is not None
    per_replica, application = wf.entity_properties(status, built.steps, place)
    assert per_replica["db_tier-0"] == {"Service_DB_db_url": "postgres://shop@127.0.0.1:5432/shop"}
    assert wf.properties_by_entity(per_replica, application, place)["App"]["app_url"].count("http://") == 2
    tree = wf.run_log(status, built.data["steps"])
    assert [t["task"] for t in tree][:2] == ["db_pkg", "db_pkg/install"] and all(t["state"] == "success" for t in tree)
    assert "s3cr3t-pw" not in str(status) and wf.first_failure(tree) is None
