"""Deployment graphs (seed 004): Fuel-style task graphs attached to releases, plugins and environments.

The pure logic, without Kubernetes: the models that are the CRD schemas (`models`), Fuel's task
files in and out (`fuel`), the merge of a type's graphs (`merge`), yaql conditions (`conditions`),
the expansion over nodes (`expansion`), a run's plan (`plan`, with `subgraphs`) and its workflow
(`workflow`), an environment's merged graphs as kept in the store (`kept`) and a run's output as
its files hold it (`output`). The
kinds (`kinds`, `run`; `with_merged_graphs`, the graphs' part of the Environment kind), the HTTP API
and the CLI build on the names exported here.

Every name is imported on first use (`operators.runtime.lazy`): `stead graph` starts without pydantic,
yaql and the Kubernetes client, and the pure core does not pay for the kinds.
"""

from typing import TYPE_CHECKING

from operators.runtime import front_door

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
    )
    from operators.graphs.workflow import to_workflow

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


__getattr__, __dir__ = front_door(__name__, __file__, __all__)
