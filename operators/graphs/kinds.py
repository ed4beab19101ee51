"""The two kinds of deployment graphs, as the operator serves them (docs/graphs.md).

| kind | phases |
|---|---|
| DeploymentGraph (`dg`) | `Init -> Provisioned` (checked: tasks, references, conditions; one per owner and type) |
| GraphRun (`gr`) | `Init -> Planning -> Running -> Provisioned` (see `operators.graphs.run`) |

And the part of the Environment kind that is the graphs' (`with_merged_graphs`): an Environment keeps its
merged graphs (`operators.graphs.kept`). The environment domain sits below this one and knows nothing of
graphs; the catalog of kinds composes the two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from operators.environment.models import EnvironmentSpec, EnvironmentStatus
from operators.graphs import run
from operators.graphs.kept import MergedGraphStore, SourceGraph, merge_environment, status_facts
from operators.graphs.models import (
    DEPLOYMENT_GRAPH,
    GRAPH_RUN,
    DeploymentGraphSpec,
    GraphRunSpec,
    GraphRunStatus,
    check_graph,
    check_run,
)
from operators.runtime import (
    KIND_CONDITIONS,
    AdmissionRequest,
    Kind,
    Model,
    Objects,
    PermanentError,
    Pipeline,
    PrinterColumn,
    Refusal,
    Requester,
    StatusBase,
    StepContext,
    StepFn,
    object_key,
    run_pipeline,
    spec_admission,
    spec_step,
)


class DeploymentGraphStatus(StatusBase):
    """Written by Stead."""

    owner: str | None = Field(None, description="What the graph belongs to: release/NAME, plugin/NAME or "
                              "environment/NAME.")
    task_count: int | None = Field(None, description="How many tasks the graph has.")
    type: str | None = Field(None, description="The graph's type, `default` when spec.type is not given (the "
                             "TYPE column: a default is not written into the spec).")


def _owner(spec: DeploymentGraphSpec) -> str:
    kind, name = spec.owner
    return f"{kind}/{name}"


async def _same_owner_and_type(kube: Requester, namespace: str, name: str, spec: DeploymentGraphSpec) -> list[str]:
    """The other graphs of the namespace with the same owner and type, oldest first."""
    found = []
    for item in await Objects(kube).list(DEPLOYMENT_GRAPH, namespace):
        other = item.get("spec") or {}
        owner = next(((k, other[k]) for k in ("release", "plugin", "environment") if other.get(k)), None)
        if item["metadata"]["name"] != name and owner == spec.owner and other.get("type", "default") == spec.type:
            found.append((str(item["metadata"].get("creationTimestamp") or ""), str(item["metadata"]["name"])))
    return [n for _, n in sorted(found)]


@spec_step(DeploymentGraphSpec)
async def check(ctx: StepContext[DeploymentGraphSpec]) -> Mapping[str, Any]:
    """Init -> Provisioned: the checks of the webhook again, and one graph per owner and type (the older
    one stands: this one is Stalled saying which)."""
    problems = check_graph(ctx.obj.spec)
    if problems:
        raise PermanentError("InvalidSpec", "; ".join(problems))
    spec = ctx.spec
    facts = {"owner": _owner(spec), "taskCount": len(spec.tasks), "type": spec.type}
    others = await _same_owner_and_type(ctx.services.kube, ctx.obj.namespace, ctx.obj.name, spec)
    if others and others[0] != ctx.obj.name:
        raise PermanentError("DuplicateGraph", f"DeploymentGraph {others[0]} is the {spec.type!r} graph of "
                             f"{_owner(spec)} already: one graph per owner and type", facts=facts)
    return facts


@spec_admission(DeploymentGraphSpec)
async def graph_admission(request: AdmissionRequest[DeploymentGraphSpec]) -> None:
    """A second graph for the same owner and type is refused (409, naming the first)."""
    if request.services is None or request.operation not in ("CREATE", "UPDATE"):
        return
    spec = request.parsed
    others = await _same_owner_and_type(request.services.kube, request.namespace, request.name, spec)
    if others:
        raise Refusal(f"spec: DeploymentGraph {others[0]} is the {spec.type!r} graph of {_owner(spec)} already: "
                      "one graph per owner and type (edit that one)", 409)


DEPLOYMENT_GRAPH_KIND = Kind(
    kind=DEPLOYMENT_GRAPH.kind,
    plural=DEPLOYMENT_GRAPH.plural,
    short_names=("dg",),
    description="A typed graph of deployment tasks (Fuel's task schema) attached to a release, a plugin or an "
    "environment; a GraphRun merges the graphs of its environment per type and runs them on its nodes.",
    spec_model=DeploymentGraphSpec,
    status_model=DeploymentGraphStatus,
    pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": check}),
    columns=(
        PrinterColumn("Type", ".status.type", description="The graph's type (default when not given)."),
        PrinterColumn("Owner", ".status.owner", description="release/NAME, plugin/NAME or environment/NAME."),
        PrinterColumn("Tasks", ".status.taskCount", type="integer", description="How many tasks."),
    ),
    problems=check_graph,
    admission=graph_admission,
)

GRAPH_RUN_KIND = Kind(
    kind=GRAPH_RUN.kind,
    plural=GRAPH_RUN.plural,
    short_names=("gr",),
    description="One execution of the merged deployment graphs of an environment (one or more types, in order) "
    "on its nodes over SSH: the plan, per node and task the state, and the failing task with its reason. Set "
    "spec.abort to stop it.",
    spec_model=GraphRunSpec,
    status_model=GraphRunStatus,
    pipeline=run_pipeline(("Init", "Planning", "Running", "Provisioned"),
                          {"Init": run.validate, "Planning": run.plan, "Running": run.supervise}),
    columns=(
        PrinterColumn("Environment", ".spec.environment", description="The environment."),
        PrinterColumn("State", ".status.state", description="Pending, Planning, Running, Succeeded, Failed, Aborted."),
        PrinterColumn("Progress", ".status.progress",
                      description="Planned task instances succeeded / planned; a dry run: how many it planned."),
        PrinterColumn("Failed", ".status.failedTask", description="The first failed task instance (task@node)."),
        PrinterColumn("Trigger", ".spec.trigger.event", priority=1,
                      description="configChange or deploy_changes: a run Stead created itself (spec.trigger)."),
    ),
    problems=check_run,
    admission=run.admission,
)

KINDS: tuple[Kind, ...] = (DEPLOYMENT_GRAPH_KIND, GRAPH_RUN_KIND)


# --- the Environment's merged graphs -------------------------------------------------------------------


class MergedGraphStatus(Model):
    """One graph type of an environment, merged."""

    type: str = Field(description="The graph type.")
    task_count: int = Field(description="How many tasks the merged graph has (0 when it does not merge).")
    digest: str | None = Field(None, description="A digest of the merged tasks: it changes when the merge does.")
    problem: str | None = Field(None, description="Why the type does not merge: two plugins defining a task, a "
                                "reference to a task no level has, a dependency cycle (naming the tasks).")


class EnvironmentWithGraphsStatus(EnvironmentStatus):
    """Written by Stead."""

    graphs: list[MergedGraphStatus] | None = Field(
        None, description="Each graph type of the environment (of its release, enabled plugins or its own), merged "
        "(release < plugins < environment) and kept in the operator's store, where a GraphRun plans from it.")
    graph_summary: str | None = Field(
        None, description="The merged graphs at a glance: TYPE:TASKS@DIGEST for each type (TYPE:error when it does "
        "not merge; the GraphsMerged condition says why).")


def source_graphs(ctx: StepContext) -> list[SourceGraph]:
    """The Provisioned DeploymentGraphs of the object's namespace, from the local store (no API call)."""
    prefix = object_key(DEPLOYMENT_GRAPH.kind, ctx.obj.namespace, "")
    found = []
    for key, record in ctx.services.store.items(DEPLOYMENT_GRAPH.kind):
        if key.startswith(prefix):
            found.append(SourceGraph(key.removeprefix(prefix), record.generation,
                                     DEPLOYMENT_GRAPH_KIND.parse(record.spec)))
    return found


