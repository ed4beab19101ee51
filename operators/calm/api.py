"""The Calm domain's routes on the operator's API server: an ActionRun's whole task output, read-only.

    GET  /api/v1/actionruns/<run>/output/                                  its instances: step, task, target, bytes
    GET  /api/v1/actionruns/<run>/output/<step>/?target=T&offset=&limit=   one page of an instance's output

The runner appends each instance's output, masked line by line, to `RunPaths(state_dir, uid).output_file(key)`
as the task prints (`pipelines.paths`); the ActionRun's status keeps a tail of it only, and only once the
task ended. These routes serve the whole of it, while it grows, a bounded page at a time
(`pipelines.pages`, the same reader and page shape as a GraphRun's output route), so that a console can
follow a running task by byte offset.

Authorization is the GraphRun output route's: a SubjectAccessReview of the caller for `get actionruns` in the
namespace (`?namespace=`, default the server's) for that run's name, then the run is read with the operator's
credentials. A step and target are served only if the run's `status.runLog` lists that instance, they are
runner names (`pipelines.model.check_name`), and the file they name resolves inside the run's output
directory; so nothing a URL says is followed out of the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.calm.models import ACTIONRUN
from operators.runtime import (
    ApiError,
    ApiProblem,
    Call,
    ExtensionBase,
    Operation,
    Response,
    Route,
    RouteTable,
    bad_request,
    custom_path,
    json_response,
    not_found,
    object_name_ok,
    passed_on,
)
from pipelines.model import Instance, check_name
from pipelines.pages import PAGE_BYTES, instance_output, output_size, read_page
from pipelines.paths import RunPaths

PREFIX = "/api/v1"


@dataclass(frozen=True)
class RunInstance:
    """One task of an ActionRun on one target ("" for a task that runs on no replica)."""

    step: str
    task: str
    target: str

    @property
    def key(self) -> str:
        """The runner's name for the instance (its output file is `output/<key>.log`)."""
        return Instance(self.step, self.target).key


def run_instances(status: Mapping[str, Any]) -> list[RunInstance]:
    """The instances an ActionRun's `status.runLog` lists (a task not reached yet has none), in its order."""
    found = []
    for task in status.get("runLog") or []:
        step = str(task.get("step") or "")
        for replica in task.get("replicas") or []:
            found.append(RunInstance(step, str(task.get("task") or step), str(replica.get("target") or "")))
    return found


def output_file(paths: RunPaths, instance: RunInstance) -> Path:
    """Where the runner wrote the instance's output (`pipelines.pages.instance_output`: inside the run's output
    directory, ValueError otherwise)."""
    return instance_output(paths, instance.step, instance.target)


class CalmApi(ExtensionBase):
    """The handlers, over the API server's client (the operator's credentials) and the authenticator that
    checks each caller."""

    resource = ACTIONRUN.plural

    def declared(self) -> RouteTable:
        return ROUTES

    async def _read(self, path: str) -> Any:
        try:
            return await self.kube.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            passed_on(error, f"GET {path}", "actionrun")

    async def _run(self, call: Call) -> tuple[str, str, RunPaths, list[RunInstance]]:
        """(namespace, run, its files, its instances) for a caller who may get the ActionRun; 404 naming the
        run when it does not exist, 503 when this server does not have the runs' files."""
        namespace = self.namespace(call)
        run = call.params["run"]
        if not object_name_ok(run):
            bad_request(f"path: {run!r} is not an ActionRun's name")
        await self.authorize(call, "get", namespace, run)
        found = await self._read(custom_path(ACTIONRUN.plural, namespace, run))
        if found is None:
            listed = await self._read(custom_path(ACTIONRUN.plural, namespace)) or {}
            names = sorted(str(i["metadata"]["name"]) for i in listed.get("items") or [])
            shown = ", ".join(names[-10:]) or "none"
            not_found("actionrun", f'action run "{run}" not found in namespace "{namespace}" (runs here: {shown})')
        state_dir = self.settings.runs_state_dir
        if state_dir is None:
            raise ApiProblem(503, "ServiceUnavailable", "this server was started without the runs' state directory "
                                                        "(stead operator serves it): runs' output cannot be read here")
        paths = RunPaths(state_dir, str(found["metadata"]["uid"]))
        return namespace, run, paths, run_instances(found.get("status") or {})

    @staticmethod
    def _name(value: str, what: str) -> str:
        try:
            return check_name(value, what)
        except ValueError as error:
            bad_request(f"{what}: {error}")

    async def outputs(self, call: Call) -> Response:
        """The run's instances and how many bytes of output each has stored."""
        namespace, run, paths, found = await self._run(call)

        def sizes() -> list[dict[str, Any]]:
            return [{"step": i.step, "task": i.task, "target": i.target or None,
                     "bytes": output_size(output_file(paths, i))} for i in found]

        try:
            listed = await asyncio.to_thread(sizes)
        except ValueError as error:  # a status naming no runner instance: not followed anywhere
            raise ApiProblem(500, "Internal", f"action run {run}: {error}") from None
        return json_response({"run": run, "namespace": namespace, "instances": listed})

    async def output(self, call: Call) -> Response:
        """One instance's output from `?offset=` (default 0), at most `?limit=` bytes (default and at most
        `PAGE_BYTES`): `{run, namespace, step, target, size, offset, next_offset, truncated, output}`."""
        namespace, run, paths, found = await self._run(call)
        step = self._name(call.params["step"], "step")
        target = call.query.get("target") or ""
        if target:
            self._name(target, "query parameter target")
        offset = _count(call, "offset", 0) or 0
        limit = _count(call, "limit", 1) or PAGE_BYTES
        if limit > PAGE_BYTES:
            bad_request(f"query parameter limit: expected a whole number from 1 to {PAGE_BYTES}, got {limit}")
        instance = _find(found, run, step, target)
        try:
            path = output_file(paths, instance)
        except ValueError as error:
            raise ApiProblem(500, "Internal", f"action run {run}: {error}") from None
        page = await asyncio.to_thread(read_page, path, offset, limit)
        end = page.next_offset if page.next_offset is not None else page.size
        body: dict[str, Any] = {
            "run": run, "namespace": namespace, "step": step, "task": instance.task, "target": target or None,
            "size": page.size, "offset": page.offset, "next_offset": page.next_offset, "truncated": page.truncated,
            "output": page.text}
        if page.truncated:
            body["message"] = (f"truncated at {end - page.offset} bytes (bytes {page.offset}-{end} of {page.size}): "
                               f"ask again with offset={end}")
        return json_response(body)


