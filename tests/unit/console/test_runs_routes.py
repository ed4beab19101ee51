"""The run view's handlers and its `output` topic (operators/console/views/runs.py) over fake API servers:
what they ask of the kube API and the operator's API, as the user, and what they answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from operators.console.views import runs
from operators.console.web import ConsoleCall, ConsoleError
from operators.runtime import ApiError


class Fake:
    """A Requester answering by `answer(method, path, params)`, recording what it was asked."""

    def __init__(self, answer: Callable[[str, str, dict[str, str]], Any]) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str, dict[str, str]]] = []

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> Any:
        self.asked.append((method, path, dict(params or {})))
        return self.answer(method, path, dict(params or {}))


def call(kube: Fake | None = None, stead: Fake | None = None, **params: str) -> ConsoleCall:
    query = {k[2:]: v for k, v in params.items() if k.startswith("q_")}
    path = {k: v for k, v in params.items() if not k.startswith("q_")}
    return ConsoleCall(kube=kube, stead=stead, user="u", params=path, query=query)  # type: ignore[arg-type]


def graph_run(state: str, task_state: str = "running") -> dict[str, Any]:
    return {"kind": "GraphRun", "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"environment": "env", "graphs": [{"type": "default"}]},
            "status": {"state": state, "startTime": "2026-01-01T00:00:00Z", "nodes": [
                {"name": "n1", "tasks": [{"task": "a", "state": "success"}, {"task": "b", "state": task_state}]}]}}


def test_the_output_topic_streams_by_byte_offset_resumes_and_ends_when_the_instance_is_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "OUTPUT_POLL_SECONDS", 0.0)
    monkeypatch.setattr(runs, "STATE_CHECK_SECONDS", 0.0)
    printed = ["héllo\n"]  # é: two bytes, so offsets are bytes, not characters
    run_state = ["Running"]

    def operator_api(method: str, path: str, params: dict[str, str]) -> Any:
        whole = "".join(printed).encode()
        offset = int(params["offset"])
        if len(printed) == 1:
            printed.append("world\n")  # printed while the page reads
        else:
            run_state[0] = "Succeeded"
        return {"offset": offset, "size": len(whole), "next_offset": None, "output": whole[offset:].decode()}

    kube = Fake(lambda *_: graph_run(run_state[0]))
    stead = Fake(operator_api)
    params = {"namespace": "ns", "run": "r", "task": "b", "node": "n1", "type": "default"}

    async def collect(position: str | None) -> list[tuple[str, Any]]:
        return [item async for item in runs.output_topic(call(kube, stead), params, position)]

    got = asyncio.run(collect(None))
    assert [(p, d["text"]) for p, d in got] == [("7", "héllo\n"), ("13", "world\n")]
    assert stead.asked[0] == ("GET", "/api/v1/graphruns/r/output/b/",
                              {"namespace": "ns", "offset": "0", "node": "n1", "type": "default"})
    # a reconnect from the last position sent asks from there and repeats nothing
    stead.asked.clear()
    assert asyncio.run(collect("13")) == []
    assert stead.asked[0][2]["offset"] == "13"


def test_a_long_output_is_read_page_after_page_without_waiting() -> None:
    pages = {0: {"offset": 0, "size": 6, "next_offset": 3, "output": "abc"},
             3: {"offset": 3, "size": 6, "next_offset": None, "output": "def"},
             6: {"offset": 6, "size": 6, "next_offset": None, "output": ""}}
    stead = Fake(lambda m, p, params: pages[int(params["offset"])])
    kube = Fake(lambda *_: graph_run("Failed", "failure"))

    async def collect() -> list[str]:
        return [position async for position, _ in runs.output_topic(
            call(kube, stead), {"namespace": "ns", "run": "r", "task": "b", "node": "n1"}, None)]

    assert asyncio.run(collect()) == ["3", "6"]
    assert runs.page_end({"offset": 2, "next_offset": None, "output": "é"}) == 4


@pytest.mark.parametrize(("params", "named"), [
    ({"task": "b/../../config"}, "task"), ({"task": "b", "run": "R!"}, "run"), ({"task": "b", "namespace": ""},
                                                                                "namespace")])
def test_names_that_would_change_the_operator_apis_path_are_refused_before_asking(
        params: dict[str, str], named: str) -> None:
    stead = Fake(lambda *_: {})
    given = {"namespace": "ns", "run": "r", **params}

    async def first() -> Any:
        return await anext(runs.output_topic(call(Fake(lambda *_: {}), stead), given, None))

    with pytest.raises(ConsoleError) as refused:
        asyncio.run(first())
    assert refused.value.status == 400 and refused.value.message.startswith(named) and stead.asked == []


def test_the_view_route_shapes_the_run_the_user_may_read() -> None:
    kube = Fake(lambda *_: graph_run("Running"))
    view = asyncio.run(runs.view(call(kube, plural="graphruns", namespace="ns", name="r")))
    assert view["groups"][0]["label"] == "n1" and kube.asked == [
        ("GET", "/apis/stead.dev/v1alpha1/namespaces/ns/graphruns/r", {})]
    with pytest.raises(ConsoleError) as refused:
        asyncio.run(runs.view(call(kube, plural="apps", namespace="ns", name="r")))
    assert refused.value.status == 404


def test_the_dag_comes_from_the_merged_graph_read_as_the_user_or_says_why_not() -> None:
    kube = Fake(lambda *_: graph_run("Running"))
    tasks = [{"id": "a"}, {"id": "b", "requires": ["a"]}, {"id": "other", "requires": ["b"]}]
    stead = Fake(lambda *_: tasks)
    layout = asyncio.run(runs.dag(call(kube, stead, namespace="ns", name="r")))
    assert layout["available"] and layout["edges"] == [["a", "b"]]
    assert stead.asked == [("GET", "/api/v1/clusters/env/deployment_tasks/",
                            {"namespace": "ns", "graph_type": "default"})]
    assert asyncio.run(runs.dag(call(kube, None, namespace="ns", name="r")))["available"] is False

    def refuse(*_: Any) -> Any:
        raise ApiError(403, "forbidden: may not list deploymentgraphs")

    refused = asyncio.run(runs.dag(call(kube, Fake(refuse), namespace="ns", name="r")))
    assert refused == {"available": False, "reason": "the graph 'default': forbidden: may not list deploymentgraphs"}


def action_run(state: str, replica_state: str = "running") -> dict[str, Any]:
    return {"kind": "ActionRun", "metadata": {"name": "web-create", "namespace": "ns"},
            "status": {"state": state, "runLog": [
                {"task": "S/install", "step": "S.install", "replicas": [{"target": "tier-0", "state": replica_state}]},
                {"task": "notify", "step": "notify", "replicas": [{"target": "", "state": "pending"}]}]}}


def test_an_action_runs_output_topic_reads_its_own_route_and_ends_when_its_replica_is_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "OUTPUT_POLL_SECONDS", 0.0)
    monkeypatch.setattr(runs, "STATE_CHECK_SECONDS", 0.0)
    printed = ["first\n"]
    replica = ["running"]

    def operator_api(method: str, path: str, params: dict[str, str]) -> Any:
        whole = "".join(printed).encode()
        offset = int(params["offset"])
        if len(printed) == 1:
            printed.append("second\n")  # printed while the run goes on
        else:
            replica[0] = "success"  # the task ended; the run (its other tasks) may go on
        return {"offset": offset, "size": len(whole), "next_offset": None, "output": whole[offset:].decode()}

    kube = Fake(lambda *_: action_run("Running", replica[0]))
    stead = Fake(operator_api)
    params = {"namespace": "ns", "run": "web-create", "step": "S.install", "target": "tier-0",
              "plural": "actionruns"}

    async def collect() -> list[tuple[str, Any]]:
        return [item async for item in runs.output_topic(call(kube, stead), params, None)]

    assert [(p, d["text"]) for p, d in asyncio.run(collect())] == [("6", "first\n"), ("13", "second\n")]
    assert stead.asked[0] == ("GET", "/api/v1/actionruns/web-create/output/S.install/",
                              {"namespace": "ns", "offset": "0", "target": "tier-0"})
    assert {path for _, path, _ in kube.asked} == {"/apis/stead.dev/v1alpha1/namespaces/ns/actionruns/web-create"}


@pytest.mark.parametrize(("params", "named"), [
    ({"step": "../../config"}, "step"), ({"step": "%2e%2e"}, "step"), ({"step": "S.install", "target": "t/../x"},
                                                                      "target"),
    ({"step": "S.install", "plural": "secrets"}, "plural"), ({"step": "S.install", "run": "R!"}, "run")])
def test_action_run_names_that_would_change_the_operator_apis_path_are_refused_before_asking(
        params: dict[str, str], named: str) -> None:
    stead = Fake(lambda *_: {})
    given = {"namespace": "ns", "run": "r", "plural": "actionruns", **params}

    async def first() -> Any:
        return await anext(runs.output_topic(call(Fake(lambda *_: {}), stead), given, None))

    with pytest.raises(ConsoleError) as refused:
        asyncio.run(first())
    assert refused.value.status == 400 and refused.value.message.startswith(named) and stead.asked == []


def test_the_output_route_serves_both_kinds_of_run() -> None:
    stead = Fake(lambda *_: {"offset": 0, "output": "x"})
    asyncio.run(runs.output(call(None, stead, plural="actionruns", namespace="ns", name="r", q_step="notify",
                                 q_offset="3")))
    asyncio.run(runs.output(call(None, stead, plural="graphruns", namespace="ns", name="r", q_task="b")))
    assert stead.asked == [("GET", "/api/v1/actionruns/r/output/notify/", {"namespace": "ns", "offset": "3"}),
                           ("GET", "/api/v1/graphruns/r/output/b/", {"namespace": "ns", "offset": "0"})]