@spec_step(EnvironmentSpec)
async def keep_merged_graphs(ctx: StepContext[EnvironmentSpec]) -> Mapping[str, Any]:
    """Merge the environment's graphs per type, keep the merges in the store, and say so in its status."""
    spec = ctx.spec
    merges = merge_environment(ctx.obj.name, spec, ctx.obj.generation, source_graphs(ctx))
    MergedGraphStore(ctx.services.store).replace(ctx.obj.namespace, ctx.obj.name, merges)
    facts = status_facts(merges)
    return {"graphs": facts["graphs"], "graphSummary": facts["graphSummary"], KIND_CONDITIONS: [facts["condition"]]}


def with_merged_graphs(kind: Kind) -> Kind:
    """The Environment kind, keeping its merged graphs as well: after its last step, the graphs are merged
    (`keep_merged_graphs`); a DeploymentGraph of its namespace that comes to rest in a new way or goes has
    every Environment of the namespace checked again (a graph's name does not say which environments take
    it; a check reads the local store and writes status only when what it shows changed)."""
    last = kind.pipeline.phases[-2]
    step = kind.pipeline.steps[last]

    async def and_merge(ctx: StepContext) -> Mapping[str, Any]:
        facts = dict(await step(ctx))
        merged = await keep_merged_graphs(ctx)
        conditions = [*(facts.get(KIND_CONDITIONS) or ()), *merged[KIND_CONDITIONS]]
        return {**facts, **merged, KIND_CONDITIONS: conditions}

    steps: dict[str, StepFn] = {**kind.pipeline.steps, last: and_merge}
    return dataclasses.replace(
        kind,
        pipeline=dataclasses.replace(kind.pipeline, steps=steps),
        status_model=EnvironmentWithGraphsStatus,
        columns=(*kind.columns, PrinterColumn("Graphs", ".status.graphSummary",
                                              description="Each graph type merged: TYPE:TASKS@DIGEST.")),
        depends_on={**kind.depends_on, DEPLOYMENT_GRAPH.kind: lambda spec, name: True},
    )
