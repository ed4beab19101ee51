"""The deployment graphs HTTP API (`operators.graphs.api`) on the configuration API's routing, over the shared fake
API server: Fuel's paths and bodies translated to DeploymentGraph and GraphRun objects, fuel-library's published
tasks in and out unchanged, 404s that say what exists, execution's 400 and 409, and authorization per verb."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
import yaml

from operators.config.api import ConfigApi
from operators.config.repository import ConfigRepository
from operators.environment.models import ENVIRONMENT
from operators.graphs import DEPLOYMENT_GRAPH, GRAPH_RUN, GraphRunSpec, load_file, task_to_fuel
from operators.graphs.api import GraphsApi
from operators.runtime.api.auth import Access
from operators.runtime.kube.client import ApiError, custom_path
from operators.runtime.serving.http import Request
from tests.unit.fakeapi import FakeApi, FakeAuth
from tests.unit.graphs.support import FUEL_LIBRARY

NS = "ns"
GRAPHS = custom_path(DEPLOYMENT_GRAPH.plural, NS)
RUNS = custom_path(GRAPH_RUN.plural, NS)
API = "/api/v1"

STAGES = [{"id": "deploy_start", "type": "stage"}, {"id": "deploy_end", "type": "stage", "requires": ["deploy_start"]}]
NETCONFIG = {"id": "netconfig", "type": "puppet", "version": "2.1.0", "roles": "*", "requires": ["deploy_start"],
             "required_for": ["deploy_end"], "parameters": {"puppet_manifest": "/etc/puppet/netconfig.pp"}}
PLUGIN = {"id": "lma", "type": "shell", "role": ["controller"], "requires": ["netconfig"],
          "parameters": {"cmd": "true"}}
OVERRIDE = {"id": "netconfig", "type": "shell", "roles": ["*"], "parameters": {"cmd": "echo env"},
            "cross-depends": [{"name": "netconfig", "role": "self"}], "custom_key": "kept"}


class Client:
    def __init__(self, kube: FakeApi) -> None:
        self.kube = kube
        self.auth = FakeAuth()
        repository = cast(ConfigRepository, None)  # the graphs' routes never touch the configuration store
        self.api = ConfigApi(repository, self.auth, NS, [GraphsApi(kube, self.auth, NS)])

    def call(self, method: str, path: str, body: Any = None, query: str = "", token: str = "good") -> tuple[int, Any]:
        headers = {"authorization": f"Bearer {token}"}
        data = b"" if body is None else json.dumps(body).encode()
        response = asyncio.run(self.api(Request(method, path, query, headers, data)))
        if response.content_type != "application/json":
            return response.status, response.body.decode()
        return response.status, json.loads(response.body) if response.body else None


@pytest.fixture
def client(kube: FakeApi) -> Client:
    kube.add(custom_path(ENVIRONMENT.plural, NS, "env-1"), {
        "apiVersion": "stead.dev/v1alpha1", "kind": "Environment",
        "spec": {"release": "r1", "plugins": ["lma"],
                 "nodes": [{"name": "node-1", "roles": ["controller"]}, {"name": "node-2", "roles": ["compute"]}]}})
    return Client(kube)


def stored(kube: FakeApi) -> dict[str, dict[str, Any]]:
    return {p.rsplit("/", 1)[1]: o for p, o in kube.objects.items() if p.startswith(GRAPHS + "/")}


# --- graphs by owner and type ------------------------------------------------------------------------------


def test_fuel_librarys_tasks_put_on_a_release_come_back_as_published(client: Client) -> None:
    raw = yaml.safe_load(FUEL_LIBRARY.read_text())
    status, body = client.call("PUT", f"{API}/releases/r1/deployment_graphs/default/", {"tasks": raw,
                                                                                          "name": "Network"})
    assert status == 201, body
    assert (body["id"], body["name"], body["type"]) == ("release-r1-default", "Network", "default")
    assert body["relations"] == [{"model": "release", "model_id": "r1", "type": "default"}]
    assert body["tasks"] == [task_to_fuel(t) for t in load_file(FUEL_LIBRARY)]
    obj = stored(client.kube)["release-r1-default"]
    assert obj["spec"]["release"] == "r1" and len(obj["spec"]["tasks"]) == 21
    status, again = client.call("GET", f"{API}/releases/r1/deployment_graphs/default")
    assert status == 200 and again["tasks"] == body["tasks"]
    status, replaced = client.call("PUT", f"{API}/releases/r1/deployment_graphs/default/", {"tasks": STAGES})
    assert status == 200 and [t["id"] for t in replaced["tasks"]] == ["deploy_start", "deploy_end"]
    assert replaced["name"] is None  # PUT replaces: no name given, none kept
    assert list(stored(client.kube)) == ["release-r1-default"]


def test_patch_changes_what_it_names_and_needs_a_graph(client: Client) -> None:
    status, body = client.call("PATCH", f"{API}/plugins/lma/deployment_graphs/default/", {"name": "x"})
    assert status == 404 and body["notFound"] == "graph"
    assert "plugin lma has no 'default' graph" in body["message"] and "PUT creates one" in body["message"]
    assert client.call("PUT", f"{API}/plugins/lma/deployment_graphs/default/", {"tasks": [PLUGIN]})[0] == 201
    status, body = client.call("PATCH", f"{API}/plugins/lma/deployment_graphs/default/", {"name": "LMA"})
    assert status == 200 and body["name"] == "LMA" and [t["id"] for t in body["tasks"]] == ["lma"]


def test_a_missing_graph_or_cluster_is_404_saying_what_exists(client: Client) -> None:
    client.call("PUT", f"{API}/clusters/env-1/deployment_graphs/fix/", {"tasks": [OVERRIDE]})
    status, body = client.call("GET", f"{API}/clusters/env-1/deployment_graphs/default/")
    assert status == 404 and body["notFound"] == "graph"
    assert body["message"] == 'cluster env-1 has no \'default\' graph in namespace "ns" (its graph types: fix)'
    status, body = client.call("PUT", f"{API}/clusters/nope/deployment_graphs/default/", {"tasks": []})
    assert status == 404 and body["notFound"] == "cluster"
    assert body["message"] == 'environment (cluster) "nope" not found in namespace "ns" (environments here: env-1)'
    status, body = client.call("GET", f"{API}/graphs/nope/")
    assert status == 404 and body["message"] == ('deployment graph "nope" not found in namespace "ns" (graphs here: '
                                                 "environment-env-1-fix)")
    assert client.call("GET", f"{API}/clusters/env-1/deployment_graphs/bad%20type/")[0] in (400, 404)


def test_tasks_fuel_would_not_take_are_400_naming_the_task_and_field(client: Client) -> None:
    path = f"{API}/releases/r1/deployment_graphs/default/"
    status, body = client.call("PUT", path, {"tasks": [NETCONFIG, NETCONFIG]})
    assert status == 400 and "duplicate task id 'netconfig'" in body["message"]
    status, body = client.call("PUT", path, {"tasks": [{"id": "x", "type": "teleport"}]})
    assert status == 400 and body["message"].startswith("body.tasks[0] (x).type:")
    status, body = client.call("PUT", path, {"tasks": [{**PLUGIN, "cross-depends": {"yaql_exp": "x"}}]})
    assert status == 400 and "cross-depends: the {yaql_exp: ...} form is not supported" in body["message"]
    assert client.call("PUT", path, {"name": "no tasks"})[0] == 400
    assert client.call("PUT", path, [1])[0] == 400
    assert stored(client.kube) == {}


# --- /graphs -------------------------------------------------------------------------------------------------


def test_graphs_are_created_listed_read_changed_and_deleted_by_name(client: Client) -> None:
    status, body = client.call("POST", f"{API}/graphs/", {"type": "upgrade", "name": "Upgrade",
                                                         "relations": [{"model": "cluster", "model_id": "env-1"}],
                                                         "tasks": [OVERRIDE]})
    assert status == 201 and body["id"] == "environment-env-1-upgrade"
    obj = stored(client.kube)["environment-env-1-upgrade"]
    assert obj["spec"]["environment"] == "env-1" and obj["spec"]["tasks"][0]["custom"] == {"custom_key": "kept"}
    status, body = client.call("POST", f"{API}/graphs", {"type": "upgrade", "cluster": "env-1", "tasks": []})
    assert status == 409 and "environment-env-1-upgrade is the 'upgrade' graph of cluster env-1" in body["message"]
    status, body = client.call("POST", f"{API}/graphs/", {"cluster": "nope", "tasks": []})
    assert status == 404 and body["notFound"] == "cluster"
    status, body = client.call("POST", f"{API}/graphs/", {"release": "r1", "plugin": "lma", "tasks": []})
    assert status == 400 and "exactly one of a release, a plugin or a cluster" in body["message"]

    status, listed = client.call("GET", f"{API}/graphs/")
    assert status == 200 and [g["id"] for g in listed] == ["environment-env-1-upgrade"]
    assert listed[0]["tasks"][0]["custom_key"] == "kept" and listed[0]["tasks"][0]["cross-depends"] == [
        {"name": "netconfig", "role": "self"}]
    status, body = client.call("PATCH", f"{API}/graphs/environment-env-1-upgrade/", {"name": "Renamed"})
    assert status == 200 and body["name"] == "Renamed" and len(body["tasks"]) == 1
    status, body = client.call("PUT", f"{API}/graphs/environment-env-1-upgrade", {"tasks": [PLUGIN]})
    assert status == 200 and body["name"] is None and [t["id"] for t in body["tasks"]] == ["lma"]
    status, body = client.call("PUT", f"{API}/graphs/environment-env-1-upgrade", {"type": "other", "tasks": []})
    assert status == 400 and "type does not change" in body["message"]
    assert client.call("GET", f"{API}/graphs/environment-env-1-upgrade/")[1]["name"] is None
    assert client.call("DELETE", f"{API}/graphs/environment-env-1-upgrade/") == (204, None)
    assert stored(client.kube) == {}
    assert client.call("DELETE", f"{API}/graphs/environment-env-1-upgrade/")[0] == 404


def test_the_admission_webhooks_refusal_is_passed_on(client: Client) -> None:
    client.kube.fail_with(ApiError(422, 'admission webhook "deploymentgraphs.stead.dev" denied the request: '
                                        "spec.tasks[0] (x).condition: bad"), "POST", "/deploymentgraphs")
    status, body = client.call("PUT", f"{API}/releases/r1/deployment_graphs/default/", {"tasks": STAGES})
    assert status == 422 and "denied the request: spec.tasks[0] (x).condition: bad" in body["message"]


# --- merged tasks ---------------------------------------------------------------------------------------------


def test_deployment_tasks_are_the_merge_release_plugins_cluster_with_origins(client: Client) -> None:
    for path, tasks in (("releases/r1", [*STAGES, NETCONFIG]), ("plugins/lma", [PLUGIN]),
                        ("plugins/disabled", [{"id": "nope", "type": "shell"}]), ("clusters/env-1", [OVERRIDE])):
        assert client.call("PUT", f"{API}/{path}/deployment_graphs/default/", {"tasks": tasks})[0] == 201
    status, tasks = client.call("GET", f"{API}/clusters/env-1/deployment_tasks/", query="graph_type=default&origin")
    assert status == 200
    assert [(t["id"], t["origin"]) for t in tasks] == [
        ("deploy_start", "release 'r1'"), ("deploy_end", "release 'r1'"), ("netconfig", "environment 'env-1'"),
        ("lma", "plugin 'lma'")]
    assert tasks[2]["type"] == "shell" and tasks[2]["custom_key"] == "kept"  # whole-task replacement
    status, tasks = client.call("GET", f"{API}/clusters/env-1/deployment_tasks", query="level=release")
    assert [t["id"] for t in tasks] == ["deploy_start", "deploy_end", "netconfig"] and tasks[2]["type"] == "puppet"
    assert tasks[2] == {**NETCONFIG, "roles": "*"} and "origin" not in tasks[0]  # Fuel's form, as sent
    assert client.call("GET", f"{API}/clusters/env-1/deployment_tasks/", query="graph_type=none") == (200, [])
    assert client.call("GET", f"{API}/clusters/env-1/deployment_tasks/", query="level=x")[0] == 400
    assert client.call("GET", f"{API}/clusters/nope/deployment_tasks/")[1]["notFound"] == "cluster"


# --- execution ------------------------------------------------------------------------------------------------


def with_types(client: Client, *types: str) -> None:
    """The release's graphs of these types (a run names types the environment has)."""
    for graph_type in types:
        assert client.call("PUT", f"{API}/releases/r1/deployment_graphs/{graph_type}/", {"tasks": STAGES})[0] == 201


