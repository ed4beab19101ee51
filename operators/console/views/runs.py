"""The console's run view (ActionRuns, GraphRuns, a ServiceInstance's lifecycle transfers): its routes and
its stream topics. Thin: the shaping is `runs_shape` and `gantt`, pure and unit-tested.

Routes (under /console/api/runs/, every read as the signed-in user):

    GET  runs/{plural}/{namespace}/{name}                 the run view (plural: actionruns or graphruns)
    GET  runs/graphruns/{namespace}/{name}/dag            the run's tasks as a DAG, laid out
    GET  runs/graphruns/{namespace}/{name}/output         one page of an instance's whole output
                                                          (?task, ?node, ?type, ?offset)
    GET  runs/serviceinstances/{namespace}/{name}         the instance's transfers: its App's ActionRuns

The page follows the run with the object page's own `object` topic (each change asks for the view again),
and adds one topic of its own to the page's multiplexed stream:

- `output` {namespace, run, task, node?, type?}: a GraphRun instance's output as it grows (position: the
  byte offset read so far, so a reconnect resumes without repeating a line). It reads the operator API's
  output route as the user, every `OUTPUT_POLL_SECONDS` while the instance may still print, and ends (the
  stream's `end` event) once it finished and everything it printed was sent.

An ActionRun's whole output is on the operator's volume only (no route serves it): its view shows the tail
the status keeps (the last 2 KiB of each instance), which comes with each change of the run.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from operators.console.stream import NAME
from operators.console.views.gantt import MAX_DAG_TASKS, dag_layout, task_edges
from operators.console.views.runs_shape import FINAL, LIVE_TASK_STATES, run_view, transfer_runs
from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute, TopicSource
from operators.runtime import ApiError, custom_path

PLURALS = ("actionruns", "graphruns")
GRAPHS_API = "/api/v1"
"""The operator's deployment graphs API (docs/graphs.md), on its API server (`call.stead`)."""
OUTPUT_POLL_SECONDS = 0.5
"""How often a live instance's output is read (the stream latency it adds is half of this, on average)."""
STATE_CHECK_SECONDS = 2.0
"""How often the `output` topic looks whether the instance is still running, while it prints nothing."""
TASK = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,119}$")
"""A task id (a DeploymentGraph's task id pattern): what may go into the operator API's path."""


def _now() -> datetime:
    return datetime.now(UTC)


def _plural(call: ConsoleCall) -> str:
    plural = call.params["plural"]
    if plural not in PLURALS:
        raise ConsoleError(404, f"runs: {plural!r} is not a kind of run ({', '.join(PLURALS)})")
    return plural


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise ConsoleError(400, f"{what}: {str(value)[:64]!r} is not an object's name")
    return value


async def _get(call: ConsoleCall, plural: str, namespace: str, name: str) -> dict[str, Any]:
    path = custom_path(plural, _name(namespace, "namespace"), _name(name, "name"))
    return await call.kube.request("GET", path)


async def view(call: ConsoleCall) -> Any:
    """The run view of an ActionRun or a GraphRun."""
    plural = _plural(call)
    return run_view(await _get(call, plural, call.params["namespace"], call.params["name"]), _now())


async def dag(call: ConsoleCall) -> Any:
    """The GraphRun's tasks laid out as a DAG, edges from the merged graphs of its types (read from the
    operator's API as the user). `{"available": false, "reason"}` when they cannot be read, so that the rest
    of the page still shows."""
    namespace, name = call.params["namespace"], call.params["name"]
    run = await _get(call, "graphruns", namespace, name)
    present = list(run_view(run, _now())["taskStates"])
    if len(present) > MAX_DAG_TASKS:
        return {"available": False, "reason": f"{len(present)} tasks: more than {MAX_DAG_TASKS} to draw"}
    if call.stead is None:
        return {"available": False, "reason": "this console has no --stead-api: the graphs cannot be read"}
    spec = run.get("spec") or {}
    environment = str(spec.get("environment") or "")
    edges: set[tuple[str, str]] = set()
    for graph in spec.get("graphs") or []:
        try:
            tasks = await call.stead.request(
                "GET", f"{GRAPHS_API}/clusters/{environment}/deployment_tasks/",
                params={"namespace": namespace, "graph_type": str(graph.get("type") or "default")})
        except ApiError as error:
            return {"available": False, "reason": f"the graph {graph.get('type')!r}: {error.message}"}
        edges.update(task_edges(tasks if isinstance(tasks, list) else [], present))
    return {"available": True, **dag_layout(present, sorted(edges))}


