"""The console's run view (ActionRuns, GraphRuns, a ServiceInstance's lifecycle transfers): its routes and
its stream topics. Thin: the shaping is `runs_shape` and `gantt`, pure and unit-tested.

Routes (under /console/api/runs/, every read as the signed-in user):

    GET  runs/{plural}/{namespace}/{name}                 the run view (plural: actionruns or graphruns)
    GET  runs/graphruns/{namespace}/{name}/dag            the run's tasks as a DAG, laid out
    GET  runs/{plural}/{namespace}/{name}/output          one page of an instance's whole output
                                                          (GraphRuns: ?task, ?node, ?type; ActionRuns:
                                                          ?step, ?target; both: ?offset)
    GET  runs/serviceinstances/{namespace}/{name}         the instance's transfers: its App's ActionRuns

The page follows the run with the object page's own `object` topic (each change asks for the view again),
and adds one topic of its own to the page's multiplexed stream:

- `output` {namespace, run, plural?, ...}: a task instance's output as it grows (position: the byte offset
  read so far, so a reconnect resumes without repeating a line). A GraphRun's instance (`plural`
  graphruns, the default) is named by {task, node?, type?}, an ActionRun's (`plural` actionruns) by
  {step, target?}. It reads the operator API's output route for that kind as the user
  (`/api/v1/graphruns/<run>/output/<task>/`, `/api/v1/actionruns/<run>/output/<step>/`), every
  `OUTPUT_POLL_SECONDS` while the instance may still print, and ends (the stream's `end` event) once it
  finished and everything it printed was sent: the same topic shows the whole output after the run.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from operators.console.views.gantt import MAX_DAG_TASKS, dag_layout, task_edges
from operators.console.views.runs_shape import FINAL, LIVE_TASK_STATES, run_view, transfer_runs
from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute, TopicSource
from operators.runtime import ApiError, custom_path, object_name_ok
from pipelines.model import NAME_PATTERN

PLURALS = ("actionruns", "graphruns")
GRAPHS_API = "/api/v1"
"""The operator's deployment graphs API (docs/graphs.md), on its API server (`call.stead`)."""
OUTPUT_POLL_SECONDS = 0.5
"""How often a live instance's output is read (the stream latency it adds is half of this, on average)."""
STATE_CHECK_SECONDS = 2.0
"""How often the `output` topic looks whether the instance is still running, while it prints nothing."""
TASK = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,119}$")
"""A task id (a DeploymentGraph's task id pattern): what may go into the operator API's path."""
STEP = re.compile(NAME_PATTERN)
"""An ActionRun's step id or target (the runner's names, `pipelines.model`): what may go into its output route."""


def _now() -> datetime:
    return datetime.now(UTC)


def _plural(call: ConsoleCall) -> str:
    plural = call.params["plural"]
    if plural not in PLURALS:
        raise ConsoleError(404, f"runs: {plural!r} is not a kind of run ({', '.join(PLURALS)})")
    return plural


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not object_name_ok(value):
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
                "GET", f"{GRAPHS_API}/clusters/{quote(environment, safe='')}/deployment_tasks/",
                params={"namespace": namespace, "graph_type": str(graph.get("type") or "default")})
        except ApiError as error:
            return {"available": False, "reason": f"the graph {graph.get('type')!r}: {error.message}"}
        edges.update(task_edges(tasks if isinstance(tasks, list) else [], present))
    return {"available": True, **dag_layout(present, sorted(edges))}


def _output_plural(source: Mapping[str, Any]) -> str:
    plural = source.get("plural") or "graphruns"
    if plural not in PLURALS:
        raise ConsoleError(400, f"plural: {str(plural)[:64]!r} is not a kind of run ({', '.join(PLURALS)})")
    return str(plural)