def test_execute_creates_a_graph_run_and_answers_202_with_its_name(client: Client) -> None:
    with_types(client, "default", "upgrade")
    status, body = client.call("POST", f"{API}/graphs/execute/", {
        "cluster": "env-1", "graphs": [{"type": "default", "nodes": ["node-1"], "tasks": ["netconfig"]},
                                       {"type": "upgrade"}],
        "dry_run": True, "noop_run": False, "force": True, "subgraphs": [{"start": ["netconfig"], "end": []}]})
    assert status == 202, body
    assert body["name"].startswith("env-1-default-upgrade-") and body["cluster"] == "env-1"
    run = client.kube.objects[f"{RUNS}/{body['name']}"]
    assert run["kind"] == "GraphRun"
    spec = GraphRunSpec.model_validate(run["spec"])
    assert (spec.environment, spec.dry_run, spec.noop, spec.force) == ("env-1", True, False, True)
    assert [(g.type, g.nodes, g.tasks) for g in spec.graphs] == [("default", ["node-1"], ["netconfig"]),
                                                                  ("upgrade", None, None)]
    assert [(s.start, s.end) for s in spec.subgraphs] == [(["netconfig"], [])]
    assert client.auth.checked[-1] == Access("create", GRAPH_RUN.plural, NS, "")