def _count(call: Call, name: str, least: int) -> int | None:
    raw = call.query.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < least:
        bad_request(f"query parameter {name}: expected a whole number from {least}, got {raw!r}")
    return int(raw)


def _find(found: Sequence[RunInstance], run: str, step: str, target: str) -> RunInstance:
    """The instance of `step` on `target` the run lists: 404 naming what is missing and what there is; a step
    on several targets needs one named (400)."""
    of_step = [i for i in found if i.step == step]
    if not of_step:
        steps = sorted({i.step for i in found})
        shown = ", ".join(steps[:20]) + (f" and {len(steps) - 20} more" if len(steps) > 20 else "")
        not_found("step", f"action run {run} has no instance of step {step!r} (its steps: {shown or 'none yet'})")
    if not target and len(of_step) > 1:
        bad_request(f"step {step!r} of action run {run} runs on {len(of_step)} targets: name one with target= "
                    f"({', '.join(i.target for i in of_step)})")
    chosen = [i for i in of_step if i.target == target] if target else of_step
    if not chosen:
        targets = ", ".join(i.target or "(none)" for i in of_step)
        not_found("target", f"step {step!r} of action run {run} does not run on target {target!r} "
                            f"(its targets: {targets})")
    return chosen[0]


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"type": "object"}}}}


_COMMON = {"401": _error("No valid credentials."), "403": _error("Not permitted by RBAC (get actionruns)."),
           "503": _error("No runs' state directory here, or the Kubernetes API server is unreachable.")}
_RUN = {"name": "run", "in": "path", "required": True, "schema": {"type": "string"}, "description": "The ActionRun."}
_NS = {"name": "namespace", "in": "query", "required": False, "schema": {"type": "string"},
       "description": "The Kubernetes namespace (default: the server's)."}
_PAGE = {"type": "object", "properties": {
    "run": {"type": "string"}, "namespace": {"type": "string"}, "step": {"type": "string"},
    "task": {"type": "string"}, "target": {"type": "string", "nullable": True}, "size": {"type": "integer"},
    "offset": {"type": "integer"}, "next_offset": {"type": "integer", "nullable": True},
    "truncated": {"type": "boolean"}, "output": {"type": "string"}, "message": {"type": "string"}}}
_INSTANCES = {"type": "object", "properties": {
    "run": {"type": "string"}, "namespace": {"type": "string"}, "instances": {"type": "array", "items": {
        "type": "object", "properties": {"step": {"type": "string"}, "task": {"type": "string"},
                                         "target": {"type": "string", "nullable": True},
                                         "bytes": {"type": "integer"}}}}}}
ROUTES = RouteTable((
    Route(PREFIX + "/actionruns/{run}/output/", {"GET": Operation(
        CalmApi.outputs, "an ActionRun's task instances and their output sizes", {
            "summary": "An ActionRun's task instances (from its runLog) and the bytes of output each stored.",
            "responses": {"200": {"description": "The instances.", "content": {"application/json": {
                "schema": _INSTANCES}}}, "404": _error("No such run."), **_COMMON}})},
          parameters=[_RUN, _NS]),
    Route(PREFIX + "/actionruns/{run}/output/{step}/", {"GET": Operation(
        CalmApi.output, "an ActionRun task instance's whole output (?target), a page at a time (?offset, ?limit)", {
            "summary": "An ActionRun task instance's whole output, masked as stored, a page at a time.",
            "responses": {"200": {"description": "A page: next_offset is where the next starts (null: the end).",
                                  "content": {"application/json": {"schema": _PAGE}}},
                          "400": _error("A malformed name or number, or a step on several targets with none named."),
                          "404": _error("No such run, step or target (see notFound; the message says what there "
                                        "is)."), **_COMMON}})},
          parameters=[_RUN, {"name": "step", "in": "path", "required": True, "schema": {"type": "string"},
                             "description": "The task's step id (runLog[].step)."}, _NS,
                      {"name": "target", "in": "query", "required": False, "schema": {"type": "string"},
                       "description": "The replica (runLog[].replicas[].target); needed when the step has several."},
                      {"name": "offset", "in": "query", "required": False,
                       "schema": {"type": "integer", "minimum": 0}, "description": "The first byte (default 0)."},
                      {"name": "limit", "in": "query", "required": False,
                       "schema": {"type": "integer", "minimum": 1, "maximum": PAGE_BYTES},
                       "description": f"At most this many bytes (default and most: {PAGE_BYTES})."}]),
))
"""The Calm domain's routes, declared once (`operators.runtime.api.routes`)."""
