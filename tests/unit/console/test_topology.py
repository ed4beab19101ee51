"""An App's topology (operators.console.views.topology_app): what it shows comes from the App's snapshot, the
macro (implicit) edges are marked apart from the declared ones, and the layout puts every dependency to the
left of its dependent."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from operators.console.views.topology_app import app_topology, layers_of

ROOT = Path(__file__).resolve().parents[3]
SPEC: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "blueprint-three-tier.yaml").read_text())["spec"]


def launched(spec: dict[str, Any] = SPEC, replicas: int = 2) -> dict[str, Any]:
    return {"spec": {"blueprint": "three-tier"},
            "status": {"snapshot": {"name": "three-tier", "spec": spec},
                       "entities": {"deployments": [{"name": "db_tier",
                                                     "replicas": [{"index": i} for i in range(replicas)]}]}}}


def by_type(topo: dict[str, Any], kind: str) -> set[tuple[str, str]]:
    return {(e["from"], e["to"]) for e in topo["edges"] if e["type"] == kind}


def test_the_three_tier_app_shows_its_entities_and_both_kinds_of_service_edges() -> None:
    topo = app_topology(launched())
    assert topo["source"] == "snapshot" and topo["errors"] == []
    ids = {n["id"] for n in topo["nodes"]}
    assert {"Deployment/db_tier", "Substrate/db_host", "Package/db_pkg", "Service/DB", "Service/App",
            "Service/Web"} <= ids
    assert by_type(topo, "explicit") == {("Service/App", "Service/DB"), ("Service/Web", "Service/App")}
    assert by_type(topo, "implicit") == {("Service/App", "Service/DB"), ("Service/Web", "Service/App")}
    macro = [e for e in topo["edges"] if e["macro"]]
    assert {e["type"] for e in macro} == {"implicit"}
    assert any("reads db_url" in e["why"] for e in macro)
    assert next(n for n in topo["nodes"] if n["id"] == "Deployment/db_tier")["replicas"] == 2


def test_every_dependency_is_left_of_its_dependent_and_parallel_edges_bend_apart() -> None:
    topo = app_topology(launched())
    nodes = {n["id"]: n for n in topo["nodes"]}
    for edge in topo["edges"]:
        assert nodes[edge["to"]]["x"] < nodes[edge["from"]]["x"], edge
    pairs: dict[tuple[str, str], list[list[float]]] = {}
    for edge in topo["edges"]:
        pairs.setdefault((edge["from"], edge["to"]), []).append(edge["points"][1])
    controls = pairs[("Service/App", "Service/DB")]
    assert len(controls) == 2 and controls[0] != controls[1]
    boxes = {(n["x"], n["y"]) for n in topo["nodes"]}
    assert len(boxes) == len(topo["nodes"])  # no two boxes on one another
    assert all(n["x"] + topo["nodeWidth"] <= topo["width"] and n["y"] + topo["nodeHeight"] <= topo["height"]
               for n in topo["nodes"])


def test_an_edit_of_the_snapshot_changes_what_is_drawn_not_the_blueprint() -> None:
    """The snapshot is what the App runs: a blueprint edited since (given as well) does not count."""
    spec = copy.deepcopy(SPEC)
    for service in spec["services"]:
        service["dependsOn"] = []
    blueprint = {"metadata": {"name": "three-tier"}, "spec": SPEC, "status": {"dependencyList": []}}
    topo = app_topology(launched(spec), blueprint)
    assert by_type(topo, "explicit") == set()
    assert by_type(topo, "implicit") == {("Service/App", "Service/DB"), ("Service/Web", "Service/App")}


def test_an_app_not_launched_yet_shows_its_blueprints_list_and_without_it_says_so() -> None:
    entry = {"type": "explicit", "getterResourceKind": "Service", "getterResourceName": "App",
             "setterResourceKind": "Service", "setterResourceName": "DB", "source": "spec.services[1].dependsOn[0]"}
    blueprint = {"metadata": {"name": "three-tier"}, "spec": SPEC, "status": {"dependencyList": [entry]}}
    app = {"spec": {"blueprint": "three-tier"}, "status": {}}
    topo = app_topology(app, blueprint)
    assert topo["source"] == "blueprint" and by_type(topo, "explicit") == {("Service/App", "Service/DB")}
    missing = app_topology(app, None)
    assert missing["nodes"] == [] and "could not be read" in missing["errors"][0]


def test_a_snapshot_that_does_not_compile_says_why() -> None:
    spec = copy.deepcopy(SPEC)
    spec["services"][0]["dependsOn"] = ["Web"]  # DB -> Web -> App -> DB
    topo = app_topology(launched(spec))
    assert any("cycle" in e for e in topo["errors"])


def test_layers_of_a_graph_with_a_cycle_still_places_every_node() -> None:
    graph: nx.DiGraph = nx.DiGraph([("a", "b"), ("b", "a"), ("b", "c")])
    placed = [n for column in layers_of(graph) for n in column]
    assert sorted(placed, key=str) == ["a", "b", "c"]
    assert layers_of(nx.DiGraph([("x", "y"), ("y", "z"), ("x", "z")])) == [["x"], ["y"], ["z"]]