async def _page(call: ConsoleCall, namespace: str, run: str, source: Mapping[str, Any], offset: int
                ) -> dict[str, Any]:
    """One page of the instance's output from the operator's API (its route for the run's kind), as the
    user; every name that goes into its path or query is checked first."""
    plural = _output_plural(source)
    params = {"namespace": _name(namespace, "namespace"), "offset": str(offset)}
    if plural == "actionruns":
        step, target = source.get("step"), source.get("target")
        if not isinstance(step, str) or not STEP.match(step):
            raise ConsoleError(400, f"step: {str(step)[:64]!r} is not a step id")
        if target:
            if not isinstance(target, str) or not STEP.match(target):
                raise ConsoleError(400, f"target: {str(target)[:64]!r} is not a target's name")
            params["target"] = target
        path = f"{GRAPHS_API}/actionruns/{_name(run, 'run')}/output/{step}/"
    else:
        task = source.get("task")
        if not isinstance(task, str) or not TASK.match(task):
            raise ConsoleError(400, f"task: {str(task)[:64]!r} is not a task id")
        for key in ("node", "type"):
            if source.get(key):
                params[key] = str(source[key])
        path = f"{GRAPHS_API}/graphruns/{_name(run, 'run')}/output/{task}/"
    page: dict[str, Any] = await call.needs_stead().request("GET", path, params=params)
    return page


def page_end(page: Mapping[str, Any]) -> int:
    """The byte offset after a page of the operator's output route (its `next_offset`, or at the end of the
    output, its start plus the bytes of its text)."""
    if page.get("next_offset") is not None:
        return int(page["next_offset"])
    return int(page.get("offset") or 0) + len(str(page.get("output") or "").encode("utf-8"))


async def output(call: ConsoleCall) -> Any:
    """One page of an instance's whole output (the operator API's answer, as it gives it)."""
    offset = call.query.get("offset", "0")
    if not offset.isdigit():
        raise ConsoleError(400, f"offset: a byte offset, not {offset!r}")
    source = {**call.query, "plural": _plural(call)}
    return await _page(call, call.params["namespace"], call.params["name"], source, int(offset))


async def transfers(call: ConsoleCall) -> Any:
    """A ServiceInstance's lifecycle transfers that ran an action: the ActionRuns of its App."""
    namespace = _name(call.params["namespace"], "namespace")
    instance = await call.kube.request("GET", custom_path("serviceinstances", namespace,
                                                          _name(call.params["name"], "name")))
    runs = await call.kube.request("GET", custom_path("actionruns", namespace))
    return transfer_runs(instance, runs.get("items") or [])


async def _instance_live(call: ConsoleCall, namespace: str, run: str, source: Mapping[str, Any]) -> bool:
    """Whether the instance may still print: the run is not over and the instance has not finished."""
    plural = _output_plural(source)
    found = await _get(call, plural, namespace, run)
    status = found.get("status") or {}
    if status.get("state") in FINAL:
        return False
    if plural == "actionruns":
        target = str(source.get("target") or "")
        for task in status.get("runLog") or []:
            if task.get("step") == source.get("step"):
                for replica in task.get("replicas") or []:
                    if str(replica.get("target") or "") == target:
                        return replica.get("state") in LIVE_TASK_STATES
        return True  # not listed yet: the run goes on
    node = str(source.get("node") or "")
    for entry in status.get("nodes") or []:
        if str(entry.get("name") or "") == node:
            for item in entry.get("tasks") or []:
                if item.get("task") == source.get("task"):
                    return item.get("state") in LIVE_TASK_STATES
    return True  # not listed (yet, or omitted): the run goes on


async def output_topic(call: ConsoleCall, params: Mapping[str, Any], position: str | None
                       ) -> AsyncIterator[tuple[str, Any]]:
    """The `output` topic: a run's task instance's output from byte `position` on, as it grows."""
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
    ConsoleRoute("GET", RUNS + "/{plural}/{namespace}/{name}/output", output),
    ConsoleRoute("GET", RUNS + "/{plural}/{namespace}/{name}", view),
)
TOPICS: Mapping[str, TopicSource] = {"output": output_topic}
