"""The Environment kind: its model, its semantic checks and its summary."""

from __future__ import annotations

from operators.environment import KIND
from operators.environment.logic import spec_problems, summarize
from operators.environment.models import EnvironmentSpec
from operators.runtime.kube.crds import crd_for

GOOD = {
    "release": "mitaka-9.0",
    "hierarchyLevels": ["cluster", "role", "node"],
    "nodes": [
        {"name": "node-1", "fqdn": "node-1.domain.tld", "roles": ["controller", "mongo"]},
        {"name": "node-2", "roles": ["compute"]},
        {"name": "node-3", "roles": ["compute"]},
    ],
}


def test_a_good_spec_has_no_problems_and_summarizes() -> None:
    assert KIND.check_spec(GOOD) == []
    assert summarize(EnvironmentSpec.model_validate(GOOD)) == {
        "nodeCount": 3, "roles": {"compute": 2, "controller": 1, "mongo": 1},
    }


def test_the_schema_makes_node_names_and_levels_unique() -> None:
    """The API server enforces these itself: no webhook needed for the Environment."""
    spec = crd_for(KIND)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["nodes"]["x-kubernetes-list-type"] == "map"
    assert spec["nodes"]["x-kubernetes-list-map-keys"] == ["name"]
    assert spec["hierarchyLevels"]["x-kubernetes-list-type"] == "set"
    assert not KIND.validates


def test_duplicate_node_names_name_both_places() -> None:
    spec = {**GOOD, "nodes": [*GOOD["nodes"], {"name": "node-2", "roles": ["x"]}]}
    assert spec_problems(spec) == ['spec.nodes[3].name: duplicate node name "node-2" (first at spec.nodes[1])']


def test_duplicate_levels() -> None:
    spec = {**GOOD, "hierarchyLevels": ["cluster", "role", "cluster"]}
    assert spec_problems(spec) == [
        'spec.hierarchyLevels[2]: duplicate level "cluster" (first at spec.hierarchyLevels[0])'
    ]


def test_empty_levels_and_nodes_without_roles_name_the_field() -> None:
    assert KIND.check_spec({**GOOD, "hierarchyLevels": []})[0].startswith("spec.hierarchyLevels: ")
    assert KIND.check_spec({**GOOD, "hierarchyLevels": ["cluster", ""]})[0].startswith("spec.hierarchyLevels[1]: ")
    problems = KIND.check_spec({**GOOD, "nodes": [{"name": "n", "roles": []}]})
    assert problems[0].startswith("spec.nodes[0].roles: ")


def test_unknown_fields_are_refused() -> None:
    assert KIND.check_spec({**GOOD, "relase": "typo"})[0].startswith("spec.relase: ")


def test_default_hierarchy() -> None:
    assert EnvironmentSpec.model_validate({"release": "r"}).hierarchy_levels == ["role", "node"]
