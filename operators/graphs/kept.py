"""An environment's merged graphs, kept in the operator's store (docs/graphs.md, "The merged graph").

Fuel kept the merged graph of a cluster and re-computed it when one of its graphs or the cluster changed.
Here the Environment does: each time it is reconciled (its spec changed, or a DeploymentGraph of its
namespace came to rest in a new way or went: `Kind.depends_on`), the graphs it takes (its release's, its
enabled plugins', its own; Provisioned ones, from the store) are merged per type, kept in the store's
`merged-graphs` database, and summed up in its status: per type the task count and a digest of the merged
tasks, so that `kubectl get env` shows which merge is in force and a change of it is seen.

A GraphRun plans from the kept merge when it is current: made at the Environment's generation and from
exactly the graphs (names and generations) the API server holds now. Otherwise (an edit not yet
reconciled, a graph not yet Provisioned, a replica that does not own the environment's project) it merges
the current graphs itself, as before: the kept merge saves work and shows the state, it never decides a
plan that the graphs of the moment would not give.

Pure, but for `MergedGraphStore` (LMDB through the operator's `LocalStore`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.environment.models import EnvironmentSpec
from operators.graphs.merge import MergeError, merge_specs
from operators.graphs.models import DeploymentGraphSpec, Task
from operators.graphs.structure import merged_problems
from operators.runtime import LocalStore

MERGED_DB = b"merged-graphs"
GRAPHS_MERGED = "GraphsMerged"
"""The Environment's condition that says whether each of its graph types merges."""
MAX_PROBLEMS = 20
"""Problems of one type's merge said in full (the condition's message is cut at 2 KiB anyway)."""


@dataclass(frozen=True)
class SourceGraph:
    """A DeploymentGraph as a merge takes it: its name, the generation read, its spec."""

    name: str
    generation: int
    spec: DeploymentGraphSpec


@dataclass(frozen=True)
class KeptMerge:
    """The merge of one graph type of an environment, as kept: the tasks (the API's JSON form), where each
    came from, a digest of them, and what it was made from (`sources`: graph name -> generation; the
    environment's generation). A merge that failed keeps no tasks and says why (`problem`)."""

    graph_type: str
    tasks: tuple[Mapping[str, Any], ...]
    origin: Mapping[str, str]
    digest: str
    sources: Mapping[str, int]
    environment_generation: int
    problem: str | None = None
    models: tuple[Task, ...] = field(default=(), compare=False, repr=False)

    def task_models(self) -> list[Task]:
        """The tasks as models (a planner's input)."""
        if self.models:
            return list(self.models)
        return [Task.model_validate(dict(t)) for t in self.tasks]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.graph_type, "tasks": list(self.tasks), "origin": dict(self.origin),
                "digest": self.digest, "sources": dict(self.sources),
                "environmentGeneration": self.environment_generation, "problem": self.problem}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KeptMerge:
        return cls(str(data["type"]), tuple(data.get("tasks") or ()), dict(data.get("origin") or {}),
                   str(data.get("digest") or ""), {str(k): int(v) for k, v in (data.get("sources") or {}).items()},
                   int(data.get("environmentGeneration") or 0), data.get("problem"))


def taken_by(graph: DeploymentGraphSpec, environment: str, spec: EnvironmentSpec) -> bool:
    """Whether an environment's merge takes the graph: its release's, an enabled plugin's, or its own."""
    kind, owner = graph.owner
    return ((kind == "release" and owner == spec.release) or (kind == "plugin" and owner in spec.plugins)
            or (kind == "environment" and owner == environment))


