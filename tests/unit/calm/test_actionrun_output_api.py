"""An ActionRun's whole task output through the API (`GET /api/v1/actionruns/<run>/output/...`), read from the
run's files as the runner writes them: the caller's `get actionruns` in the namespace, only the instances the
run's runLog lists, names from the URL never followed out of the run's output directory, bounded pages."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

from operators.calm.api import CalmApi
from operators.calm.models import ACTIONRUN
from operators.config.api import ConfigApi
from operators.config.repository import ConfigRepository
from operators.runtime.api.auth import Access
from operators.runtime.api.extension import ExtensionSettings
from operators.runtime.kube.client import custom_path
from operators.runtime.serving.http import Request
from pipelines.pages import PAGE_BYTES
from pipelines.paths import RunPaths
from tests.unit.fakeapi import FakeApi
from tests.unit.graphs.support import NamespaceAuth

NS = "team"
API = "/api/v1/actionruns"
RUN_LOG = [
    {"task": "provision", "step": "S1_create", "type": "exec", "state": "success",
     "replicas": [{"target": "app_tier-0", "state": "success"}, {"target": "app_tier-1", "state": "running"}]},
    {"task": "notify", "step": "notify", "type": "exec", "state": "running", "replicas": [{"target": "",
                                                                                          "state": "running"}]},
    {"task": "later", "step": "later", "type": "exec", "state": "pending", "replicas": []},
]


class Client:
    def __init__(self, kube: FakeApi, state_dir: Path | None) -> None:
        self.kube = kube
        self.auth = NamespaceAuth(NS, "get")
        extension = CalmApi(kube, self.auth, NS, ExtensionSettings(runs_state_dir=state_dir))
        self.api = ConfigApi(cast(ConfigRepository, None), self.auth, NS, [extension])

    def get(self, path: str, query: str = "", token: str = "good") -> tuple[int, Any]:
        request = Request("GET", path, query, {"authorization": f"Bearer {token}"}, b"")
        response = asyncio.run(self.api(request))
        return response.status, json.loads(response.body) if response.body else None


def _run(kube: FakeApi, state_dir: Path, name: str = "create-1", namespace: str = NS) -> RunPaths:
    obj = kube.add(custom_path(ACTIONRUN.plural, namespace, name), {
        "apiVersion": "stead.dev/v1alpha1", "kind": "ActionRun", "spec": {"app": "shop", "action": "create"},
        "status": {"state": "Running", "runLog": RUN_LOG}})
    paths = RunPaths(state_dir, obj["metadata"]["uid"])
    paths.output_dir.mkdir(parents=True)
    return paths


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "store-runs"


@pytest.fixture
def client(kube: FakeApi, state_dir: Path) -> Client:
    return Client(kube, state_dir)


def test_the_whole_output_of_an_instance_comes_back_as_the_runner_wrote_it(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    text = "".join(f"line {i} on app_tier-1: ***\n" for i in range(500))  # far beyond the status' tail
    paths.output_file("S1_create@app_tier-1").write_text(text)
    status, body = client.get(f"{API}/create-1/output/S1_create/", "target=app_tier-1")
    assert status == 200, body
    assert body["output"] == text and body["size"] == len(text.encode())
    assert (body["run"], body["namespace"], body["step"], body["target"], body["offset"], body["truncated"],
            body["next_offset"]) == ("create-1", NS, "S1_create", "app_tier-1", 0, False, None)
    assert client.auth.checked[-1] == Access("get", ACTIONRUN.plural, NS, "create-1")
    paths.output_file("notify").write_text("sent\n")
    status, body = client.get(f"{API}/create-1/output/notify", "offset=2")
    assert status == 200 and body["output"] == "nt\n" and body["offset"] == 2 and body["target"] is None


def test_the_list_names_every_instance_of_the_run_log_with_its_output_size(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    paths.output_file("S1_create@app_tier-0").write_text("ok\n")
    status, body = client.get(f"{API}/create-1/output/")
    assert status == 200, body
    assert [(i["step"], i["task"], i["target"], i["bytes"]) for i in body["instances"]] == [
        ("S1_create", "provision", "app_tier-0", 3), ("S1_create", "provision", "app_tier-1", 0),
        ("notify", "notify", None, 0)]


def test_a_caller_without_get_on_actionruns_in_the_namespace_is_refused(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    paths.output_file("notify").write_text("private\n")
    status, body = client.get(f"{API}/create-1/output/notify/", token="other")
    assert status == 403 and 'user "other" may not get actionruns in namespace "team"' in body["message"]
    assert "private" not in json.dumps(body)
    status, _ = client.get(f"{API}/create-1/output/notify/", token="stranger")
    assert status == 401


def test_another_namespaces_run_is_refused_by_the_review(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir, namespace="elsewhere")
    paths.output_file("notify").write_text("secret of another tenant\n")
    for path in (f"{API}/create-1/output/notify/", f"{API}/create-1/output/"):
        status, body = client.get(path, "namespace=elsewhere")
        assert status == 403 and "elsewhere" in body["message"] and "tenant" not in json.dumps(body)
    assert client.auth.checked[-1] == Access("get", ACTIONRUN.plural, "elsewhere", "create-1")


def test_unknown_runs_steps_and_targets_are_404s_naming_them(client: Client, state_dir: Path) -> None:
    _run(client.kube, state_dir)
    status, body = client.get(f"{API}/nope/output/notify/")
    assert status == 404 and body["notFound"] == "actionrun"
    assert body["message"] == 'action run "nope" not found in namespace "team" (runs here: create-1)'
    status, body = client.get(f"{API}/create-1/output/deploy/")
    assert status == 404 and body["notFound"] == "step" and "(its steps: S1_create, notify)" in body["message"]
    status, body = client.get(f"{API}/create-1/output/later/")  # listed, but not reached: no instance yet
    assert status == 404 and body["notFound"] == "step"
    status, body = client.get(f"{API}/create-1/output/S1_create/", "target=app_tier-9")
    assert status == 404 and body["notFound"] == "target"
    assert "(its targets: app_tier-0, app_tier-1)" in body["message"]
    status, body = client.get(f"{API}/create-1/output/S1_create/")
    assert status == 400 and "name one with target=" in body["message"]


def test_a_server_without_the_runs_directory_says_it_cannot_serve_output(kube: FakeApi, state_dir: Path) -> None:
    _run(kube, state_dir)
    status, body = Client(kube, None).get(f"{API}/create-1/output/")
    assert status == 503 and "runs' state directory" in body["message"]


@pytest.mark.parametrize(("path", "query"), [
    (f"{API}/../output/notify/", ""),
    (f"{API}/create-1/output/../x/", ""),
    (f"{API}/create-1/output/..%2Fx/", ""),
    (f"{API}/create-1/output/%2e%2e/", ""),
    (f"{API}/create-1/output/%2e%2e%2f%2e%2e%2fsecret/", ""),
    (f"{API}/create-1/output/.hidden/", ""),
    (f"{API}/create-1/output/S1_create/", "target=../../../etc"),
    (f"{API}/create-1/output/S1_create/", "target=app_tier-1%2F..%2F..%2Fsecret"),
])
def test_names_that_try_to_leave_the_run_are_refused(client: Client, state_dir: Path, path: str, query: str) -> None:
    paths = _run(client.kube, state_dir)
    (state_dir / "secret.log").write_text("outside\n")
    (paths.run_dir / "kube-credentials.json").write_text('{"token": "do-not-show"}')
    status, body = client.get(path, query)
    assert status in (400, 404), body
    assert "do-not-show" not in json.dumps(body) and "outside" not in json.dumps(body)


def test_a_run_log_naming_a_file_outside_the_output_directory_is_not_followed(client: Client,
                                                                                state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    obj = client.kube.objects[custom_path(ACTIONRUN.plural, NS, "create-1")]
    obj["status"]["runLog"] = [{"task": "evil", "step": "..", "replicas": [{"target": "x/../../y"}]}]
    (paths.run_dir / "y.log").write_text("token\n")
    status, body = client.get(f"{API}/create-1/output/")
    assert status == 500 and "token" not in json.dumps(body)


def test_long_output_comes_in_bounded_pages_that_join_up(client: Client, state_dir: Path) -> None:
    paths = _run(client.kube, state_dir)
    text = "".join(f"{i:07d} é✓\n" for i in range(PAGE_BYTES // 8))
    stored = text.encode()
    paths.output_file("notify").write_bytes(stored)
    status, first = client.get(f"{API}/create-1/output/notify/")
    assert status == 200 and first["truncated"] and first["size"] == len(stored)
    pieces, offset = [first["output"]], first["next_offset"]
    while offset is not None:
        status, page = client.get(f"{API}/create-1/output/notify/", f"offset={offset}&limit=300007")
        assert status == 200 and len(page["output"].encode()) <= 300007
        pieces.append(page["output"])
        offset = page["next_offset"]
    assert "".join(pieces) == text
    status, body = client.get(f"{API}/create-1/output/notify/", f"limit={PAGE_BYTES + 1}")
    assert status == 400 and "query parameter limit" in body["message"]
    status, body = client.get(f"{API}/create-1/output/notify/", "offset=-1")
    assert status == 400 and "query parameter offset" in body["message"]
