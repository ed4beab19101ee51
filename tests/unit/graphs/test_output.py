"""A graph run's whole task output through the API (`GET /api/v1/graphruns/<run>/output/...`), read from the run's
files as the runner left them: authorization per namespace, 404s that name what is missing, names from the URL
never followed out of the run's directory, and pages of bounded size that join up to the whole output."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

from operators.config.api import ConfigApi
from operators.config.repository import ConfigRepository
from operators.graphs import GRAPH_RUN
from operators.graphs.api import GraphsApi
from operators.graphs.output import PAGE_BYTES, PLAN_FILE, RunInstance, output_file
from operators.runtime.api.auth import Access
from operators.runtime.api.extension import ExtensionSettings
from operators.runtime.kube.client import custom_path
from operators.runtime.serving.http import Request
from pipelines.paths import RunPaths
from tests.unit.fakeapi import FakeApi
from tests.unit.graphs.support import NamespaceAuth

NS = "team"
API = "/api/v1/graphruns"
INDEX = {"default:deploy_start": ["deploy_start", ""], "default:hiera:node-1": ["hiera", "node-1"],
         "default:hiera:node-2": ["hiera", "node-2"], "default:netconfig:node-1": ["netconfig", "node-1"],
         "post:report:node-1": ["report", "node-1"]}


class Client:
    def __init__(self, kube: FakeApi, state_dir: Path | None) -> None:
        self.kube = kube
        self.auth = NamespaceAuth(NS, "get")
        extension = GraphsApi(kube, self.auth, NS, ExtensionSettings(runs_state_dir=state_dir))
        self.api = ConfigApi(cast(ConfigRepository, None), self.auth, NS, [extension])

    def get(self, path: str, query: str = "", token: str = "good") -> tuple[int, Any]:
        request = Request("GET", path, query, {"authorization": f"Bearer {token}"}, b"")
        response = asyncio.run(self.api(request))
        return response.status, json.loads(response.body) if response.body else None


def _run(kube: FakeApi, state_dir: Path, name: str = "deploy-1", namespace: str = NS) -> RunPaths:
    """A GraphRun object and its files: the plan's index and the output the runner wrote."""
    obj = kube.add(custom_path(GRAPH_RUN.plural, namespace, name), {
        "apiVersion": "stead.dev/v1alpha1", "kind": "GraphRun",
        "spec": {"environment": "env", "graphs": [{"type": "default"}, {"type": "post"}]},
        "status": {"state": "Succeeded"}})
    paths = RunPaths(state_dir, obj["metadata"]["uid"])
    paths.output_dir.mkdir(parents=True)
    (paths.run_dir / PLAN_FILE).write_text(json.dumps({"index": INDEX, "facts": {}, "planned": {}}))
    return paths


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "store-runs"


@pytest.fixture
def client(kube: FakeApi, state_dir: Path) -> Client:
    return Client(kube, state_dir)