def digest(tasks: Sequence[Mapping[str, Any]]) -> str:
    """A short digest of merged tasks in order (12 hex digits): equal merges have equal digests."""
    text = json.dumps(list(tasks), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def merge_type(environment: str, spec: EnvironmentSpec, generation: int, graphs: Sequence[SourceGraph],
               graph_type: str) -> KeptMerge:
    """The merge of `graph_type` from the graphs the environment takes (the others are ignored). A merge
    whose tasks name a task it does not have, or wait for each other in a cycle (`structure.merged_problems`),
    is a failed merge too: a run of it could only fail, and the GraphsMerged condition says why."""
    taken = [g for g in graphs if g.spec.type == graph_type and taken_by(g.spec, environment, spec)]
    sources = {g.name: g.generation for g in taken}
    try:
        merged = merge_specs([g.spec for g in taken], graph_type, release=spec.release, plugins=spec.plugins,
                             environment=environment)
    except MergeError as error:
        return KeptMerge(graph_type, (), {}, "", sources, generation, problem=str(error))
    problems = merged_problems(merged.tasks, merged.origin)
    if problems:
        shown = "; ".join(problems[:MAX_PROBLEMS]) + (f" (and {len(problems) - MAX_PROBLEMS} more)"
                                                      if len(problems) > MAX_PROBLEMS else "")
        return KeptMerge(graph_type, (), {}, "", sources, generation, problem=shown)
    tasks = tuple(t.model_dump(by_alias=True, mode="json", exclude_defaults=True) for t in merged.tasks)
    return KeptMerge(graph_type, tasks, dict(merged.origin), digest(tasks), sources, generation,
                     models=tuple(merged.tasks))


def graph_types(environment: str, spec: EnvironmentSpec, graphs: Iterable[DeploymentGraphSpec]) -> list[str]:
    """The graph types the environment has: those of a graph it takes (its release's, an enabled plugin's,
    its own), sorted."""
    return sorted({g.type for g in graphs if taken_by(g, environment, spec)})


def no_such_type(environment: str, graph_type: str, types: Sequence[str]) -> str | None:
    """Why a run of `graph_type` on the environment cannot be (naming the types it has), or None when it
    has that type. A run of a type nothing defines would plan no task and succeed, deploying nothing."""
    if graph_type in types:
        return None
    have = f"its graph types: {', '.join(types)}" if types else "it has no graph of any type yet"
    return (f"environment {environment} has no graph of type {graph_type!r} ({have}; a type is that of a "
            f"DeploymentGraph of its release, an enabled plugin or its own: stead graph list --env {environment})")


def merge_environment(environment: str, spec: EnvironmentSpec, generation: int,
                      graphs: Sequence[SourceGraph]) -> dict[str, KeptMerge]:
    """Every graph type the environment has (a type of a graph it takes), merged."""
    types = graph_types(environment, spec, (g.spec for g in graphs))
    return {t: merge_type(environment, spec, generation, graphs, t) for t in types}


def current(kept: KeptMerge | None, environment: str, spec: EnvironmentSpec, generation: int,
            graphs: Sequence[SourceGraph]) -> bool:
    """Whether a kept merge is the one the environment's generation and these graphs give: made at that
    generation, from exactly the graphs of its type the environment takes, at their generations."""
    if kept is None or kept.environment_generation != generation:
        return False
    now = {g.name: g.generation for g in graphs if g.spec.type == kept.graph_type
           and taken_by(g.spec, environment, spec)}
    return dict(kept.sources) == now


def plan_input(kept: KeptMerge | None, environment: str, spec: EnvironmentSpec, generation: int,
               graphs: Sequence[SourceGraph], graph_type: str) -> tuple[list[Task], bool]:
    """The merged tasks of `graph_type` a run plans from, and whether they are the kept ones: the kept merge
    when it is current, else the merge of `graphs` (MergeError when they do not merge)."""
    fresh = current(kept, environment, spec, generation, graphs)
    merge = kept if fresh and kept is not None else merge_type(environment, spec, generation, graphs, graph_type)
    if merge.problem is not None:
        raise MergeError(merge.problem)
    return merge.task_models(), fresh


def status_facts(merges: Mapping[str, KeptMerge]) -> dict[str, Any]:
    """What the Environment's status shows of its merges: `graphs` (per type: taskCount, digest, problem),
    `graphSummary` (`default:21@3f2a9c1b0d4e upgrade:4@...`, a printer column) and the GraphsMerged
    condition, which names a type that does not merge and why (not a readiness matter: the environment's
    nodes are usable, and a run of another type is not concerned)."""
    rows = []
    for graph_type, merge in sorted(merges.items()):
        row: dict[str, Any] = {"type": graph_type, "taskCount": len(merge.tasks)}
        if merge.problem is None:
            row["digest"] = merge.digest
        else:
            row["problem"] = merge.problem[:1024]
        rows.append(row)
    summary = " ".join(f"{r['type']}:{r['taskCount']}@{r['digest']}" if "digest" in r else f"{r['type']}:error"
                       for r in rows)
    failed = [r for r in rows if "problem" in r]
    if failed:
        condition = {"type": GRAPHS_MERGED, "status": "False", "reason": "MergeFailed",
                     "message": "; ".join(f"graph type {r['type']!r}: {r['problem']}" for r in failed)[:2048]}
    else:
        condition = {"type": GRAPHS_MERGED, "status": "True", "reason": "Merged" if rows else "NoGraphs",
                     "message": f"{len(rows)} graph type(s) merged and kept" if rows else
                     "no DeploymentGraph of its release, plugins or own"}
    return {"graphs": rows, "graphSummary": summary or None, "condition": condition}


class MergedGraphStore:
    """The kept merges in the operator's LMDB store, keyed `<namespace>/<environment>/<type>`."""

    def __init__(self, store: LocalStore) -> None:
        self._env, self._db = store.open_db(MERGED_DB)

    @staticmethod
    def _prefix(namespace: str, environment: str) -> bytes:
        return f"{namespace}/{environment}/".encode()

    def replace(self, namespace: str, environment: str, merges: Mapping[str, KeptMerge]) -> None:
        """Keep exactly these merges for the environment (the types it no longer has go)."""
        prefix = self._prefix(namespace, environment)
        with self._env.begin(db=self._db, write=True) as txn:
            cursor = txn.cursor()
            stale = []
            if cursor.set_range(prefix):
                for key, _ in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    stale.append(bytes(key))
            for key in stale:
                txn.delete(key)
            for merge in merges.values():
                txn.put(prefix + merge.graph_type.encode(), json.dumps(merge.to_json(), separators=(",", ":")).encode())

    def get(self, namespace: str, environment: str, graph_type: str) -> KeptMerge | None:
        with self._env.begin(db=self._db) as txn:
            raw = txn.get(self._prefix(namespace, environment) + graph_type.encode())
        return None if raw is None else KeptMerge.from_json(json.loads(raw))

    def of_environment(self, namespace: str, environment: str) -> dict[str, KeptMerge]:
        prefix = self._prefix(namespace, environment)
        found: dict[str, KeptMerge] = {}
        with self._env.begin(db=self._db) as txn:
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                for key, raw in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    merge = KeptMerge.from_json(json.loads(bytes(raw)))
                    found[merge.graph_type] = merge
        return found