def test_execute_takes_node_ranges_in_fuels_form_or_as_fields(client: Client) -> None:
    with_types(client, "default")
    status, body = client.call("POST", f"{API}/graphs/execute/", {
        "cluster": "env-1", "graphs": [{}], "dry_run": True,
        "subgraphs": [{"start": ["netconfig/node-1,node-2"], "end": ["/^deploy_end$//node-2"]},
                      {"start": ["lma"], "start_nodes": ["node-1"]}]})
    assert status == 202, body
    spec = GraphRunSpec.model_validate(client.kube.objects[f"{RUNS}/{body['name']}"]["spec"])
    assert [(s.start, s.start_nodes, s.end, s.end_nodes) for s in spec.subgraphs] == [
        (["netconfig"], ["node-1", "node-2"], ["/^deploy_end$/"], ["node-2"]), (["lma"], ["node-1"], [], None)]
    status, body = client.call("POST", f"{API}/graphs/execute/", {
        "cluster": "env-1", "graphs": [{}], "subgraphs": [{"start": ["netconfig/node-1,node-9"]}]})
    assert status == 400 and body["message"] == ("body.subgraphs[0].start_nodes: node-9 not in cluster env-1 (its "
                                                 "nodes: node-1, node-2)")
    status, body = client.call("POST", f"{API}/graphs/execute/", {
        "cluster": "env-1", "graphs": [{}], "subgraphs": [{"start": ["a/node-1", "b/node-2"]}]})
    assert status == 400 and "name one node list" in body["message"]


