"""Deployment graphs (seed 004): Fuel-style task graphs attached to releases, plugins and environments.

The pure logic, without Kubernetes: the models that are the CRD schemas (`models`), Fuel's task
files in and out (`fuel`), the merge of a type's graphs (`merge`), yaql conditions (`conditions`),
the expansion over nodes (`expansion`), a run's plan and workflow (`plan`), an environment's
merged graphs as kept in the store (`kept`) and a run's output as its files hold it (`output`). The
kinds (`kinds`, `run`; `with_merged_graphs`, the graphs' part of the Environment kind), the HTTP API
and the CLI build on the names exported here.

Every name is imported on first use (as `operators.lsm` does): `stead graph` starts without pydantic,
yaql and the Kubernetes client, and the pure core does not pay for the kinds.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operators.graphs.conditions import ConditionError, compile_expression, condition_problem, evaluate
    from operators.graphs.expansion import ANCHOR, Expansion, GraphError, GraphNode, expand, fault_tolerance
    from operators.graphs.fuel import (
        FuelFormatError,
        dump_tasks,
        load_dir,
        load_file,
        load_tasks,
        task_from_fuel,
        task_to_fuel,
    )
    from operators.graphs.kinds import DEPLOYMENT_GRAPH_KIND, GRAPH_RUN_KIND, KINDS, with_merged_graphs
    from operators.graphs.merge import MergedGraph, MergeError, merge_graphs, merge_specs
    from operators.graphs.models import (
        DEPLOYMENT_GRAPH,
        GRAPH_RUN,
        STAGES,
        TASK_TYPES,
        CrossDependency,
        DeploymentGraphSpec,
        GraphRunSpec,
        GraphRunStatus,
        GraphSelection,
        NodeRunStatus,
        PlanSummary,
        Strategy,
        Subgraph,
        Task,
        TaskCondition,
        TaskRunStatus,
        check_graph,
        check_tasks,
    )
    from operators.graphs.plan import (
        NOOP_STEP,
        OUTSIDE_RULE,
        STEP_TYPES,
        FaultToleranceGroup,
        GraphPlan,
        OutsideEdge,
        Plan,
        PlanError,
        PlannedInstance,
        make_plan,
        plan_run,
        step_id,
        to_workflow,
    )

__all__ = [
    "ANCHOR",
    "DEPLOYMENT_GRAPH",
    "DEPLOYMENT_GRAPH_KIND",
    "GRAPH_RUN",
    "GRAPH_RUN_KIND",
    "KINDS",
    "NOOP_STEP",
    "OUTSIDE_RULE",
    "STAGES",
    "STEP_TYPES",
    "TASK_TYPES",
    "ConditionError",
    "CrossDependency",
    "DeploymentGraphSpec",
    "Expansion",
    "FaultToleranceGroup",
    "FuelFormatError",
    "GraphError",
    "GraphNode",
    "GraphPlan",
    "GraphRunSpec",
    "GraphRunStatus",
    "GraphSelection",
    "MergeError",
    "MergedGraph",
    "NodeRunStatus",
    "OutsideEdge",
    "Plan",
    "PlanError",
    "PlanSummary",
    "PlannedInstance",
    "Strategy",
    "Subgraph",
    "Task",
    "TaskCondition",
    "TaskRunStatus",
    "check_graph",
    "check_tasks",
    "compile_expression",
    "condition_problem",
    "dump_tasks",
    "evaluate",
    "expand",
    "fault_tolerance",
    "load_dir",
    "load_file",
    "load_tasks",
    "make_plan",
    "merge_graphs",
    "merge_specs",
    "plan_run",
    "step_id",
    "task_from_fuel",
    "task_to_fuel",
    "to_workflow",
    "with_merged_graphs",
]


_HOMES: dict[str, str] = {
    "ANCHOR": "expansion",
    "ConditionError": "conditions",
    "CrossDependency": "models",
    "DEPLOYMENT_GRAPH": "models",
    "DEPLOYMENT_GRAPH_KIND": "kinds",
    "DeploymentGraphSpec": "models",
    "Expansion": "expansion",
    "FaultToleranceGroup": "plan",
    "FuelFormatError": "fuel",
    "GRAPH_RUN": "models",
    "GRAPH_RUN_KIND": "kinds",
    "GraphError": "expansion",
    "GraphNode": "expansion",
    "GraphPlan": "plan",
    "GraphRunSpec": "models",
    "GraphRunStatus": "models",
    "GraphSelection": "models",
    "KINDS": "kinds",
    "MergeError": "merge",
    "MergedGraph": "merge",
    "NOOP_STEP": "plan",
    "NodeRunStatus": "models",
    "OUTSIDE_RULE": "plan",
    "OutsideEdge": "plan",
    "Plan": "plan",
    "PlanError": "plan",
    "PlanSummary": "models",
    "PlannedInstance": "plan",
    "STAGES": "models",
    "STEP_TYPES": "plan",
    "Strategy": "models",
    "Subgraph": "models",
    "TASK_TYPES": "models",
    "Task": "models",
    "TaskCondition": "models",
    "TaskRunStatus": "models",
    "check_graph": "models",
    "check_tasks": "models",
    "compile_expression": "conditions",
    "condition_problem": "conditions",
    "dump_tasks": "fuel",
    "evaluate": "conditions",
    "expand": "expansion",
    "fault_tolerance": "expansion",
    "load_dir": "fuel",
    "load_file": "fuel",
    "load_tasks": "fuel",
    "make_plan": "plan",
    "merge_graphs": "merge",
    "merge_specs": "merge",
    "plan_run": "plan",
    "step_id": "plan",
    "task_from_fuel": "fuel",
    "task_to_fuel": "fuel",
    "to_workflow": "plan",
    "with_merged_graphs": "kinds",
}
"""Where each exported name lives (imported on first use)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"operators.graphs.{home}"), name)
