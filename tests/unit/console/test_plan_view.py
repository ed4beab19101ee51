"""A graph type's dry plan in the console (operators.console.views.plan_shape): the operator's planner's document
for the chosen nodes, drawn in lanes with the dependencies on nodes outside the choice marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.console.views import plan_shape as view
from operators.environment.models import EnvironmentSpec
from operators.graphs.kept import SourceGraph
from operators.graphs.models import DeploymentGraphSpec
from operators.graphs.planner import make_plan_document

DOCS = [d for d in yaml.safe_load_all((Path(__file__).resolve().parents[3] / "examples" / "graph-environment.yaml")
                                      .read_text()) if d]
ENV = EnvironmentSpec.model_validate(DOCS[0]["spec"])
GRAPHS = [SourceGraph(d["metadata"]["name"], 1, DeploymentGraphSpec.model_validate(d["spec"]))
          for d in DOCS if d["kind"] == "DeploymentGraph"]


def planned(nodes: list[str] | None, extra: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    """The view of the example's plan over `nodes`, the environment's graph given the `extra` tasks."""
    own = dict(DOCS[2]["spec"], tasks=[*DOCS[2]["spec"]["tasks"], *extra])
    graphs = [GRAPHS[0], SourceGraph("graphs-demo-default", 1, DeploymentGraphSpec.model_validate(own))]
    payload = view.plan_payload("default", "graphs-demo", ENV, 1, graphs, view.node_data(ENV, {}), nodes)
    document, _ = make_plan_document(payload)
    return view.plan_view(document, nodes or [n.name for n in ENV.nodes])


def test_a_plan_over_node_2_marks_its_cross_dependency_on_node_1_as_outside() -> None:
    shown = planned(["node-2"])
    boxes = {b["id"]: b for b in shown["boxes"]}
    assert boxes["default:compute-service:node-2"]["state"] == "planned"
    ghost = boxes["outside:database@node-1"]
    assert ghost["outside"] and ghost["node"] == "node-1" and ghost["state"] == "outside"
    outside = [(e["from"], e["to"]) for e in shown["edges"] if e["outside"]]
    assert ("default:compute-service:node-2", "outside:database@node-1") in outside
    assert all(e["rule"] == "satisfied-outside-subset" for e in shown["edges"] if e["outside"])
    assert shown["summary"]["outsideSubset"] == len(shown["outsideEdges"]) == 3
    lanes = {lane["node"]: lane["outside"] for lane in shown["lanes"]}
    assert lanes == {"(anchors)": False, "node-2": False, "node-1": True, "node-3": True}
    for edge in shown["edges"]:  # what a step waits for is left of it
        assert boxes[edge["to"]]["x"] < boxes[edge["from"]]["x"], edge
    assert len({(b["x"], b["y"]) for b in shown["boxes"]}) == len(shown["boxes"])


def test_a_plan_over_every_node_has_no_outside_edge_and_shows_a_false_condition() -> None:
    never = {"id": "never", "type": "shell", "roles": ["compute"], "requires": ["deploy_start"],
             "condition": {"yaqlExp": "$.node.name = 'nobody'"}, "parameters": {"cmd": "true"}}
    shown = planned(None, (never,))
    assert shown["outsideEdges"] == [] and not any(b["outside"] for b in shown["boxes"])
    states = {(b["task"], b["node"]): (b["state"], b["reason"]) for b in shown["boxes"]}
    assert states[("never", "node-2")] == ("skipped", "condition false")
    assert states[("database", "node-1")] == ("planned", None)


def test_a_plan_too_large_to_draw_keeps_its_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view, "MAX_DRAWN", 3)
    shown = planned(["node-2"])
    assert not shown["drawn"] and shown["boxes"] == [] and shown["summary"]["planned"] == 1


def test_the_environments_offered_are_those_whose_merge_takes_the_graph() -> None:
    other = {"metadata": {"name": "elsewhere"}, "spec": {"release": "newton-10.0", "nodes": []}}
    assert [e["name"] for e in view.environments_taking(DOCS[1], [DOCS[0], other])] == ["graphs-demo"]
    own = view.environments_taking(DOCS[2], [DOCS[0], other])
    assert own == [{"name": "graphs-demo", "nodes": [{"name": "node-1", "roles": ["controller"]},
                                                      {"name": "node-2", "roles": ["compute"]},
                                                      {"name": "node-3", "roles": ["compute"]}]}]
