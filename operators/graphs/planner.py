"""A GraphRun's plan, made in a process of its own under CPU, memory and wall limits.

Planning evaluates what tenants wrote: yaql conditions over every node, `/regex/` task and role
references, subgraph `start` and `end`. yaql checks its time budget only between its own steps,
and one Python call (a regex, a string operation on large data) can run for minutes; done in the
operator's event loop, that froze every tenant's reconciliation, the admission webhooks and
`/healthz`. So the operator never plans in its own process: `plan_in_process` starts
``python -m operators.graphs.planner`` with a scrubbed environment, hands it the plan's input on
stdin, and waits for it without blocking the loop. The child sets its own limits before it reads a
byte of the input (`PlanLimits`: RLIMIT_CPU, RLIMIT_AS) and the parent kills it at the wall
deadline, so planning ends, one way or the other, within `PlanLimits.wall_seconds`.

Inside the limits, the plan says clearly what is too much (`operators.graphs.expansion` bounds
instances and dependencies, `operators.graphs.plan` bounds condition evaluations and their total
time); the limits are the backstop for what those counts cannot foresee.

The child writes the plan file (workflow, index, nodes' data: `operators.graphs.output.PLAN_FILE`)
itself and prints only the status facts, so the operator never parses a large plan in its loop.
At most `MAX_PLANNERS` run at once in one operator; the others wait (without blocking the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import sys
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_PLANNERS = 2
STATUS_INSTANCES = 2000
"""Task instances listed in a GraphRun's status (an object must stay small whatever the graph)."""
STATUS_NOOP_RESOURCES = 5
"""Resources a noop instance lists in status (all of them, up to 50, in `stead graph history`)."""
STATUS_NOOP_CHARS = 64 * 1024
"""Characters of resource names a run's status lists in all; past them, counts only."""


@dataclass(frozen=True)
class PlanLimits:
    """What one plan may use. The CPU bound is far above what a large plan needs (200 tasks over 100
    nodes, 20,000 instances, plan and workflow: about 2 s of CPU, `bench/graph_plan.py`); it bounds
    what a hostile one costs. The wall bound applies to the planning itself, not to the Secret read
    between the plan and its file."""

    cpu_seconds: int = 30
    wall_seconds: float = 60.0
    memory_bytes: int = 2 << 30


class PlanFailed(Exception):
    """The plan could not be made: the problems (naming tasks, nodes and fields, never data values),
    or the limit the planner hit."""

    def __init__(self, message: str, *, reason: str = "PlanFailed") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


# --- the child ------------------------------------------------------------------------------------


def instances_status(index: Mapping[str, Sequence[str]], records: Mapping[str, Mapping[str, Any]],
                     planned: Mapping[str, Mapping[str, Any]], output_tail: int
                     ) -> tuple[list[dict[str, Any]], int]:
    """Per node, per task: the plan's state, then the run's record over it; at most
    `STATUS_INSTANCES` listed, the rest counted."""
    from operators.runtime import utc_seconds

    nodes: dict[str, list[dict[str, Any]]] = {}
    shown = omitted = 0
    budget = STATUS_NOOP_CHARS
    for sid, (task, node) in index.items():
        if shown >= STATUS_INSTANCES:
            omitted += 1
            continue
        item = dict(planned.get(sid) or {"task": task, "state": "planned"})
        record = records.get(sid)
        if record is not None and item["state"] == "planned":
            item["state"] = record.get("state") or "pending"
            for src, dst in (("startedAt", "started"), ("finishedAt", "finished")):
                if record.get(src):
                    item[dst] = utc_seconds(str(record[src]))
            item["attempts"] = int(record.get("attempts") or 0)
            if item["state"] == "failure":
                item["reason"] = str(record.get("message") or "failed")[:4096]
                output = str(record.get("output") or "")
                if output:
                    item["output"] = output[-output_tail:]
            noop = (record.get("details") or {}).get("noop")
            if isinstance(noop, Mapping):
                count = int(noop.get("wouldChange") or 0)
                listed = []
                for resource in [str(r)[:512] for r in noop.get("resources") or []][:STATUS_NOOP_RESOURCES]:
                    if len(resource) > budget:
                        break
                    budget -= len(resource)
                    listed.append(resource)
                item["noop"] = {"wouldChange": count, "resources": listed, "more": max(0, count - len(listed))}
        nodes.setdefault(node, []).append(item)
        shown += 1
    return [{"name": name, "tasks": tasks} for name, tasks in sorted(nodes.items())], omitted