def test_the_whole_output_of_an_instance_comes_back_as_stored(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    text = "".join(f"line {i} of hiera on node-2: ***\n" for i in range(500))  # far beyond a status' tail
    paths.output_file("default:hiera:node-2@node-2").write_text(text)
    status, body = client.get(f"{API}/deploy-1/output/hiera/", "node=node-2")
    assert status == 200, body
    assert body["output"] == text and body["size"] == len(text.encode())
    assert (body["task"], body["node"], body["type"], body["truncated"], body["next_offset"]) == \
        ("hiera", "node-2", "default", False, None)
    assert client.auth.checked[-1] == Access("get", GRAPH_RUN.plural, NS, "deploy-1")


def test_the_list_names_every_instance_with_its_output_size(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    paths.output_file("default:netconfig:node-1@node-1").write_text("ok\n")
    status, body = client.get(f"{API}/deploy-1/output/")
    assert status == 200
    assert {(i["type"], i["task"], i["node"], i["bytes"]) for i in body["instances"]} == {
        ("default", "deploy_start", None, 0), ("default", "hiera", "node-1", 0), ("default", "hiera", "node-2", 0),
        ("default", "netconfig", "node-1", 3), ("post", "report", "node-1", 0)}
    status, body = client.get(f"{API}/deploy-1/output", "node=node-2")
    assert status == 200 and [(i["task"], i["node"]) for i in body["instances"]] == [("hiera", "node-2")]


def test_a_caller_without_get_on_graphruns_in_the_namespace_is_refused(client: Client, state_dir: Path) -> None:
    _run(client.kube, state_dir)
    status, body = client.get(f"{API}/deploy-1/output/hiera/", "node=node-1", token="other")
    assert status == 403 and 'user "other" may not get graphruns in namespace "team"' in body["message"]
    status, _ = client.get(f"{API}/deploy-1/output/hiera/", "node=node-1", token="stranger")
    assert status == 401


def test_another_namespace_is_refused_even_where_a_run_of_that_name_exists(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir, namespace="elsewhere")
    paths.output_file("default:hiera:node-1@node-1").write_text("secret of another tenant\n")
    status, body = client.get(f"{API}/deploy-1/output/hiera/", "node=node-1&namespace=elsewhere")
    assert status == 403 and "elsewhere" in body["message"] and "tenant" not in json.dumps(body)


def test_unknown_runs_tasks_nodes_and_types_are_404s_naming_them(client: Client, state_dir: Path) -> None:
    _run(client.kube, state_dir)
    status, body = client.get(f"{API}/nope/output/hiera/")
    assert status == 404 and body["notFound"] == "graphrun"
    assert body["message"] == 'graph run "nope" not found in namespace "team" (runs here: deploy-1)'
    status, body = client.get(f"{API}/deploy-1/output/keystone/")
    assert status == 404 and body["notFound"] == "task"
    assert "no task 'keystone'" in body["message"] and "hiera, netconfig" in body["message"]
    status, body = client.get(f"{API}/deploy-1/output/netconfig/", "node=node-9")
    assert status == 404 and body["notFound"] == "node"
    assert "does not run on node 'node-9' (its nodes: node-1)" in body["message"]
    status, body = client.get(f"{API}/deploy-1/output/report/", "type=default")
    assert status == 404 and body["notFound"] == "type" and "(its types: post)" in body["message"]


def test_a_task_on_several_nodes_needs_one_named(client: Client, state_dir: Path) -> None:
    _run(client.kube, state_dir)
    status, body = client.get(f"{API}/deploy-1/output/hiera/")
    assert status == 400 and "node-1 (default), node-2 (default)" in body["message"]


def test_a_run_not_planned_here_is_a_404_saying_so(client: Client, kube: FakeApi) -> None:
    kube.add(custom_path(GRAPH_RUN.plural, NS, "fresh"), {"spec": {"environment": "env"}, "status": {}})
    status, body = client.get(f"{API}/fresh/output/")
    assert status == 404 and "no plan on this operator's volume" in body["message"]


def test_a_server_without_the_runs_directory_says_it_cannot_serve_output(kube: FakeApi, state_dir: Path) -> None:
    _run(kube, state_dir)
    status, body = Client(kube, None).get(f"{API}/deploy-1/output/")
    assert status == 503 and "runs' state directory" in body["message"]


@pytest.mark.parametrize(("path", "query"), [
    (f"{API}/../output/hiera/", ""),
    (f"{API}/deploy-1/output/..%2F..%2Fplan/", ""),
    (f"{API}/deploy-1/output/../", ""),
    (f"{API}/deploy-1/output/hiera/", "node=../../../etc"),
    (f"{API}/deploy-1/output/hiera/", "node=node-1%2F..%2F..%2Fx"),
    (f"{API}/deploy-1/output/hiera/", "type=default/../x&node=node-1"),
    (f"{API}/deploy-1/output/.hidden/", ""),
])
def test_names_that_try_to_leave_the_run_are_refused(client: Client, state_dir: Path, path: str, query: str) -> None:
    paths = _run(client.kube, state_dir)
    (state_dir / "plan.log").write_text("outside\n")
    (paths.run_dir / "kube-credentials.json").write_text('{"token": "do-not-show"}')
    status, body = client.get(path, query)
    assert status in (400, 404), body
    assert "do-not-show" not in json.dumps(body) and "outside" not in json.dumps(body)


def test_a_plan_naming_a_file_outside_the_output_directory_is_not_followed(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    (paths.run_dir / PLAN_FILE).write_text(json.dumps({"index": {"../kube-credentials": ["evil", ""]}}))
    (paths.run_dir / "kube-credentials.log").write_text("token\n")
    status, body = client.get(f"{API}/deploy-1/output/evil/")
    assert status == 500 and "token" not in body["message"].replace("runner", "")


def test_long_output_comes_in_bounded_pages_that_join_up(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    text = "".join(f"{i:07d} é✓\n" for i in range(PAGE_BYTES // 8))  # multi-byte characters across page edges
    stored = text.encode()
    assert len(stored) > PAGE_BYTES
    paths.output_file("post:report:node-1@node-1").write_bytes(stored)
    status, first = client.get(f"{API}/deploy-1/output/report/")
    assert status == 200 and first["truncated"] and first["size"] == len(stored)
    assert len(first["output"].encode()) <= PAGE_BYTES
    assert first["message"].startswith(f"truncated at {first['next_offset']} bytes")
    pieces, offset = [first["output"]], first["next_offset"]
    while offset is not None:
        status, page = client.get(f"{API}/deploy-1/output/report/", f"offset={offset}&limit=100003")
        assert status == 200 and len(page["output"].encode()) <= 100003
        pieces.append(page["output"])
        offset = page["next_offset"]
    assert "".join(pieces) == text
    status, body = client.get(f"{API}/deploy-1/output/report/", f"limit={PAGE_BYTES + 1}")
    assert status == 400 and "query parameter limit" in body["message"]
    status, body = client.get(f"{API}/deploy-1/output/report/", "offset=-1")
    assert status == 400 and "query parameter offset" in body["message"]


def test_an_instance_key_is_the_runners() -> None:
    assert RunInstance("default", "hiera", "node-1", "default:hiera:node-1").key == "default:hiera:node-1@node-1"
    assert RunInstance("default", "deploy_start", "", "default:deploy_start").key == "default:deploy_start"


def test_an_instance_that_is_no_runner_name_is_not_followed_out_of_the_run(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "run-uid")
    assert output_file(paths, RunInstance("default", "t", "node-1", "default:t:node-1")) == \
        (paths.output_dir / "default:t:node-1@node-1.log").resolve()
    for step, node in [("../../etc/passwd", ""), ("default:t", "../x"), ("default:t", "a/b"), (".hidden", "")]:
        with pytest.raises(ValueError):
            output_file(paths, RunInstance("default", "t", node, step))
