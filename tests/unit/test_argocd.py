"""The Argo CD customizations (charts/stead/argocd): current with their source, and right on real objects.

The testdata are objects the e2e test (tests/e2e/test_argocd_health.py) captured live; the tests here run
upstream Argo CD's test files (health_test.yaml, actions/action_test.yaml) over them with the harness
tests/argocd.py, which runs a script as Argo CD does (Lua 5.1, `obj`, `actionParams`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import argocd


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _health_cases() -> list[Any]:
    cases = []
    for test_file in sorted(argocd.TREE.glob("*/health_test.yaml")):
        for case in _load(test_file)["tests"]:
            kind = test_file.parent.name
            cases.append(pytest.param(test_file.parent / case["inputPath"], case["healthStatus"],
                                      id=f"{kind}/{Path(case['inputPath']).stem}"))
    return cases


def _captured() -> list[Any]:
    return [pytest.param(p, id=f"{p.parent.parent.name}/{p.stem}")
            for p in sorted(argocd.TREE.glob("*/testdata/*.yaml"))]


def test_the_generated_scripts_are_current_with_their_source() -> None:
    assert argocd.stale() == [], "run `make argocd`"


def test_a_source_block_is_kept_only_in_the_files_of_the_kinds_it_names() -> None:
    source = "a\n--@kinds App GraphRun\nb {{KIND}}\n--@end\nc\n--@kinds Environment\nd\n--@end\n"
    assert argocd.specialize(source, "App") == "a\nb App\nc\n"
    assert argocd.specialize(source, "Environment") == "a\nc\nd\n"
    with pytest.raises(ValueError, match="unbalanced"):
        argocd.specialize("--@kinds App\nx\n", "App")


def test_every_kind_has_a_health_check_tested_on_a_captured_object_and_its_actions_tests() -> None:
    for kind in argocd.kinds():
        tests = _load(argocd.TREE / kind / "health_test.yaml")["tests"]
        assert any(t["healthStatus"]["status"] == "Healthy" for t in tests), kind
        for name in argocd.ACTIONS.get(kind, ()):
            actions = _load(argocd.TREE / kind / "actions" / "action_test.yaml")
            assert any(t["action"] == name for t in actions["actionTests"]), (kind, name)
    statuses = {t["healthStatus"]["status"] for f in argocd.TREE.glob("*/health_test.yaml") for t in _load(f)["tests"]}
    assert statuses == {"Healthy", "Progressing", "Degraded", "Suspended"}


@pytest.mark.parametrize("input_path,expected", _health_cases())
def test_health_of_a_captured_object(input_path: Path, expected: dict[str, str]) -> None:
    shown = argocd.health(_load(input_path))
    assert {"status": shown.status, "message": shown.message} == expected


@pytest.mark.parametrize("input_path", _captured())
def test_a_generation_not_yet_observed_is_progressing_whatever_the_status_says(input_path: Path) -> None:
    """kstatus' rule, which Argo CD should share: a status describes the generation it observed, not a newer spec
    (a Ready object edited in git is not Healthy until Stead has looked at the edit)."""
    obj = _load(input_path)
    observed = obj["status"]["observedGeneration"]
    obj["metadata"]["generation"] = observed + 1
    shown = argocd.health(obj)
    assert shown == argocd.Health("Progressing", f"Waiting for Stead to observe generation {observed + 1} "
                                                 f"(status is of generation {observed})")


@pytest.mark.parametrize("input_path", _captured())
def test_an_object_without_status_is_progressing(input_path: Path) -> None:
    obj = _load(input_path)
    del obj["status"]
    assert argocd.health(obj) == argocd.Health("Progressing", f"Waiting for Stead to reconcile the {obj['kind']}")


def _action_cases() -> tuple[list[Any], list[Any]]:
    discovery, actions = [], []
    for test_file in sorted(argocd.TREE.glob("*/actions/action_test.yaml")):
        kind, here = test_file.parent.parent.name, test_file.parent
        tests = _load(test_file)
        for case in tests.get("discoveryTests") or ():
            discovery.append(pytest.param(here / case["inputPath"], case["result"],
                                          id=f"{kind}/{Path(case['inputPath']).stem}"))
        for case in tests.get("actionTests") or ():
            actions.append(pytest.param(here, case, id=f"{kind}/{case['action']}/{Path(case['inputPath']).stem}"))
    return discovery, actions


DISCOVERY_CASES, ACTION_CASES = _action_cases()


@pytest.mark.parametrize("input_path,expected", DISCOVERY_CASES)
def test_discovery_offers_each_action_only_where_stead_accepts_it(input_path: Path,
                                                                  expected: list[dict[str, Any]]) -> None:
    found = argocd.discover(_load(input_path))
    assert [{"name": name, **spec} for name, spec in sorted(found.items())] == expected


@pytest.mark.parametrize("here,case", ACTION_CASES)
def test_an_action_on_a_captured_object(here: Path, case: dict[str, Any]) -> None:
    obj = _load(here / case["inputPath"])
    impacted = argocd.run_action(copy.deepcopy(obj), case["action"], case.get("parameters"), clock="20260101000000")
    assert len(impacted) == 1
    assert impacted[0].resource == _load(here / case["expectedOutputPath"])
    if impacted[0].operation == "patch":  # Argo CD sends the merge patch from the live object: spec only
        assert set(argocd.merge_patch(obj, impacted[0].resource)) == {"spec"}
    else:
        assert impacted[0].operation == "create" and impacted[0].resource["metadata"]["namespace"] == \
            obj["metadata"]["namespace"]


def test_a_state_request_names_the_states_requestable_from_here() -> None:
    up = _load(argocd.TREE / "ServiceInstance" / "testdata" / "healthy.yaml")
    with pytest.raises(argocd.LuaFailure, match=r'^parameter target: no state request to gone from state up '
                       r'\(states requestable here: down\)$'):
        argocd.run_action(up, "request-state", {"target": "gone"})
    patched = argocd.run_action(up, "request-state", {"target": "down"})[0].resource
    assert patched["spec"]["stateRequest"] == {"target": "down", "currentVersion": up["status"]["version"]}


def test_running_an_app_action_needs_the_action_and_names_the_run_after_it() -> None:
    app = _load(argocd.TREE / "App" / "testdata" / "healthy.yaml")
    with pytest.raises(argocd.LuaFailure, match=r"^parameter action: the action to run"):
        argocd.run_action(app, "run-action", {"action": ""})
    run = argocd.run_action(app, "run-action", {"action": "Scale_Out"}, clock="20260101000000")[0].resource
    assert run["metadata"]["name"] == "demo-scale-out-20260101000000" and run["spec"]["action"] == "Scale_Out"


def test_an_environment_graph_executes_on_its_environment_without_asking() -> None:
    graph = _load(argocd.TREE / "DeploymentGraph" / "testdata" / "healthy.yaml")
    del graph["spec"]["release"]
    graph["spec"]["environment"] = "prod"
    assert "params" not in argocd.discover(graph)["execute"]
    run = argocd.run_action(graph, "execute", clock="20260101000000")[0].resource
    assert run["spec"] == {"environment": "prod", "graphs": [{"type": "argocd"}]}
