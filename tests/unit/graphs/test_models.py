"""The DeploymentGraph / GraphRun schemas and `check_graph`, the admission's own checks."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from operators.graphs import DeploymentGraphSpec, GraphRunSpec, GraphRunStatus, check_graph
from operators.runtime.kube import crds


def spec(*tasks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"environment": "env-1", "tasks": list(tasks), **fields}


def test_a_valid_graph_has_no_problems() -> None:
    assert check_graph(spec(
        {"id": "a", "type": "shell", "roles": ["controller"], "parameters": {"cmd": "true"}},
        {"id": "b", "type": "puppet", "requires": ["a"], "crossDepends": [{"name": "/^a$/", "role": ["self"]}],
         "condition": {"yaqlExp": "changed($.x)"}},
        {"id": "g", "type": "group", "roles": ["compute"], "tasks": ["a"], "faultTolerance": "20%"},
    )) == []


def test_duplicate_ids_name_both_places() -> None:
    problems = check_graph(spec({"id": "a", "type": "shell"}, {"id": "a", "type": "puppet"}))
    assert problems == ["spec.tasks[1] (a).id: duplicate task id 'a' (first at spec.tasks[0])"]


def test_unknown_task_type_is_a_schema_error_naming_the_field() -> None:
    problems = check_graph(spec({"id": "a", "type": "ansible"}))
    assert len(problems) == 1 and problems[0].startswith("spec.tasks[0].type: Input should be 'puppet'")


def test_malformed_regex_names_task_and_field() -> None:
    problems = check_graph(spec(
        {"id": "ok", "type": "shell"},
        {"id": "netconfig", "type": "shell", "crossDepends": [{"name": "/^(primary-$/"}],
         "roles": ["/[a-/"], "requires": ["/unclosed"]},
    ))
    assert any(p.startswith("spec.tasks[1] (netconfig).crossDepends[0].name: invalid regex '/^(primary-$/'")
               for p in problems), problems
    assert any(p.startswith("spec.tasks[1] (netconfig).roles[0]: invalid regex") for p in problems)
    assert any(p.startswith("spec.tasks[1] (netconfig).requires[0]: '/unclosed' looks like a /regex/")
               for p in problems)


def test_a_group_naming_an_unknown_task() -> None:
    problems = check_graph(spec({"id": "g", "type": "group", "roles": ["*"], "tasks": ["nope"]}))
    assert problems == ["spec.tasks[0] (g).tasks[0]: unknown task 'nope'"]


def test_group_fields_on_a_work_task() -> None:
    problems = check_graph(spec({"id": "a", "type": "shell", "tasks": ["b"]}, {"id": "b", "type": "shell"}))
    assert problems == ["spec.tasks[0] (a): tasks and faultTolerance are for type group only"]


def test_conditions_that_cannot_run_are_refused() -> None:
    problems = check_graph(spec(
        {"id": "a", "type": "shell", "condition": {"yaqlExp": "changed($.x"}},
        {"id": "b", "type": "shell", "condition": {"legacy": "settings:storage.ceph.value == true"}},
        {"id": "c", "type": "shell", "condition": {"legacy": "true"}},
    ))
    assert problems[0].startswith("spec.tasks[0] (a).condition: yaqlExp 'changed($.x': yaql does not parse")
    assert problems[1].startswith("spec.tasks[1] (b).condition: legacy condition")
    assert len(problems) == 2


def test_exactly_one_owner() -> None:
    with pytest.raises(ValidationError, match="exactly one of release, plugin or environment"):
        DeploymentGraphSpec.model_validate({"release": "r", "plugin": "p"})
    with pytest.raises(ValidationError, match="exactly one"):
        DeploymentGraphSpec.model_validate({})
    graph = DeploymentGraphSpec.model_validate({"plugin": "lma"})
    assert graph.owner == ("plugin", "lma") and graph.type == "default"


def test_graph_type_pattern_and_bounds() -> None:
    with pytest.raises(ValidationError):
        DeploymentGraphSpec.model_validate({"release": "r", "type": "has space"})
    with pytest.raises(ValidationError):
        GraphRunSpec.model_validate({"environment": "e", "graphs": []})
    with pytest.raises(ValidationError):
        GraphRunSpec.model_validate({"environment": "e", "graphs": [{"type": "x"}] * 17})
    run = GraphRunSpec.model_validate({"environment": "e", "graphs": [{}], "dryRun": True,
                                       "subgraphs": [{"start": ["a"], "end": ["/b/"]}]})
    assert run.graphs[0].type == "default" and run.dry_run


def test_the_models_make_structural_crd_schemas() -> None:
    graph = crds.structural(DeploymentGraphSpec)
    task = graph["properties"]["tasks"]["items"]
    assert task["properties"]["crossDepends"]["items"]["properties"]["policy"]["enum"] == ["all", "any"]
    assert task["properties"]["custom"]["x-kubernetes-preserve-unknown-fields"] is True
    assert task["properties"]["condition"]["x-kubernetes-validations"]
    assert graph["properties"]["tasks"]["maxItems"] == 5000
    assert "x-kubernetes-validations" in graph
    run = crds.structural(GraphRunSpec)
    assert run["properties"]["graphs"]["minItems"] == 1
    status = crds.structural(GraphRunStatus)
    output = status["properties"]["nodes"]["items"]["properties"]["tasks"]["items"]["properties"]["output"]
    assert output["maxLength"] == 2048


def test_what_a_tenant_writes_is_bounded() -> None:
    big = {"id": "a", "type": "shell", "condition": {"yaqlExp": "x" * 8193}}
    assert check_graph(spec(big))[0].startswith("spec.tasks[0].condition.yaqlExp: String should have at most 8192")
    assert check_graph(spec({"id": "a" * 121, "type": "shell"}))[0].startswith("spec.tasks[0].id: String should")
    assert check_graph(spec({"id": "a", "type": "shell", "requires": ["b"] * 201}))[0].startswith(
        "spec.tasks[0].requires: List should have at most 200")
    assert check_graph(spec({"id": "a:b", "type": "shell"}))[0].startswith("spec.tasks[0].id: String should match")
    assert check_graph(spec({"id": "a", "type": "group", "faultTolerance": "ten"}))[0].startswith(
        "spec.tasks[0].faultTolerance: String should match")


def test_a_cycle_among_the_graphs_own_tasks_is_refused_naming_them() -> None:
    problems = check_graph(spec(
        {"id": "a", "type": "shell", "roles": ["controller"], "requires": ["c", "release-task"]},
        {"id": "b", "type": "shell", "roles": ["compute"], "requires": ["/^a$/"]},
        {"id": "c", "type": "shell", "roles": ["*"], "crossDepends": [{"name": "b", "role": ["self"]}]},
    ))
    assert problems == ["spec.tasks: dependency cycle among tasks (each waits for the next on a node that runs "
                        "them, through requires, requiredFor or a cross dependency of role self): a -> c -> b -> a"]
    # requiredFor is the other direction of the same edge
    assert check_graph(spec({"id": "a", "type": "shell", "requiredFor": ["b"]},
                            {"id": "b", "type": "shell", "requiredFor": ["a"]}))[0].endswith("a -> b -> a")


def test_what_only_other_graphs_or_the_nodes_decide_is_not_refused_at_upload() -> None:
    assert check_graph(spec(
        {"id": "a", "type": "shell", "requires": ["in-the-release", "/^plugin-/"], "requiredFor": ["a"]},
        # a cross dependency of other roles waits on other nodes: a cycle only if some node has both
        {"id": "b", "type": "shell", "roles": ["compute"], "crossDepends": [{"name": "c", "role": ["controller"]}]},
        {"id": "c", "type": "shell", "roles": ["controller"], "crossDepends": [{"name": "b", "role": ["compute"]}]},
    )) == []


def test_regex_references_past_the_search_budget_are_left_to_the_run() -> None:
    """Admission and the merge run in the operator's event loop: a hostile number of /regex/ references costs
    a bounded number of searches (the run's expansion still finds what they hide)."""
    from operators.graphs import Task
    from operators.graphs.structure import graph_cycle

    tasks = [Task.model_validate({"id": "a", "type": "shell", "requires": ["/^b$/"]}),
             Task.model_validate({"id": "b", "type": "shell", "requires": ["a"]})]
    assert graph_cycle(tasks) is not None and graph_cycle(tasks, budget=1) is None