def make_plan_document(payload: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the plan file's content, the status facts) from the plan's input: `spec` (a GraphRunSpec),
    `merged` (graph type -> merged tasks), `nodes`, `nodeData`, `lastData`, `name`,
    `privateKeyRef` (the known host keys are set once the plan holds: `main`). Raises `PlanFailed`
    with every problem. Pure: what the child runs."""
    from operators.graphs.conditions import ConditionError
    from operators.graphs.expansion import GraphError
    from operators.graphs.merge import MergeError
    from operators.graphs.models import MAX_OUTSIDE_EDGES, OUTPUT_TAIL, GraphRunSpec, Task
    from operators.graphs.plan import PlanError, plan_run, step_id
    from operators.graphs.workflow import to_workflow

    spec = GraphRunSpec.model_validate(dict(payload["spec"]))
    merged = {t: [Task.model_validate(dict(task)) for task in tasks] for t, tasks in payload["merged"].items()}
    data = payload.get("nodeData") or {}
    try:
        the_plan = plan_run(spec, merged, payload["nodes"], node_data=data, last_data=payload.get("lastData"))
        workflow = to_workflow(the_plan, known_hosts="",
                               private_key_ref=str(payload["privateKeyRef"]), name=str(payload.get("name") or ""))
    except (MergeError, GraphError, PlanError, ConditionError) as error:
        # masked here, in the limited process: masking thousands of values takes seconds (and masked
        # before it is cut, so that no part of a value is left at the cut)
        raise PlanFailed(mask_values(str(error), data)[:4096]) from None
    index: dict[str, list[str]] = {}
    planned: dict[str, dict[str, Any]] = {}
    prefix_of = {g.graph_type: g.prefix for g in the_plan.graphs}
    for inst in the_plan.in_order():  # the status lists each node's tasks in the order they run
        sid = step_id(prefix_of[inst.graph_type], inst.task, inst.node)
        index[sid] = [inst.task, inst.node]
        item: dict[str, Any] = {"task": inst.task, "state": inst.state}
        if inst.reason:
            item["reason"] = inst.reason
        planned[sid] = item
    nodes_status, omitted = instances_status(index, {}, planned, OUTPUT_TAIL)
    runs = sum(1 for item in planned.values() if item["state"] == "planned")
    edges = [{"type": e.graph_type, "dependent": e.dependent, "dependency": e.dependency}
             for e in the_plan.outside_edges[:MAX_OUTSIDE_EDGES]]
    summary = {**the_plan.summary(), "outsideEdges": edges or None}
    facts: dict[str, Any] = {"plan": summary, "nodes": nodes_status, "omitted": omitted or None,
                             "progress": f"0/{runs}"}
    if spec.dry_run:  # nothing runs: the plan is what it made (`0/3` beside Succeeded read as a run that did nothing)
        from operators.runtime import utc_now

        facts.update({"state": "Succeeded", "endTime": utc_now(), "reason": None,
                      "progress": dry_run_progress(runs)})
    document = {"facts": facts, "index": index, "planned": planned, "nodeData": data,
                "workflow": workflow.model_dump(by_alias=True, mode="json")}
    return document, facts


def dry_run_progress(planned: int) -> str:
    """The progress of a dry run, which runs nothing: how many task instances it planned."""
    return f"{planned} planned (dry run)"


def mask_values(text: str, node_data: Mapping[str, Mapping[str, Any]]) -> str:
    """`text` with every string of the nodes' configuration masked (`pipelines.masking`, all its
    encodings): a second line of defence behind messages that never quote values. The configuration
    comes from ConfigValues, which `view` may not read; a GraphRun's status is shown to `view`. The
    nodes' own names and roles (`node`, `nodes`: the Environment's, visible to `view`) stay readable."""
    from pipelines.masking import Masker

    values: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            values.add(value)
        elif isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for data in node_data.values():
        for key, value in data.items():
            if key not in ("node", "nodes"):
                walk(value)
    return Masker(values).mask(text) if values else text


def _limit(limits: PlanLimits) -> None:
    """The child's own limits, set before it reads its input: SIGXCPU at the CPU bound (SIGKILL a
    second later), MemoryError past the address-space bound, no core dump (it would hold the data), and
    first in line for the kernel's OOM killer."""
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # In a Pod's memory limit (the chart's: 512 MiB, shared with the operator), the kernel kills a planner
    # before the operator: raising one's own oom_score_adj needs no privilege.
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m operators.graphs.planner PLAN_FILE CPU_SECONDS MEMORY_BYTES``. Reads the input (one
    JSON line), answers one JSON line (`{"facts"}`, or `{"error", "reason"}` and exits); then reads the
    workflow's variables (one JSON line: what the operator reads only once the plan holds, the known
    host keys), writes the plan to PLAN_FILE and answers `{"written": true}`."""
    plan_file, cpu, memory = (argv if argv is not None else sys.argv[1:])
    _limit(PlanLimits(cpu_seconds=int(cpu), memory_bytes=int(memory)))
    try:
        document, facts = make_plan_document(json.loads(sys.stdin.readline()))
        answer: dict[str, Any] = {"facts": facts}
    except PlanFailed as failed:
        answer = {"error": failed.message, "reason": failed.reason}
    except MemoryError:
        answer = {"error": f"planning needs more than {int(memory) >> 20} MiB of memory: the graphs are too large "
                  "for the environment's nodes (fewer tasks, nodes or cross dependencies)", "reason": "PlanTooLarge"}
    _answer(answer)
    if "error" in answer:
        return 0
    line = sys.stdin.readline()
    if not line:
        return 0  # the operator went away: nothing written
    document["workflow"].setdefault("variables", {}).update(json.loads(line))
    path = Path(plan_file)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document))
    tmp.replace(path)
    _answer({"written": True})
    return 0


def _answer(answer: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


# --- the parent -----------------------------------------------------------------------------------

_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _semaphore() -> asyncio.Semaphore:
    """The event loop's planner slots (`MAX_PLANNERS`)."""
    loop = asyncio.get_running_loop()
    found = _slots.get(loop)
    if found is None:
        found = _slots[loop] = asyncio.Semaphore(MAX_PLANNERS)
    return found