def _output_params(namespace: str, source: Mapping[str, Any], offset: int) -> dict[str, str]:
    params = {"namespace": namespace, "offset": str(offset)}
    for key in ("node", "type"):
        if source.get(key):
            params[key] = str(source[key])
    return params


async def _page(call: ConsoleCall, namespace: str, run: str, source: Mapping[str, Any], offset: int
                ) -> dict[str, Any]:
    task = source.get("task")
    if not isinstance(task, str) or not TASK.match(task):
        raise ConsoleError(400, f"task: {str(task)[:64]!r} is not a task id")
    _name(namespace, "namespace")
    page: dict[str, Any] = await call.needs_stead().request(
        "GET", f"{GRAPHS_API}/graphruns/{_name(run, 'run')}/output/{task}/",
        params=_output_params(namespace, source, offset))
    return page


def page_end(page: Mapping[str, Any]) -> int:
    """The byte offset after a page of the operator's output route (its `next_offset`, or at the end of the
    output, its start plus the bytes of its text)."""
    if page.get("next_offset") is not None:
        return int(page["next_offset"])
    return int(page.get("offset") or 0) + len(str(page.get("output") or "").encode("utf-8"))


async def output(call: ConsoleCall) -> Any:
    """One page of a GraphRun instance's whole output (the operator API's answer, as it gives it)."""
    offset = call.query.get("offset", "0")
    if not offset.isdigit():
        raise ConsoleError(400, f"offset: a byte offset, not {offset!r}")
    return await _page(call, call.params["namespace"], call.params["name"], call.query, int(offset))


async def transfers(call: ConsoleCall) -> Any:
    """A ServiceInstance's lifecycle transfers that ran an action: the ActionRuns of its App."""
    namespace = _name(call.params["namespace"], "namespace")
    instance = await call.kube.request("GET", custom_path("serviceinstances", namespace,
                                                          _name(call.params["name"], "name")))
    runs = await call.kube.request("GET", custom_path("actionruns", namespace))
    return transfer_runs(instance, runs.get("items") or [])


async def _instance_live(call: ConsoleCall, namespace: str, run: str, source: Mapping[str, Any]) -> bool:
    """Whether the instance may still print: the run is not over and the instance has not finished."""
    found = await _get(call, "graphruns", namespace, run)
    status = found.get("status") or {}
    if status.get("state") in FINAL:
        return False
    node = str(source.get("node") or "")
    for entry in status.get("nodes") or []:
        if str(entry.get("name") or "") == node:
            for item in entry.get("tasks") or []:
                if item.get("task") == source.get("task"):
                    return item.get("state") in LIVE_TASK_STATES
    return True  # not listed (yet, or omitted): the run goes on


async def output_topic(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                       ) -> AsyncIterator[tuple[str, Any]]:
    """The `output` topic: a GraphRun instance's output from byte `position` on, as it grows."""
    namespace, run = str(params.get("namespace") or ""), str(params.get("run") or "")
    offset = int(position) if position and position.isdigit() else 0
    checked, live = 0.0, True
    loop = asyncio.get_running_loop()
    while True:
        page = await _page(call, namespace, run, params, offset)
        end = page_end(page)
        if end > offset:
            yield str(end), {"offset": offset, "text": page.get("output") or "", "size": page.get("size")}
            offset = end
            if page.get("next_offset") is not None:
                continue  # a long output: the next page at once
        elif not live:
            return
        if loop.time() - checked >= STATE_CHECK_SECONDS:
            checked = loop.time()
            live = await _instance_live(call, namespace, run, params)
            if not live:
                continue  # one more read: what it printed before it ended
        await asyncio.sleep(OUTPUT_POLL_SECONDS)


RUNS = "/console/api/runs"
ROUTES = (
    ConsoleRoute("GET", RUNS + "/serviceinstances/{namespace}/{name}", transfers),
    ConsoleRoute("GET", RUNS + "/graphruns/{namespace}/{name}/dag", dag),
    ConsoleRoute("GET", RUNS + "/graphruns/{namespace}/{name}/output", output),
    ConsoleRoute("GET", RUNS + "/{plural}/{namespace}/{name}", view),
)
TOPICS: Mapping[str, TopicSource] = {"output": output_topic}