def test_execute_refuses_unknown_nodes_with_400_and_a_running_cluster_with_409(client: Client) -> None:
    with_types(client, "default")
    status, body = client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1",
                                                                 "graphs": [{"type": "default",
                                                                             "nodes": ["node-1", "node-9"]}]})
    assert status == 400
    assert body["message"] == "body.graphs[0].nodes: node-9 not in cluster env-1 (its nodes: node-1, node-2)"
    status, body = client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1", "graphs": [{"type": "a b"}]})
    assert status == 400 and body["message"].startswith("body.graphs[0].type: String should match pattern"), body
    assert client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1"})[0] == 400
    assert client.call("POST", f"{API}/graphs/execute/", {"cluster": "nope", "graphs": [{}]})[0] == 404
    client.kube.add(f"{RUNS}/busy", {"spec": {"environment": "env-1", "graphs": [{"type": "default"}]},
                                     "status": {"state": "Running"}})
    status, body = client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1", "graphs": [{}]})
    assert status == 409 and body["message"].startswith("GraphRun busy runs on cluster env-1")
    client.kube.objects[f"{RUNS}/busy"]["status"]["state"] = "Succeeded"
    client.kube.fail_with(ApiError(409, 'admission webhook "graphruns.stead.dev" denied the request: '
                                        "spec.environment: GraphRun other runs on environment env-1"), "POST")
    status, body = client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1", "graphs": [{}]})
    assert status == 409 and "GraphRun other runs on environment env-1" in body["message"]
    assert client.kube.names(RUNS) == ["busy"]