def planner_environment(cwd: Path) -> dict[str, str]:
    """What a planner inherits: what a runner does (no kubeconfig, no token, no operator setting)."""
    from pipelines.control import SAFE_ENV

    env = {k: v for k in SAFE_ENV if (v := os.environ.get(k)) is not None}
    env["HOME"] = str(cwd)
    return env


async def plan_in_process(payload: Mapping[str, Any], plan_file: Path,
                          variables: Callable[[], Awaitable[Mapping[str, str]]],
                          limits: PlanLimits = PlanLimits()) -> dict[str, Any]:
    """The status facts of the plan, made by a planner process (see the module); the plan is in
    `plan_file`, its workflow with the `variables` read once the plan holds (a plan that fails never
    reads them). Raises `PlanFailed` with the problems, or with the limit the planner hit; what
    `variables` raises, after the planner is stopped."""
    async with _semaphore():
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "operators.graphs.planner", str(plan_file), str(limits.cpu_seconds),
            str(limits.memory_bytes), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, env=planner_environment(plan_file.parent),
            cwd=str(plan_file.parent), start_new_session=True, limit=1 << 24,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(payload).encode() + b"\n")
            await process.stdin.drain()
            answer = await _read(process, limits)
            if "error" in answer:
                raise PlanFailed(str(answer["error"]), reason=str(answer.get("reason") or "PlanFailed"))
            process.stdin.write(json.dumps(dict(await variables())).encode() + b"\n")
            await process.stdin.drain()
            process.stdin.close()
            if not (await _read(process, limits)).get("written"):
                raise PlanFailed("the planner did not write the plan", reason="PlannerFailed")
        except (BrokenPipeError, ConnectionResetError):
            raise PlanFailed(_ended(process.returncode, limits), reason="PlanTooCostly") from None
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            await process.wait()
    facts: dict[str, Any] = answer["facts"]
    return facts


async def _read(process: asyncio.subprocess.Process, limits: PlanLimits) -> dict[str, Any]:
    """The planner's next answer, within the wall limit."""
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), limits.wall_seconds)
    except TimeoutError:
        raise PlanFailed(f"planning took longer than {limits.wall_seconds:g}s (the planner's wall limit) and was "
                         "stopped: the graphs' conditions or size are too costly", reason="PlanTooCostly") from None
    try:
        answer: dict[str, Any] = json.loads(line)
    except ValueError:
        returncode = await process.wait()
        raise PlanFailed(_ended(returncode, limits), reason="PlanTooCostly" if returncode in (
            -signal.SIGXCPU, -signal.SIGKILL) else "PlannerFailed") from None
    return answer


def _ended(returncode: int | None, limits: PlanLimits) -> str:
    """Why a planner ended without answering (its stderr is not read: a traceback may quote the data)."""
    if returncode == -signal.SIGXCPU:
        return (f"planning used more than {limits.cpu_seconds}s of CPU (the planner's limit) and was stopped: the "
                "graphs' conditions or size are too costly")
    if returncode == -signal.SIGKILL:
        return (f"the planner was killed: past its CPU limit ({limits.cpu_seconds}s) or out of memory; the graphs' "
                "conditions or size are too costly")
    return f"the planner failed (exit code {returncode})"


if __name__ == "__main__":
    sys.exit(main())
