"""An environment's merged graphs, kept in the operator's store (`operators.graphs.kept`): what is merged from
which graphs, when a kept merge is current, the Environment's status and store records the composed kind writes,
and a GraphRun planning from the kept merge only while it is current."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from operators import catalog, environment
from operators.environment.models import EnvironmentSpec
from operators.graphs import DEPLOYMENT_GRAPH, DeploymentGraphSpec, run
from operators.graphs.kept import (
    GRAPHS_MERGED,
    KeptMerge,
    MergedGraphStore,
    SourceGraph,
    current,
    merge_environment,
    plan_input,
    status_facts,
)
from operators.graphs.kinds import with_merged_graphs
from operators.graphs.merge import MergeError
from operators.runtime.core.pipeline import KIND_CONDITIONS, Observed, StepContext, StoredRecord
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.engine.runs import RunSettings
from operators.runtime.kube.client import custom_path
from tests.unit.fakeapi import FakeApi

NS = "team"
ENV = EnvironmentSpec.model_validate({"release": "r1", "plugins": ["lma", "ceph"],
                                      "nodes": [{"name": "ctl", "roles": ["controller"], "address": "10.0.0.2"},
                                                {"name": "cmp", "roles": ["compute"], "address": "10.0.0.3"}]})


def shell(task_id: str, roles: list[str], cmd: str = "true", **more: Any) -> dict[str, Any]:
    return {"id": task_id, "type": "shell", "roles": roles, "parameters": {"cmd": cmd}, **more}


def source(name: str, tasks: list[dict[str, Any]], generation: int = 1, **owner: str) -> SourceGraph:
    return SourceGraph(name, generation, DeploymentGraphSpec.model_validate({**owner, "tasks": tasks}))


GRAPHS = [
    source("rel", [shell("db", ["controller"]), shell("app", ["compute"])], release="r1"),
    source("rel-post", [shell("report", ["*"])], release="r1", type="post"),
    source("lma", [shell("collect", ["*"])], plugin="lma"),
    source("env", [shell("app", ["compute"], "echo mine")], environment="env"),
    source("other-release", [shell("x", ["*"])], release="r2"),
    source("disabled-plugin", [shell("y", ["*"])], plugin="nope"),
    source("other-env", [shell("z", ["*"])], environment="env-2"),
]


def test_each_type_is_merged_from_the_graphs_the_environment_takes_and_no_others() -> None:
    merges = merge_environment("env", ENV, 3, GRAPHS)
    assert sorted(merges) == ["default", "post"]
    default = merges["default"]
    assert [t["id"] for t in default.tasks] == ["db", "app", "collect"]
    assert next(t for t in default.tasks if t["id"] == "app")["parameters"] == {"cmd": "echo mine"}
    assert default.origin["app"] == "environment 'env'" and default.origin["collect"] == "plugin 'lma'"
    assert dict(default.sources) == {"rel": 1, "lma": 1, "env": 1} and default.environment_generation == 3
    assert dict(merges["post"].sources) == {"rel-post": 1} and default.problem is None
    # the digest follows the merged tasks, not the graphs' generations
    again = merge_environment("env", ENV, 4, [source("rel", [shell("db", ["controller"]), shell("app", ["compute"])],
                                                     generation=7, release="r1"), *GRAPHS[1:]])
    assert again["default"].digest == default.digest
    changed = merge_environment("env", ENV, 3, [source("rel", [shell("db", ["controller"], "echo v2"),
                                                               shell("app", ["compute"])], release="r1"),
                                                *GRAPHS[1:]])
    assert changed["default"].digest != default.digest and len(default.digest) == 12


def test_a_type_that_does_not_merge_is_kept_with_its_problem_and_shown_in_a_condition() -> None:
    graphs = [*GRAPHS, source("ceph", [shell("collect", ["*"])], plugin="ceph")]
    merges = merge_environment("env", ENV, 1, graphs)
    assert merges["default"].problem == "plugins 'lma' and 'ceph' both define task 'collect'"
    assert merges["default"].tasks == () and merges["post"].problem is None
    facts = status_facts(merges)
    assert facts["graphSummary"] == f"default:error post:1@{merges['post'].digest}"
    assert facts["graphs"][0] == {"type": "default", "taskCount": 0,
                                  "problem": "plugins 'lma' and 'ceph' both define task 'collect'"}
    assert facts["condition"]["type"] == GRAPHS_MERGED and facts["condition"]["status"] == "False"
    assert "graph type 'default': plugins 'lma' and 'ceph'" in facts["condition"]["message"]
    with pytest.raises(MergeError, match="both define task 'collect'"):
        plan_input(merges["default"], "env", ENV, 1, graphs, "default")
    empty = status_facts({})
    assert empty["graphSummary"] is None and empty["condition"]["reason"] == "NoGraphs"


def test_a_merge_naming_a_task_no_level_has_or_waiting_in_a_cycle_fails_naming_the_tasks_and_levels() -> None:
    """Each graph alone is fine (a plugin's task may require a release's); only the merge shows these."""
    missing = [*GRAPHS[:3], source("env", [shell("app", ["compute"], requires=["db", "dbb"])], environment="env")]
    merges = merge_environment("env", ENV, 1, missing)
    assert merges["default"].problem == ("task 'app' (of environment 'env'): requires 'dbb', which is not in the "
                                         "merged graph")
    condition = status_facts(merges)["condition"]
    assert (condition["status"], condition["reason"]) == ("False", "MergeFailed")
    assert condition["message"].startswith("graph type 'default': task 'app' (of environment 'env'): requires 'dbb'")
    with pytest.raises(MergeError, match="requires 'dbb'"):  # a run of it fails in the same words
        plan_input(merges["default"], "env", ENV, 1, missing, "default")

    looped = [source("rel", [shell("db", ["controller"], requires=["collect"])], release="r1"),
              source("lma", [shell("collect", ["*"], crossDepends=[{"name": "db", "role": ["self"]}])], plugin="lma")]
    assert merge_environment("env", ENV, 1, looped)["default"].problem == (
        "dependency cycle among tasks (each waits for the next on a node that runs them, through requires, "
        "requiredFor or a cross dependency of role self): db (of release 'r1') -> collect (of plugin 'lma') -> "
        "db (of release 'r1')")


@pytest.mark.parametrize(("generation", "graphs", "is_current"), [
    (3, GRAPHS, True),
    (4, GRAPHS, False),  # the environment changed (its plugins' order, its release)
    (3, [source("rel", [shell("db", ["controller"])], generation=2, release="r1"), *GRAPHS[1:]], False),
    (3, [*GRAPHS, source("ceph", [shell("c", ["*"])], plugin="ceph")], False),  # a graph it takes appeared
    (3, [g for g in GRAPHS if g.name != "lma"], False),  # one went
    (3, [*GRAPHS, source("other", [shell("c", ["*"])], release="r9")], True),  # not one it takes
    (3, [*GRAPHS, source("lma-post", [shell("c", ["*"])], plugin="lma", type="post")], True),  # another type
])
def test_a_kept_merge_is_current_only_for_the_same_environment_and_graphs(
        generation: int, graphs: list[SourceGraph], is_current: bool) -> None:
    kept = merge_environment("env", ENV, 3, GRAPHS)["default"]
    assert current(kept, "env", ENV, generation, graphs) is is_current
    assert current(None, "env", ENV, 3, GRAPHS) is False


def test_a_run_plans_from_the_kept_merge_while_it_is_current_else_from_the_graphs() -> None:
    made = merge_environment("env", ENV, 3, GRAPHS)["default"]
    marked = KeptMerge("default", (shell("only-kept", ["*"]),), {}, "d", made.sources, 3)
    tasks, kept = plan_input(marked, "env", ENV, 3, GRAPHS, "default")
    assert kept and [t.id for t in tasks] == ["only-kept"]
    tasks, kept = plan_input(marked, "env", ENV, 4, GRAPHS, "default")
    assert not kept and [t.id for t in tasks] == ["db", "app", "collect"]


def test_the_store_keeps_each_environments_merges_and_replaces_them_whole(tmp_path: Path) -> None:
    store = MergedGraphStore(LocalStore(tmp_path / "store"))
    merges = merge_environment("env", ENV, 3, GRAPHS)
    store.replace(NS, "env", merges)
    store.replace(NS, "env-2", {"post": merges["post"]})
    store.replace("elsewhere", "env", {"post": merges["post"]})
    got = store.get(NS, "env", "default")
    assert got == merges["default"] and [t.id for t in got.task_models()] == ["db", "app", "collect"]
    store.replace(NS, "env", {"default": merges["default"]})  # the post graphs went
    assert sorted(store.of_environment(NS, "env")) == ["default"] and store.get(NS, "env", "post") is None
    assert sorted(store.of_environment(NS, "env-2")) == ["post"]  # a name that starts alike is another's
    assert store.get("elsewhere", "env", "post") is not None


def _env_ctx(store: LocalStore, spec: dict[str, Any], generation: int = 1) -> StepContext:
    body = {"kind": "Environment", "metadata": {"name": "env", "namespace": NS, "uid": "u", "generation": generation},
            "spec": spec, "status": {}}
    return StepContext(obj=Observed.from_body(body), facts={}, services=SimpleNamespace(store=store))


def test_the_environment_keeps_its_merges_and_shows_them_in_its_status(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    for graph in (*GRAPHS, source("not-here", [shell("q", ["*"])], release="r1")):
        namespace = "elsewhere" if graph.name == "not-here" else NS
        store.put(object_key(DEPLOYMENT_GRAPH.kind, namespace, graph.name),
                  StoredRecord(f"uid-{graph.name}", graph.generation,
                               graph.spec.model_dump(by_alias=True, mode="json", exclude_defaults=True), {}))
    kind = with_merged_graphs(environment.KIND)
    spec = ENV.model_dump(by_alias=True, mode="json", exclude_none=True)
    facts = asyncio.run(kind.pipeline.steps["Validated"](_env_ctx(store, spec, generation=3)))
    kept = MergedGraphStore(store).of_environment(NS, "env")
    assert kept == merge_environment("env", ENV, 3, GRAPHS)
    assert facts["graphSummary"] == f"default:3@{kept['default'].digest} post:1@{kept['post'].digest}"
    assert facts["nodeCount"] == 2  # the environment's own facts stay
    assert [c["type"] for c in facts[KIND_CONDITIONS]] == ["ComponentsFound", GRAPHS_MERGED]
    assert DEPLOYMENT_GRAPH.kind in kind.depends_on and "ConfigComponent" in kind.depends_on
    assert kind.status_model.model_fields.keys() >= {"graphs", "graph_summary", "node_count"}
    served = next(k for k in catalog.KINDS if k.kind == "Environment")
    assert DEPLOYMENT_GRAPH.kind in served.depends_on  # the operator serves the composed kind


def test_a_graph_run_plans_from_the_kept_merge_and_from_the_graphs_once_it_is_stale(tmp_path: Path) -> None:
    api = FakeApi()
    spec = ENV.model_dump(by_alias=True, mode="json", exclude_none=True)
    api.add(custom_path("environments", NS, "env"), {"spec": spec})
    api.add(custom_path(DEPLOYMENT_GRAPH.plural, NS, "rel"), {"spec": {"release": "r1", "tasks": [
        shell("db", ["controller"]), shell("app", ["compute"])]}})
    store = LocalStore(tmp_path / "store")
    sources = {"rel": 1}
    MergedGraphStore(store).replace(NS, "env", {"default": KeptMerge(
        "default", (shell("kept-only", ["controller"]),), {}, "d", sources, 1)})

    def ctx(name: str) -> StepContext:
        body = {"kind": "GraphRun", "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1},
                "spec": {"environment": "env", "graphs": [{"type": "default"}], "dryRun": True}, "status": {}}
        services = SimpleNamespace(kube=api, store=store, runs=RunSettings(state_dir=tmp_path / "runs"))
        return StepContext(obj=Observed.from_body(body), facts={}, services=services)

    facts = asyncio.run(run.plan(ctx("first")))
    assert {t["task"] for n in facts["nodes"] for t in n["tasks"]} == {"kept-only"}
    api.objects[custom_path(DEPLOYMENT_GRAPH.plural, NS, "rel")]["metadata"]["generation"] = 2  # edited since
    facts = asyncio.run(run.plan(ctx("second")))
    assert {t["task"] for n in facts["nodes"] for t in n["tasks"]} == {"db", "app"}


def test_a_graph_run_of_a_type_the_environment_has_no_graph_of_fails_naming_its_types(tmp_path: Path) -> None:
    """Planned, it ran nothing and ended Succeeded 0/0."""
    from operators.runtime.core.pipeline import PermanentError

    api = FakeApi()
    api.add(custom_path("environments", NS, "env"), {"spec": ENV.model_dump(by_alias=True, mode="json",
                                                                            exclude_none=True)})
    for graph in GRAPHS:
        api.add(custom_path(DEPLOYMENT_GRAPH.plural, NS, graph.name),
                {"spec": graph.spec.model_dump(by_alias=True, mode="json", exclude_defaults=True)})
    body = {"kind": "GraphRun", "metadata": {"name": "typo", "namespace": NS, "uid": "uid-typo", "generation": 1},
            "spec": {"environment": "env", "graphs": [{"type": "default"}, {"type": "defualt"}], "dryRun": True},
            "status": {}}
    services = SimpleNamespace(kube=api, store=LocalStore(tmp_path / "store"), runs=RunSettings(state_dir=tmp_path))
    with pytest.raises(PermanentError) as error:
        asyncio.run(run.plan(StepContext(obj=Observed.from_body(body), facts={}, services=services)))
    message = ("spec.graphs[1].type: environment env has no graph of type 'defualt' (its graph types: default, post; "
               "a type is that of a DeploymentGraph of its release, an enabled plugin or its own: stead graph list "
               "--env env)")
    assert (error.value.reason, error.value.message) == ("UnknownGraphType", message)
    assert error.value.facts["state"] == "Failed" and error.value.facts["reason"] == message