def test_execute_of_a_type_the_cluster_has_no_graph_of_is_400_naming_its_types(client: Client) -> None:
    """Planned, it would run no task and succeed: nothing deployed, and nothing said."""
    status, body = client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1", "graphs": [{}]})
    assert status == 400 and body["message"].startswith(
        "body.graphs[0].type: environment env-1 has no graph of type 'default' (it has no graph of any type yet")
    with_types(client, "default", "upgrade")
    assert client.call("PUT", f"{API}/releases/r2/deployment_graphs/other/", {"tasks": STAGES})[0] == 201
    status, body = client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1", "graphs": [
        {"type": "default"}, {"type": "defualt"}]})
    assert status == 400 and body["message"].startswith(
        "body.graphs[1].type: environment env-1 has no graph of type 'defualt' (its graph types: default, upgrade;")
    assert client.kube.names(RUNS) == []


# --- authorization and self-description ----------------------------------------------------------------------


def test_each_verb_is_authorized_for_the_caller_in_the_namespace(client: Client) -> None:
    path = f"{API}/releases/r1/deployment_graphs/default/"
    status, body = client.call("PUT", path, {"tasks": STAGES}, token="reader")
    assert status == 403 and body["message"] == 'user "reader" may not update deploymentgraphs in namespace "ns"'
    assert client.call("PUT", path, {"tasks": STAGES})[0] == 201
    assert client.call("GET", path, token="reader")[0] == 200
    assert client.call("GET", f"{API}/graphs/", token="reader")[0] == 200
    assert client.call("DELETE", f"{API}/graphs/release-r1-default/", token="reader")[0] == 403
    assert client.call("POST", f"{API}/graphs/execute/", {"cluster": "env-1", "graphs": [{}]}, token="reader")[0] \
        == 403
    assert client.call("GET", f"{API}/graphs/", token="nobody")[0] == 401
    client.auth.checked.clear()
    assert client.call("GET", f"{API}/graphs/", query="namespace=other")[1] == []
    assert client.auth.checked == [Access("list", DEPLOYMENT_GRAPH.plural, "other", "")]
    assert client.call("GET", f"{API}/graphs/", query="namespace=Bad_NS")[0] == 400


def test_the_routes_are_listed_and_in_the_openapi_document(client: Client) -> None:
    status, index = client.call("GET", "/api/v1")
    assert status == 200
    routes = {(r["method"], r["path"]) for r in index["routes"]}
    assert {("POST", "/api/v1/graphs/execute/"), ("GET", "/api/v1/clusters/{env}/deployment_tasks/"),
            ("PUT", "/api/v1/{model}/{owner}/deployment_graphs/{type}/"),
            ("DELETE", "/api/v1/graphs/{name}/")} <= routes
    status, document = client.call("GET", "/api/v1/config/openapi.json")
    assert status == 200
    assert {"/api/v1/graphs/", "/api/v1/graphs/{name}/", "/api/v1/graphs/execute/",
            "/api/v1/clusters/{env}/deployment_tasks/"} <= set(document["paths"])
    assert "DeploymentGraph" in document["components"]["schemas"]


def test_every_route_listed_is_routed_and_every_route_is_listed(client: Client) -> None:
    from operators.graphs.api import ROUTE_DOCS

    graphs_api = client.api.extensions[0]
    example = {"{name}": "g", "{model}": "plugins", "{owner}": "o", "{type}": "t", "{env}": "e", "{run}": "r",
               "{task}": "k"}
    listed: set[tuple[str, str]] = set()
    for method, template, description in ROUTE_DOCS:
        assert description
        path = template
        for placeholder, value in example.items():
            path = path.replace(placeholder, value)
        handler, _ = client.api._route(Request(method, path, "", {}))
        listed.add((method, handler.__name__))
        handler, _ = client.api._route(Request(method, path.rstrip("/"), "", {}))  # the slash is optional
    routed = {(method, handler.__name__) for _, methods in graphs_api.routes() for method, handler in methods.items()}
    assert routed == listed
