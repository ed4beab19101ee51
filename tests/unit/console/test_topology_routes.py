"""The topology part's routes (operators.console.views.topology), over an in-memory API server read as the
user: a dry plan made by the operator's planner process with an outside-subset edge, a version diff read
through the configuration API, an App's topology, and the user's 403 passed on as such."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.console.views import topology as routes
from operators.console.web import ConsoleCall, ConsoleError
from operators.runtime import ApiError, custom_path
from tests.unit.fakeapi import FakeApi, Request

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PLURALS = {"Environment": "environments", "DeploymentGraph": "deploymentgraphs", "GraphRun": "graphruns",
           "ConfigComponent": "configcomponents", "ConfigValues": "configvalues", "Blueprint": "blueprints",
           "App": "apps"}


def seeded(*files: str) -> FakeApi:
    api = FakeApi()
    for name in files:
        for doc in yaml.safe_load_all((EXAMPLES / name).read_text()):
            if doc and doc["kind"] in PLURALS:
                api.add(custom_path(PLURALS[doc["kind"]], "ns", doc["metadata"]["name"]), doc)
    return api


def call(kube: Any, name: str, stead: Any = None, **query: str) -> ConsoleCall:
    return ConsoleCall(kube=kube, stead=stead, user="alice", params={"namespace": "ns", "name": name},
                       query=query, body=None)


def test_a_dry_plan_over_one_node_is_made_by_the_planner_with_its_outside_edge() -> None:
    api = seeded("graph-environment.yaml")
    choices = asyncio.run(routes.plan_choices(call(api, "mitaka-default")))
    assert choices["type"] == "default" and [e["name"] for e in choices["environments"]] == ["graphs-demo"]
    view = asyncio.run(routes.dry_plan(call(api, "mitaka-default", environment="graphs-demo", nodes="node-2")))
    assert view["summary"]["planned"] == 1 and view["lastRun"] is None
    assert {(e["dependent"], e["dependency"]) for e in view["outsideEdges"]} >= {
        ("compute-service@node-2", "database@node-1")}
    assert any(e["outside"] and e["to"] == "outside:database@node-1" for e in view["edges"])
    assert not [m for m, p in api.calls if m != "GET"]  # nothing created: no GraphRun, no write


def test_a_dry_plan_whose_condition_fails_answers_422_naming_the_task() -> None:
    api = seeded("graph-environment.yaml")
    path = custom_path("deploymentgraphs", "ns", "graphs-demo-default")
    graph = api.objects[path]
    graph["spec"]["tasks"][0]["condition"] = {"yaqlExp": "$.nope.missing > 1"}
    with pytest.raises(ConsoleError) as refused:
        asyncio.run(routes.dry_plan(call(api, "mitaka-default", environment="graphs-demo", nodes="node-2")))
    assert refused.value.status == 422 and "compute-service" in refused.value.message


class Stead:
    """The configuration API as the console reaches it: the versions of the root's astute values."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        self.seen.append((path, dict(params or {})))
        version = (params or {}).get("version")
        data = {"1": {"nova": {"workers": 4}, "debug": False}, "2": {"nova": {"workers": 6}, "debug": False}}
        if version in data:
            return data[version]
        raise ApiError(404, f"version {version} of the values not found")


def test_a_version_diff_reads_both_versions_through_the_api_and_answers_text() -> None:
    api = seeded("config-environment.yaml", "config-component.yaml", "config-values.yaml")
    stead = Stead()
    diff = asyncio.run(routes.diff(call(api, "env-1", stead, resource="astute", level="(root)", kind="values",
                                        **{"from": "1", "to": "2"})))
    assert diff["text"].splitlines()[1:] == ["~ nova.workers: 4 -> 6"]
    assert {(p, q.get("version")) for p, q in stead.seen} == {
        ("/api/v1/config/environments/env-1/resources/astute/values", "1"),
        ("/api/v1/config/environments/env-1/resources/astute/values", "2")}
    assert all(q["namespace"] == "ns" for _, q in stead.seen)
    with pytest.raises(ConsoleError) as refused:
        asyncio.run(routes.diff(call(api, "env-1", None, resource="astute", kind="values", **{"from": "1", "to": "2"})))
    assert refused.value.status == 503


def test_the_environment_view_passes_the_users_403_on() -> None:
    api = seeded("config-environment.yaml", "config-component.yaml", "config-values.yaml")
    view = asyncio.run(routes.environment(call(api, "env-1")))
    assert view["points"][0]["level"] == "(root)"
    api.fail_with(ApiError(403, 'configvalues.stead.dev is forbidden: User "alice" cannot list'), "GET",
                  "/configvalues")
    with pytest.raises(ConsoleError) as refused:
        asyncio.run(routes.environment(call(api, "env-1")))
    assert refused.value.status == 403


def test_an_app_not_launched_yet_is_drawn_from_its_blueprint_and_a_hidden_blueprint_draws_nothing() -> None:
    api = FakeApi()
    entry = {"type": "implicit", "getterResourceKind": "Service", "getterResourceName": "App",
             "setterResourceKind": "Service", "setterResourceName": "DB", "setterResourceAttr": "db_url"}
    spec = yaml.safe_load((EXAMPLES / "blueprint-three-tier.yaml").read_text())["spec"]
    api.add(custom_path("blueprints", "ns", "three-tier"), {"spec": spec, "status": {"dependencyList": [entry]}})
    api.add(custom_path("apps", "ns", "shop"), {"spec": {"blueprint": "three-tier"}})
    topo = asyncio.run(routes.app(call(api, "shop")))
    assert topo["source"] == "blueprint" and [e["type"] for e in topo["edges"]] == ["implicit"]

    def forbidden(_: Request) -> dict[str, Any]:
        raise ApiError(403, "blueprints.stead.dev is forbidden")

    api.answer("/blueprints/three-tier", forbidden)
    assert asyncio.run(routes.app(call(api, "shop")))["nodes"] == []
