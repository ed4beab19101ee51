"""The DeploymentGraph and GraphRun kinds (seed 004): pydantic models that are the CRD schemas.

A **DeploymentGraph** (`dg`) is a typed list of Fuel tasks attached to exactly one owner: a
release, a plugin or an environment. A **GraphRun** (`gr`) executes the merged graph of one or
more types on an environment (or a subset of its nodes).

Field names follow Fuel's task schema in camelCase (`required_for` -> `requiredFor`,
`cross-depends` -> `crossDepends`), so that `operators.graphs.fuel` translates a published task
file key by key. Two places differ from Fuel's YAML, because a CRD schema must be *structural*
(one type per field):

- `condition` is an object: `{yaqlExp: ...}` (Fuel's `{yaql_exp: ...}`) or `{legacy: ...}` (Fuel's
  plain string, its older expression language).
- Unknown task keys (Fuel keeps them in a `_custom` column) live in the task's `custom` map rather
  than beside the known fields: the known fields stay typed and checked, and nothing a tenant
  writes is pruned. The loader moves them there, the dumper writes them back at the top level.

Everything a tenant writes is bounded (list lengths, string lengths): a graph is read by the
operator, expanded over every node and stored, so an unbounded field is a denial of service.
What the schema cannot express (duplicate ids, malformed regexes, a group naming an unknown task,
yaql that does not parse) is checked by `check_graph`, which the admission webhook calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, ValidationError, WithJsonSchema, model_validator

from operators.graphs.regexes import RegexError, compile_pattern
from operators.runtime import Model, Resource, StatusBase, field_path, parse_spec

DEPLOYMENT_GRAPH = Resource("DeploymentGraph", "deploymentgraphs")
GRAPH_RUN = Resource("GraphRun", "graphruns")

TaskType = Literal["puppet", "shell", "sync", "upload_file", "copy_files", "reboot", "group", "stage", "skipped"]
TASK_TYPES: tuple[TaskType, ...] = (
    "puppet", "shell", "sync", "upload_file", "copy_files", "reboot", "group", "stage", "skipped",
)
STRUCTURE_TYPES = frozenset({"group", "stage", "skipped"})
"""Task types that are structure, not work: they never reach a node as a command."""

STAGES: tuple[str, ...] = (
    "pre_deployment_start", "pre_deployment_end", "deploy_start", "deploy_end",
    "post_deployment_start", "post_deployment_end",
)
"""Fuel's stage anchors, in order."""

MAX_TASKS = 5000
MAX_REFS = 200
MAX_NODES = 2000
MAX_CONDITION_TEXT = 65536
"""Characters of distinct yaql conditions one graph may hold. Admission parses every condition in the
operator's event loop (yaql parses about 0.5 MB/s): this keeps one graph's check near 0.1 s. fuel-library's
conditions total a few KiB (its 21 network tasks: 14 distinct conditions, 3.4 KiB)."""
MAX_REGEXES = 2000
"""Distinct /regex/ references one graph (or run) may hold: admission compiles each (RE2, some 20-40 us)
in the operator's event loop, and a 3 MB object could otherwise carry hundreds of thousands."""
MAX_OUTSIDE_EDGES = 100
"""Dependencies on nodes outside a run's subset listed in its status (all of them are counted)."""
OUTPUT_TAIL = 2048
"""Characters of a task's output kept in status (the tail); the whole output is in the run's log."""

FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
GraphType = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-zA-Z0-9_-]+$")]
TaskId = Annotated[str, StringConstraints(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")]
# A reference to a task: its id, or a /regex/ matched against ids (whole-id match, as Fuel anchors it).
TaskRef = Annotated[str, StringConstraints(min_length=1, max_length=253)]
RoleName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
NodeName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
Expression = Annotated[str, StringConstraints(min_length=1, max_length=8192)]
Version = Annotated[str, StringConstraints(max_length=32, pattern=r"^[0-9]+(\.[0-9]+){0,2}$")]
EventName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
Reason = Annotated[str, StringConstraints(max_length=4096)]


def is_regex(ref: str) -> bool:
    """Whether a task or role reference is Fuel's `/regex/` form."""
    return len(ref) >= 2 and ref.startswith("/") and ref.endswith("/")


def compile_ref(ref: str) -> Any:
    """The pattern of a `/regex/` reference, compiled by RE2 (linear time: `operators.graphs.regexes`;
    `RegexError` when RE2 refuses it). Fuel searches the pattern anywhere in the name (nailgun's
    PatternMatchingPolicy uses `re.search`); Stead does the same, so `/(primary-)?keystone/` also
    matches `keystone-db`, as in Fuel: anchor it (`^...$`) for whole names."""
    return compile_pattern(ref[1:-1])


class CrossDependency(Model):
    """A dependency on a task of other nodes (Fuel's cross-depends / cross-depended-by entry)."""

    name: TaskRef = Field(description="The task: its id, or a /regex/ searched in task ids (^...$ for whole ids).")
    role: list[RoleName] = Field(
        default_factory=lambda: ["*"], max_length=64,
        description="The nodes whose instances count: role names, /regex/ over role names, '*' (every node, the "
        "default), 'master', or 'self' (the same node as the dependent instance).",
    )
    policy: Literal["all", "any"] = Field(
        "all", description="all: every matching instance; any: the instances on one node of the role suffice "
        "(Stead picks that node deterministically: the first by name that has the task).",
    )


class TaskCondition(Model):
    """When a task runs: a yaql expression over the node's data (Fuel's yaql_exp), or Fuel's legacy form."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "(has(self.yaqlExp) ? 1 : 0) + (has(self.legacy) ? 1 : 0) == 1",
        "message": "exactly one of yaqlExp or legacy",
    }]})

    yaql_exp: Expression | None = Field(
        None, description="A yaql expression over the node's effective configuration, with Fuel's change functions "
        "(changed, changedAny, changedAll, added, deleted, new, old, isUndef); false makes the task skipped.",
    )
    legacy: Expression | None = Field(
        None, description="Fuel's legacy condition string. Only the literals 'true' and 'false' are supported; "
        "anything else is refused.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> TaskCondition:
        if (self.yaql_exp is None) == (self.legacy is None):
            raise ValueError("exactly one of yaqlExp or legacy must be set")
        return self


class Strategy(Model):
    """How a task's instances are spread over its nodes."""

    type: Literal["parallel", "one_by_one"] = Field("parallel", description="parallel (default) or one_by_one.")
    amount: int | None = Field(None, ge=1, le=10000, description="At most this many nodes at once (parallel).")


class Task(Model):
    """One task of a deployment graph, in Fuel's schema."""

    id: TaskId = Field(description="The task's id, unique in the graph; a later graph level replaces a task of the "
                       "same id whole.")
    type: TaskType = Field(description="puppet, shell, sync, upload_file, copy_files, reboot (work on a node); "
                           "group, stage, skipped (structure).")
    version: Version | None = Field(None, description="The task format version, e.g. 2.1.0.")
    roles: list[RoleName] = Field(
        default_factory=list, max_length=64,
        description="The nodes the task runs on, by role: names, /regex/, '*' (all nodes) or 'master'. Used when "
        "tags is empty.",
    )
    groups: list[RoleName] = Field(
        default_factory=list, max_length=64,
        description="Groups the task belongs to (a group task of that id), else role names; used when tags and "
        "roles are empty.",
    )
    tags: list[RoleName] = Field(
        default_factory=list, max_length=64,
        description="The nodes the task runs on, by tag (a node's tags default to its roles); first choice.",
    )
    requires: list[TaskRef] = Field(
        default_factory=list, max_length=MAX_REFS,
        description="Tasks (ids or /regex/) that run before this one on the same node, or anchors.",
    )
    required_for: list[TaskRef] = Field(
        default_factory=list, max_length=MAX_REFS,
        description="Tasks (ids or /regex/) that run after this one on the same node, or anchors.",
    )
    cross_depends: list[CrossDependency] = Field(
        default_factory=list, max_length=MAX_REFS, description="Tasks of other nodes that run before this one.",
    )
    cross_depended_by: list[CrossDependency] = Field(
        default_factory=list, max_length=MAX_REFS, description="Tasks of other nodes that run after this one.",
    )
    condition: TaskCondition | None = Field(None, description="When false for a node, the task is skipped there "
                                            "(it stays in the graph, so ordering through it holds).")
    parameters: FreeForm = Field(
        default_factory=dict, description="The executor's parameters, as Fuel writes them (puppet_manifest, "
        "puppet_modules, cmd, cwd, timeout, retries, src, dst, path, data, files, permissions...).",
    )
    strategy: Strategy | None = Field(None, description="How the task's instances are spread over its nodes.")
    reexecute_on: list[EventName] = Field(
        default_factory=list, max_length=64, description="Events on which the task runs again: deploy_changes "
        "(Fuel's one event) runs it on every node when nodes are added, if the environment opts in "
        "(spec.graphs.autoRun.onNodeAdded).",
    )
    refresh_on: list[EventName] = Field(
        default_factory=list, max_length=64, description="Configuration values whose change re-runs the task and "
        "its successors on the nodes where they changed, when the environment opts in (spec.graphs.autoRun): "
        "RESOURCE (any key of it, Fuel's form), RESOURCE:KEY (a dotted key path) or '*' (any resource).",
    )
    fault_tolerance: Annotated[str, StringConstraints(max_length=8, pattern=r"^-?[0-9]{1,6}%?$")] | None = Field(
        None,
        description="For a group: how many of its nodes may fail, as a count ('2'), a percentage of them ('20%', "
        "rounded down) or a negative count ('-1': all of them but one may fail). Unset: none may fail. A string, so "
        "that one schema type holds the three forms (Fuel's integers are converted on upload).",
    )
    tasks: list[TaskId] = Field(
        default_factory=list, max_length=MAX_TASKS, description="For a group: the tasks it runs on its nodes.",
    )
    custom: FreeForm = Field(
        default_factory=dict, description="Keys of the task Fuel's schema does not know, kept as written (Fuel's "
        "_custom); a download writes them back beside the known keys.",
    )


class DeploymentGraphSpec(Model):
    """A typed deployment graph attached to exactly one of a release, a plugin or an environment."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "(has(self.release) ? 1 : 0) + (has(self.plugin) ? 1 : 0) + (has(self.environment) ? 1 : 0) == 1",
        "message": "exactly one of release, plugin or environment",
    }]})

    type: GraphType = Field("default", description="The graph's type (default 'default'); a run executes types.")
    name: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        None, description="A verbose name, for humans.")
    release: ObjectName | None = Field(None, description="The release the graph belongs to.")
    plugin: ObjectName | None = Field(None, description="The plugin the graph belongs to.")
    environment: ObjectName | None = Field(None, description="The Environment (same namespace) it belongs to.")
    tasks: list[Task] = Field(default_factory=list, max_length=MAX_TASKS, description="The tasks, by unique id.")

    @model_validator(mode="after")
    def _one_owner(self) -> DeploymentGraphSpec:
        if sum(x is not None for x in (self.release, self.plugin, self.environment)) != 1:
            raise ValueError("exactly one of release, plugin or environment must be set")
        return self

    @property
    def owner(self) -> tuple[str, str]:
        """(kind of owner, its name): ("release", "mitaka-9.0")."""
        for kind in ("release", "plugin", "environment"):
            value = getattr(self, kind)
            if value is not None:
                return kind, value
        raise AssertionError("validated: one owner")


# --- GraphRun ------------------------------------------------------------------------------------


class GraphSelection(Model):
    """One graph type of a run, with the nodes and tasks it is limited to."""

    type: GraphType = Field("default", description="The graph type to run (merged: release < plugins < env).")
    nodes: list[NodeName] | None = Field(
        None, max_length=MAX_NODES, description="Only these nodes of the environment (unset: all of them).")
    tasks: list[TaskId] | None = Field(
        None, max_length=MAX_TASKS, description="Only these tasks (unset: all); the others are skipped.")


class Subgraph(Model):
    """Part of a graph: what lies forward of `start` and backward of `end`."""

    start: list[TaskRef] = Field(default_factory=list, max_length=MAX_REFS,
                                 description="Tasks (ids or /regex/) the subgraph starts from: they and what "
                                 "follows them run.")
    end: list[TaskRef] = Field(default_factory=list, max_length=MAX_REFS,
                               description="Tasks (ids or /regex/) the subgraph ends at: they and what precedes "
                               "them run.")
    start_nodes: list[NodeName] | None = Field(
        None, max_length=MAX_NODES, description="Only the start tasks' instances on these nodes start the subgraph "
        "(Fuel's `start/nodes`); unset: on every node.")
    end_nodes: list[NodeName] | None = Field(
        None, max_length=MAX_NODES, description="Only the end tasks' instances on these nodes end the subgraph "
        "(Fuel's `end/nodes`); unset: on every node.")


class RunTrigger(Model):
    """Why Stead created a run by itself (`operators.graphs.autorun`): absent on runs a user creates."""

    event: Literal["configChange", "deploy_changes"] = Field(
        description="configChange (values a task's refreshOn names changed) or deploy_changes (nodes were added: "
        "the tasks whose reexecuteOn names it).")
    reason: Reason = Field(description="What happened, for a human.")
    keys: list[Annotated[str, StringConstraints(max_length=512)]] = Field(
        default_factory=list, max_length=MAX_REFS, description="The configuration keys that changed, as "
        "RESOURCE:KEY (configChange).")
    nodes: list[NodeName] = Field(default_factory=list, max_length=MAX_NODES,
                                  description="The nodes whose values changed, or the nodes added.")


class GraphRunSpec(Model):
    """A run of one or more graph types, in order, on an environment."""

    environment: ObjectName = Field(description="The Environment (same namespace) to run on.")
    graphs: list[GraphSelection] = Field(min_length=1, max_length=16,
                                         description="The graph types to run, in order; a failure stops the rest.")
    dry_run: bool = Field(False, description="Plan only: nothing runs on any node.")
    noop: bool = Field(False, description="Puppet tasks run with --noop; shell tasks do not run (shown as noop).")
    force: bool = Field(False, description="Every change function of every condition is true.")
    subgraphs: list[Subgraph] = Field(default_factory=list, max_length=16,
                                      description="Run only these parts of the graphs (union of all).")
    abort: bool = Field(False, description="Set to true to stop the run: running tasks are stopped (their processes "
                        "on the nodes ended) and shown aborted, nothing new starts.")
    trigger: RunTrigger | None = Field(None, description="Set by Stead on the runs it creates itself "
                                       "(Environment spec.graphs.autoRun): the event, the reason, the changed keys.")


RunPhase = Literal["Pending", "Planning", "Running", "Succeeded", "Failed", "Aborted"]
TaskState = Literal["planned", "pending", "running", "success", "failure", "skipped", "noop", "aborted"]


class NoopChanges(Model):
    """What a puppet task of a noop run would change on its node (puppet's noop report)."""

    would_change: int = Field(0, ge=0, description="Resources that would change.")
    resources: list[Annotated[str, StringConstraints(max_length=512)]] = Field(
        default_factory=list, max_length=50,
        description="Some of them, with the properties that would change (`File[/etc/motd] (content)`); all of "
        "them (up to 50) in `stead graph history`.")
    more: int = Field(0, ge=0, description="Resources that would change and are not listed here.")


class TaskRunStatus(Model):
    """One task on one node in a run."""

    task: TaskId = Field(description="The task id.")
    state: TaskState = Field(description="planned, pending, running, success, failure, skipped, noop or aborted.")
    reason: Reason | None = Field(None, description="Why it is skipped or noop, or why it failed.")
    started: str | None = Field(None, description="When it started (RFC 3339).")
    finished: str | None = Field(None, description="When it finished (RFC 3339).")
    attempts: int = Field(0, ge=0, description="Attempts made so far.")
    output: Annotated[str, StringConstraints(max_length=OUTPUT_TAIL)] | None = Field(
        None, description=f"The last {OUTPUT_TAIL} characters of its output (masked); all of it: stead graph logs.")
    noop: NoopChanges | None = Field(None, description="In a noop run, for a puppet task that ran: what would "
                                     "change.")


class NodeRunStatus(Model):
    """The tasks of one node in a run ("" for the untargeted anchors)."""

    name: Annotated[str, StringConstraints(max_length=253)] = Field(description="The node ('' for anchors).")
    tasks: list[TaskRunStatus] = Field(default_factory=list, max_length=MAX_TASKS,
                                       description="Its task instances, in plan order.")


class OutsideEdgeStatus(Model):
    """A dependency on an instance of a node outside the run's subset: counted as satisfied, not waited for."""

    type: GraphType = Field(description="The graph type.")
    dependent: Annotated[str, StringConstraints(max_length=512)] = Field(
        description="The instance that would wait (task@node).")
    dependency: Annotated[str, StringConstraints(max_length=512)] = Field(
        description="The instance outside the subset it would wait for (task@node).")


class PlanSummary(Model):
    """The counts of a run's plan."""

    instances: int = Field(0, ge=0, description="Task instances in the plan.")
    planned: int = Field(0, ge=0, description="Instances that run.")
    skipped: int = Field(0, ge=0, description="Instances skipped (condition, tasks filter, subgraph, node subset).")
    noop: int = Field(0, ge=0, description="Instances that run as no-ops (noop run, structure tasks).")
    edges: int = Field(0, ge=0, description="Dependencies between instances.")
    outside_subset: int = Field(0, ge=0, description="Dependencies on instances of nodes outside the run's "
                                "subset, counted as satisfied (listed in outsideEdges and by `stead graph plan`).")
    outside_edges: list[OutsideEdgeStatus] | None = Field(
        None, max_length=MAX_OUTSIDE_EDGES, description=f"The first {MAX_OUTSIDE_EDGES} of those dependencies, in "
        "plan order.")


class GraphRunStatus(StatusBase):
    """Written by Stead."""

    state: RunPhase | None = Field(None, description="Pending, Planning, Running, Succeeded, Failed or Aborted.")
    progress: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        None, description="Instances succeeded / planned, e.g. 12/40; a dry run: \"40 planned (dry run)\".")
    nodes: list[NodeRunStatus] = Field(default_factory=list, max_length=MAX_NODES + 1,
                                       description="Per node, per task: state, times, attempts, output tail.")
    failed_task: Annotated[str, StringConstraints(max_length=512)] | None = Field(
        None, description="The first task instance that failed (task@node).")
    reason: Reason | None = Field(None, description="Why the run failed or was aborted.")
    plan: PlanSummary | None = Field(None, description="The plan's counts.")
    omitted: int | None = Field(None, ge=0, description="Task instances not listed in `nodes` (the status stays "
                                "small: every instance is in `stead graph status`).")
    start_time: str | None = Field(None, description="When the run started.")
    end_time: str | None = Field(None, description="When it ended.")
    runner_starts: int | None = Field(None, description="How many times a runner process was started.")
    status_writes: int | None = Field(None, description="Status PATCHes this run cost (progress included).")


# --- checks the schema cannot express ------------------------------------------------------------


def check_graph(spec: Mapping[str, Any]) -> list[str]:
    """Every problem of a DeploymentGraph spec the schema cannot express, each naming the task and field.

    Schema errors first (as `Kind.check_spec` would give them), then: duplicate task ids, malformed
    /regex/ references (task and role), a group naming an unknown task, a condition that does not
    parse (yaql), calls a function that does not exist or subtracts from a bare word
    (`conditions.condition_problem`), a legacy expression Stead cannot evaluate, and a dependency cycle
    among the graph's own tasks (`structure.graph_cycle`). References to tasks of other graphs (a plugin
    task requiring a release task) are legal here: they are checked on the merged graph
    (`structure.merged_problems`), where the whole picture is.
    """
    try:
        graph = parse_spec(DeploymentGraphSpec, spec)
    except ValidationError as error:
        return [f"spec.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()]
    return check_tasks(graph.tasks)


def check_tasks(tasks: list[Task], path: str = "spec.tasks") -> list[str]:
    """The problems of a validated task list (see `check_graph`)."""
    from operators.graphs.autorun import refresh_problem
    from operators.graphs.conditions import condition_problem
    from operators.graphs.structure import graph_cycle

    problems: list[str] = []
    distinct = {t.condition.yaql_exp for t in tasks if t.condition is not None and t.condition.yaql_exp is not None}
    total = sum(len(text) for text in distinct)
    parse = total <= MAX_CONDITION_TEXT
    if not parse:
        problems.append(f"{path}: the conditions total {total} characters (distinct yaqlExp texts), more than "
                        f"{MAX_CONDITION_TEXT}: share conditions between tasks (YAML anchors) or split the graph")
    patterns = {ref for t in tasks for ref in _refs(t) if is_regex(ref)}
    if len(patterns) > MAX_REGEXES:
        problems.append(f"{path}: {len(patterns)} distinct /regex/ references, more than {MAX_REGEXES}: name tasks "
                        "and roles, or share patterns")

    def regex_problem(ref: str, where: str) -> list[str]:
        return check_regex(ref, where, compile=len(patterns) <= MAX_REGEXES)

    first: dict[str, int] = {}
    for index, task in enumerate(tasks):
        where = f"{path}[{index}] ({task.id})"
        if task.id in first:
            problems.append(f"{where}.id: duplicate task id {task.id!r} (first at {path}[{first[task.id]}])")
        else:
            first[task.id] = index
        for field in ("requires", "required_for"):
            for i, ref in enumerate(getattr(task, field)):
                problems.extend(regex_problem(ref, f"{where}.{_camel(field)}[{i}]"))
        for field in ("roles", "groups", "tags"):
            for i, ref in enumerate(getattr(task, field)):
                problems.extend(regex_problem(ref, f"{where}.{field}[{i}]"))
        for field in ("cross_depends", "cross_depended_by"):
            for i, dep in enumerate(getattr(task, field)):
                problems.extend(regex_problem(dep.name, f"{where}.{_camel(field)}[{i}].name"))
                for j, role in enumerate(dep.role):
                    problems.extend(regex_problem(role, f"{where}.{_camel(field)}[{i}].role[{j}]"))
        for i, ref in enumerate(task.refresh_on):
            problem = refresh_problem(ref)
            if problem:
                problems.append(f"{where}.refreshOn[{i}]: {problem} (RESOURCE, RESOURCE:KEY or '*')")
        if task.condition is not None and parse:
            problem = condition_problem(task.condition)
            if problem:
                problems.append(f"{where}.condition: {problem}")
        if task.type != "group" and (task.tasks or task.fault_tolerance is not None):
            problems.append(f"{where}: tasks and faultTolerance are for type group only")
    ids = set(first)
    for index, task in enumerate(tasks):
        for i, sub in enumerate(task.tasks):
            if sub not in ids:
                problems.append(f"{path}[{index}] ({task.id}).tasks[{i}]: unknown task {sub!r}")
            elif sub == task.id:
                problems.append(f"{path}[{index}] ({task.id}).tasks[{i}]: a group cannot contain itself")
    cycle = graph_cycle(tasks)
    if cycle:
        problems.append(f"{path}: {cycle}")
    return problems


def check_run(spec: Mapping[str, Any]) -> list[str]:
    """The problems of a GraphRun spec the schema cannot express: subgraph /regex/ references RE2 refuses."""
    try:
        run = parse_spec(GraphRunSpec, spec)
    except ValidationError as error:
        return [f"spec.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()]
    return subgraph_problems(run.subgraphs, "spec.subgraphs")


def subgraph_problems(subgraphs: list[Subgraph], path: str = "subgraphs") -> list[str]:
    """Subgraph references that look like a /regex/ but are not closed, or that RE2 refuses."""
    patterns = {ref for sub in subgraphs for ref in (*sub.start, *sub.end) if is_regex(ref)}
    if len(patterns) > MAX_REGEXES:
        return [f"{path}: {len(patterns)} distinct /regex/ references, more than {MAX_REGEXES}"]
    problems: list[str] = []
    for k, sub in enumerate(subgraphs):
        for side in ("start", "end"):
            for i, ref in enumerate(getattr(sub, side)):
                problems.extend(check_regex(ref, f"{path}[{k}].{side}[{i}]"))
            if getattr(sub, f"{side}_nodes") is not None and not getattr(sub, side):
                problems.append(f"{path}[{k}].{side}Nodes: nodes of no task: name the {side} tasks too")
    return problems


def _refs(task: Task) -> list[str]:
    """Every task and role reference of a task (what may be a /regex/)."""
    return [*task.requires, *task.required_for, *task.roles, *task.groups, *task.tags,
            *(d.name for d in (*task.cross_depends, *task.cross_depended_by)),
            *(r for d in (*task.cross_depends, *task.cross_depended_by) for r in d.role)]


def check_regex(ref: str, where: str, *, compile: bool = True) -> list[str]:
    """Why a task or role reference at `where` is not a usable /regex/ (none for a plain name); with
    `compile` false, only whether it is closed."""
    if not is_regex(ref):
        if ref.startswith("/") or ref.endswith("/"):
            return [f"{where}: {ref!r} looks like a /regex/ but is not closed on both sides"]
        return []
    if not compile:
        return []
    try:
        compile_ref(ref)
    except RegexError as error:
        return [f"{where}: invalid regex {ref!r}: {error}"]
    return []


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
