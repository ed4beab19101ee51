"""Runs Stead creates by itself (`operators.graphs.autorun`, `operators.graphs.autorunner`): which tasks on which
nodes a change of values or an added node calls for, the debounce, the GraphRun's form, and the driver over a
fake API server with a fake clock (a burst makes one run, a run in progress queues one, opting out and another
replica's project make none)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from operators.config.cache import CachedConfigRepository, ConfigCache
from operators.config.repository import COMPONENTS, ENVIRONMENTS, VALUES
from operators.environment.models import EnvironmentSpec
from operators.graphs.autorun import (
    CREATED_BY,
    CREATED_BY_LABEL,
    MAX_DELAY_FACTOR,
    MAX_KEYS,
    Pending,
    Trigger,
    changed_paths,
    config_trigger,
    decide,
    node_added_trigger,
    note,
    parse_refresh,
    refresh_problem,
    resources_read,
    run_object,
)
from operators.graphs.autorunner import AutoRunner, Baseline, BaselineStore
from operators.graphs.kept import KeptMerge, MergedGraphStore
from operators.graphs.models import GRAPH_RUN, GraphRunSpec, Task, check_graph
from operators.runtime.core.store import LocalStore
from operators.runtime.kube.client import custom_path
from tests.unit.fakeapi import FakeApi


def task(task_id: str, **fields: Any) -> Task:
    return Task.model_validate({"id": task_id, "type": "shell", "roles": ["*"], **fields})


TASKS = [
    task("hosts", reexecuteOn=["deploy_changes"]),
    task("nova", refreshOn=["astute:nova.debug"], requires=["hosts"]),
    task("neutron", refreshOn=["neutron_config"]),
    task("after", requires=["nova"]),
    Task.model_validate({"id": "deploy_end", "type": "stage", "refreshOn": ["*"], "reexecuteOn": ["deploy_changes"]}),
]


def values(debug: Any = False, neutron: Any = None, **more: Any) -> dict[str, Any]:
    return {"astute": {"nova": {"debug": debug, "workers": 4}, **more},
            "neutron_config": neutron if neutron is not None else {"DEFAULT": {"debug": False}}}


# --- refreshOn ----------------------------------------------------------------------------------------


def test_refresh_on_names_a_resource_a_key_of_it_or_everything_and_a_bad_entry_is_refused_at_upload() -> None:
    assert parse_refresh("neutron_config") == parse_refresh("neutron_config")
    assert parse_refresh("neutron_config").key == () and parse_refresh("*").resource is None
    ref = parse_refresh("override/plugins:a\\.b.c")
    assert ref.resource == "override/plugins" and ref.key == ("a.b", "c")
    assert refresh_problem("astute:nova.debug") is None
    assert "not a resource name" in str(refresh_problem("bad name"))
    assert "nothing after ':'" in str(refresh_problem("astute:"))
    assert "segment 2 is empty" in str(refresh_problem("astute:a..b"))
    problems = check_graph({"release": "r1", "tasks": [
        {"id": "ok", "type": "shell", "refreshOn": ["neutron_plugin_ml2", "astute:x", "*"]},
        {"id": "bad", "type": "shell", "refreshOn": ["astute:", "no way"]}]})
    assert problems == [
        "spec.tasks[1] (bad).refreshOn[0]: 'astute:': nothing after ':' (write RESOURCE, or RESOURCE:KEY with a "
        "dotted key path) (RESOURCE, RESOURCE:KEY or '*')",
        "spec.tasks[1] (bad).refreshOn[1]: 'no way': not a resource name (letters, digits, ._~- and / only) "
        "(RESOURCE, RESOURCE:KEY or '*')"]
    assert resources_read(TASKS[:4]) == {"astute", "neutron_config"}
    assert resources_read([*TASKS[:4], task("all", refreshOn=["*"])]) is None
    assert resources_read(TASKS[4:]) == set()  # a stage is structure: it never runs


def test_changed_paths_compare_mappings_key_by_key_and_everything_else_whole() -> None:
    assert changed_paths({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3, "d": 4}}) == [("a", "c"), ("a", "d")]
    assert changed_paths({"l": [1, 2]}, {"l": [1, 2]}) == [] and changed_paths({"l": [1]}, {"l": [1, 2]}) == [("l",)]
    assert changed_paths({"x": 1}, {"x": True}) == [("x",)]  # JSON's 1 is not true
    assert changed_paths({"x": {}}, {}) == [("x",)] and changed_paths({}, {}) == []


# --- what a change of values runs ---------------------------------------------------------------------


def test_a_changed_key_starts_the_tasks_naming_it_on_the_nodes_where_it_changed_only() -> None:
    old = {"ctl": values(), "cmp-1": values(), "cmp-2": values()}
    new = {"ctl": values(), "cmp-1": values(debug=True), "cmp-2": values()}
    trigger = config_trigger(TASKS, old, new)
    assert trigger == Trigger("configChange", ("nova",), ("cmp-1",), ("astute:nova.debug",))
    assert "astute:nova.debug on cmp-1" in trigger.reason and "nova" in trigger.reason
    # a key no task names changes nothing; nor a value changed and changed back (the baseline compares)
    assert config_trigger(TASKS, old, {**old, "ctl": values(other=1)}) is None
    assert config_trigger(TASKS, old, {**old, "ctl": values(workers=8)}) is None
    assert config_trigger(TASKS, old, old) is None


def test_a_whole_resource_names_each_leaf_that_changed_and_several_tasks_and_nodes_add_up() -> None:
    old = {"ctl": values(), "cmp-1": values()}
    new = {"ctl": values(neutron={"DEFAULT": {"debug": True}, "agent": {"x": 1}}), "cmp-1": values(debug=True)}
    trigger = config_trigger(TASKS, old, new)
    assert trigger is not None
    assert trigger.tasks == ("nova", "neutron") and trigger.nodes == ("ctl", "cmp-1")  # graph and node order
    assert trigger.keys == ("astute:nova.debug", "neutron_config:DEFAULT.debug", "neutron_config:agent")
    # a key removed counts as a change too
    gone = config_trigger(TASKS, {"ctl": values()}, {"ctl": {"astute": {"nova": {"workers": 4}},
                                                              "neutron_config": {"DEFAULT": {"debug": False}}}})
    assert gone is not None and gone.keys == ("astute:nova.debug",)


def test_added_nodes_and_resources_the_baseline_never_read_are_not_config_changes() -> None:
    old = {"ctl": {"astute": {"nova": {"debug": False}}}}
    new = {"ctl": values(neutron={"DEFAULT": {"debug": True}}), "cmp-9": values(debug=True)}
    assert config_trigger(TASKS, old, new) is None


def test_star_watches_every_resource_and_the_keys_named_are_bounded() -> None:
    star = [task("all", refreshOn=["*"])]
    many_old = {"n": {"r": {f"k{i:03}": 0 for i in range(MAX_KEYS + 5)}}}
    many_new = {"n": {"r": {f"k{i:03}": 1 for i in range(MAX_KEYS + 5)}}}
    trigger = config_trigger(star, many_old, many_new)
    assert trigger is not None and len(trigger.keys) == MAX_KEYS and trigger.more_keys == 5
    assert trigger.keys[0] == "r:k000" and "and 5 more" in trigger.reason


def test_an_added_node_runs_the_tasks_reexecute_on_names_and_structure_never() -> None:
    trigger = node_added_trigger(TASKS, ["ctl"], ["ctl", "cmp-1", "cmp-2"])
    assert trigger == Trigger("deploy_changes", ("hosts",), ("cmp-1", "cmp-2"))
    assert "cmp-1, cmp-2 added" in trigger.reason
    assert node_added_trigger(TASKS, ["ctl", "cmp-1"], ["ctl"]) is None  # removed: nothing to run
    assert node_added_trigger(TASKS[1:], ["ctl"], ["ctl", "cmp-1"]) is None  # no task names the event


# --- when -------------------------------------------------------------------------------------------


def test_the_window_restarts_with_each_change_and_a_run_in_progress_queues_one() -> None:
    pending = note(None, 100.0)
    assert decide(pending, 104.0, 5, busy=False) == "wait"
    pending = note(pending, 104.0)
    assert pending == Pending(100.0, 104.0)
    assert decide(pending, 108.0, 5, busy=False) == "wait"  # 4 s after the last change
    assert decide(pending, 109.0, 5, busy=False) == "create"
    assert decide(pending, 109.0, 5, busy=True) == "queued"
    endless = Pending(100.0, 100.0 + 5 * MAX_DELAY_FACTOR - 1)
    assert decide(endless, 100.0 + 5 * MAX_DELAY_FACTOR, 5, busy=False) == "create"  # never held back for ever
    assert decide(note(None, 7.0), 7.0, 0, busy=False) == "create"


def test_the_run_is_labelled_as_steads_names_its_reason_and_runs_the_successors_on_those_nodes() -> None:
    trigger = Trigger("configChange", ("nova",), ("cmp-1",), ("astute:nova.debug",))
    body = run_object("team", "env", {"stead.dev/project": "p1", "other": "x"}, trigger, "default")
    meta = body["metadata"]
    assert meta["generateName"] == "env-auto-" and meta["namespace"] == "team"
    assert meta["labels"] == {CREATED_BY_LABEL: CREATED_BY, "stead.dev/trigger": "configChange",
                              "stead.dev/project": "p1"}
    assert "astute:nova.debug" in meta["annotations"]["stead.dev/reason"]
    spec = GraphRunSpec.model_validate(body["spec"])  # a valid GraphRun
    assert spec.graphs[0].nodes == ["cmp-1"] and spec.graphs[0].tasks is None
    assert spec.subgraphs[0].start == ["nova"] and spec.force and not spec.dry_run
    assert spec.trigger is not None and spec.trigger.keys == ["astute:nova.debug"]
    added = GraphRunSpec.model_validate(run_object("team", "env", {}, Trigger(
        "deploy_changes", ("hosts",), ("cmp-2",)), "default", dry_run=True)["spec"])
    assert added.graphs[0].nodes is None and added.graphs[0].tasks == ["hosts"] and not added.subgraphs
    assert added.dry_run


def test_auto_run_is_off_unless_the_environment_asks() -> None:
    spec = EnvironmentSpec.model_validate({"release": "r1"})
    assert spec.graphs is None
    auto = EnvironmentSpec.model_validate({"release": "r1", "graphs": {"autoRun": {"onConfigChange": True}}})
    assert auto.graphs is not None and auto.graphs.auto_run is not None
    assert (auto.graphs.auto_run.on_node_added, auto.graphs.auto_run.debounce_seconds,
            auto.graphs.auto_run.graph_type) == (False, 10, "default")
    with pytest.raises(ValueError, match="debounceSeconds"):
        EnvironmentSpec.model_validate({"release": "r1", "graphs": {"autoRun": {"debounceSeconds": -1}}})


# --- the driver -------------------------------------------------------------------------------------

NS = "team"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str]] = []

    def record(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.recorded.append((reason, message))

    def reasons(self) -> list[str]:
        return [reason for reason, _ in self.recorded]


class World:
    """An environment of three nodes, its configuration and its kept merged graph, behind a fake API server
    and the configuration cache; `look` is one tick of the driver for the environment."""

    def __init__(self, tmp_path: Path, auto: dict[str, Any] | None, owned: bool = True) -> None:
        self.api = FakeApi()
        self.cache = ConfigCache()
        self.store = LocalStore(tmp_path / "store")
        self.events = Events()
        self.clock = Clock()
        self.runner = AutoRunner(clock=self.clock)
        self.services = SimpleNamespace(kube=self.api, store=self.store, events=self.events,
                                        owns=lambda project: owned)
        self.repository = CachedConfigRepository(self.api, self.cache)
        self.baselines = BaselineStore(self.store)
        self.nodes = [{"name": n, "roles": ["compute" if n != "ctl" else "controller"]}
                      for n in ("ctl", "cmp-1", "cmp-2")]
        self.auto = auto
        self.put(ENVIRONMENTS, "env", self.env_spec())
        self.put(COMPONENTS, "fuel", {"resources": [{"name": "astute"}, {"name": "neutron_config"}]})
        self.put(VALUES, "root", {"environment": "env", "resource": "astute", "data": {"nova": {"debug": False}}})
        tasks = tuple(t.model_dump(by_alias=True, mode="json", exclude_defaults=True) for t in TASKS)
        MergedGraphStore(self.store).replace(NS, "env", {"default": KeptMerge("default", tasks, {}, "d1", {}, 1)})

    def env_spec(self) -> dict[str, Any]:
        return {"release": "r1", "components": ["fuel"], "nodes": self.nodes,
                **({"graphs": {"autoRun": self.auto}} if self.auto is not None else {})}

    def put(self, plural: str, name: str, spec: dict[str, Any]) -> None:
        path = custom_path(plural, NS, name)
        if path in self.api.objects:
            body = self.api.objects[path]
            body["spec"] = spec
            body["metadata"]["resourceVersion"] = self.api._next_revision()  # as the API server would
        else:
            body = self.api.add(path, {"spec": spec})
        self.cache.apply("MODIFIED", plural, copy.deepcopy(body))  # a watch event: a body of its own

    def set_debug(self, value: Any, node: str | None = None) -> None:
        name, level = ("root", {}) if node is None else (f"at-{node}", {"role": "compute", "node": node})
        self.put(VALUES, name, {"environment": "env", "resource": "astute", "level": level,
                                "data": {"nova": {"debug": value}}})

    def look(self) -> None:
        cached = self.cache.get(ENVIRONMENTS, NS, "env")
        assert cached is not None
        asyncio.run(self.runner.look(self.services, self.repository, self.baselines, NS, "env", cached.body,
                                     cached.spec))

    def runs(self) -> list[dict[str, Any]]:
        prefix = custom_path(GRAPH_RUN.plural, NS) + "/"
        return [body for path, body in self.api.objects.items() if path.startswith(prefix)]


def test_a_burst_of_edits_makes_one_run_once_quiet_on_the_changed_node_only(tmp_path: Path) -> None:
    world = World(tmp_path, {"onConfigChange": True, "debounceSeconds": 5})
    world.look()
    assert world.events.reasons() == ["AutoRunArmed"] and "astute:nova.debug" in world.events.recorded[0][1]
    world.set_debug(True, node="cmp-1")
    world.look()
    world.clock.now += 3
    world.set_debug("very", node="cmp-1")  # the second edit of the burst: the window starts again
    world.look()
    world.clock.now += 4
    world.look()
    assert world.runs() == []  # 4 s of quiet out of 5
    world.clock.now += 1
    world.look()
    runs = world.runs()
    assert len(runs) == 1
    spec = runs[0]["spec"]
    assert spec["graphs"] == [{"type": "default", "nodes": ["cmp-1"]}] and spec["subgraphs"] == [{"start": ["nova"]}]
    assert spec["trigger"]["keys"] == ["astute:nova.debug"] and runs[0]["metadata"]["labels"][CREATED_BY_LABEL]
    assert world.events.reasons()[-1] == "AutoRunCreated" and runs[0]["metadata"]["name"] in \
        world.events.recorded[-1][1]
    world.clock.now += 60
    world.look()
    assert len(world.runs()) == 1  # the baseline moved: nothing more to run


def test_changes_while_a_run_is_in_progress_make_one_follow_up_once_it_ended(tmp_path: Path) -> None:
    world = World(tmp_path, {"onConfigChange": True, "debounceSeconds": 1})
    world.look()
    world.api.add(custom_path(GRAPH_RUN.plural, NS, "users-run"), {"spec": {"environment": "env", "graphs": [{}]},
                                                                    "status": {"state": "Running"}})
    world.set_debug(True)  # at the root: every node
    world.look()
    world.clock.now += 2
    world.look()
    world.set_debug(True, node="cmp-2")  # no effective change on cmp-2: no new window
    world.look()
    world.clock.now += 2
    world.look()
    assert len(world.runs()) == 1 and world.events.reasons().count("AutoRunQueued") == 1
    world.api.objects[custom_path(GRAPH_RUN.plural, NS, "users-run")]["status"]["state"] = "Succeeded"
    world.look()
    auto = [r for r in world.runs() if r["metadata"].get("labels")]
    assert len(auto) == 1 and auto[0]["spec"]["graphs"][0]["nodes"] == ["ctl", "cmp-1", "cmp-2"]


def test_a_value_changed_and_back_within_the_window_makes_no_run(tmp_path: Path) -> None:
    world = World(tmp_path, {"onConfigChange": True, "debounceSeconds": 5})
    world.look()
    world.set_debug(True)
    world.look()
    world.set_debug(False)
    world.look()
    world.clock.now += 10
    world.look()
    assert world.runs() == []


def test_an_added_node_runs_the_reexecute_on_tasks_then_a_config_change_follows(tmp_path: Path) -> None:
    world = World(tmp_path, {"onConfigChange": True, "onNodeAdded": True, "debounceSeconds": 0})
    world.look()
    world.nodes.append({"name": "cmp-3", "roles": ["compute"]})
    world.put(ENVIRONMENTS, "env", world.env_spec())
    world.set_debug(True, node="cmp-1")
    world.look()
    runs = world.runs()
    assert len(runs) == 1 and runs[0]["spec"]["trigger"]["event"] == "deploy_changes"
    assert runs[0]["spec"]["graphs"] == [{"type": "default", "tasks": ["hosts"]}]
    assert runs[0]["spec"]["trigger"]["nodes"] == ["cmp-3"]
    baseline = world.baselines.get(f"{NS}/env")
    assert baseline is not None and baseline.nodes == ("ctl", "cmp-1", "cmp-2", "cmp-3")
    runs[0]["status"] = {"state": "Succeeded"}
    world.look()
    runs = world.runs()
    assert len(runs) == 2 and runs[1]["spec"]["trigger"]["event"] == "configChange"
    assert runs[1]["spec"]["graphs"][0]["nodes"] == ["cmp-1"]


@pytest.mark.parametrize(("auto", "owned"), [(None, True), ({"onConfigChange": False}, True),
                                             ({"onConfigChange": True, "debounceSeconds": 0}, False)])
def test_no_run_unless_opted_in_and_the_environments_project_is_ours(
        tmp_path: Path, auto: dict[str, Any] | None, owned: bool) -> None:
    world = World(tmp_path, auto, owned=owned)
    world.look()
    world.set_debug(True)
    world.clock.now += 100
    world.look()
    world.look()
    assert world.runs() == [] and world.events.recorded == []
    assert world.baselines.get(f"{NS}/env") is None


def test_opting_out_forgets_the_baseline_so_opting_in_again_starts_afresh(tmp_path: Path) -> None:
    world = World(tmp_path, {"onConfigChange": True, "debounceSeconds": 0})
    world.look()
    uid = world.api.objects[custom_path(ENVIRONMENTS, NS, "env")]["metadata"]["uid"]
    assert world.baselines.get(f"{NS}/env") == Baseline(("ctl", "cmp-1", "cmp-2"), {
        n: {"astute": {"nova": {"debug": False}}, "neutron_config": {}} for n in ("ctl", "cmp-1", "cmp-2")}, uid)
    world.auto = None
    world.put(ENVIRONMENTS, "env", world.env_spec())
    world.look()
    assert world.baselines.get(f"{NS}/env") is None
    world.set_debug(True)  # while out
    world.auto = {"onConfigChange": True, "debounceSeconds": 0}
    world.put(ENVIRONMENTS, "env", world.env_spec())
    world.look()
    world.look()
    assert world.runs() == [] and world.events.reasons() == ["AutoRunArmed", "AutoRunArmed"]


def test_an_environment_made_again_under_the_same_name_is_armed_afresh_from_its_own_values(tmp_path: Path) -> None:
    """The namespace deleted and re-created (maybe another tenant's), unseen by the driver: the Environment's
    uid differs, so neither the baseline nor the Events of the one before carry over."""
    world = World(tmp_path, {"onConfigChange": True, "debounceSeconds": 0})
    world.look()
    first = world.baselines.get(f"{NS}/env")
    assert first is not None and first.uid
    path = custom_path(ENVIRONMENTS, NS, "env")
    del world.api.objects[path]
    world.set_debug(True)  # the new Environment's values differ from the old baseline's
    body = world.api.add(path, {"spec": world.env_spec()})
    world.cache.apply("MODIFIED", ENVIRONMENTS, copy.deepcopy(body))
    world.look()
    world.look()
    assert world.runs() == [] and world.events.reasons() == ["AutoRunArmed", "AutoRunArmed"]
    again = world.baselines.get(f"{NS}/env")
    assert again is not None and again.uid == body["metadata"]["uid"] != first.uid
    assert again.values["ctl"]["astute"] == {"nova": {"debug": True}}


def test_a_graph_that_names_new_keys_says_so_and_their_changes_count_from_then_on(tmp_path: Path) -> None:
    world = World(tmp_path, {"onConfigChange": True, "debounceSeconds": 0})
    MergedGraphStore(world.store).replace(NS, "env", {})  # opted in before any graph merged
    world.look()
    assert world.events.recorded == [("AutoRunArmed", "values recorded: changes of nothing (no refreshOn in the "
                                      "graph) make a GraphRun of type 'default' after 0s of quiet")]
    tasks = tuple(t.model_dump(by_alias=True, mode="json", exclude_defaults=True) for t in TASKS)
    MergedGraphStore(world.store).replace(NS, "env", {"default": KeptMerge("default", tasks, {}, "d2", {}, 1)})
    world.look()
    assert world.events.reasons() == ["AutoRunArmed", "AutoRunArmed"]
    assert "astute:nova.debug, neutron_config" in world.events.recorded[1][1] and world.runs() == []
    world.set_debug(True, node="cmp-2")
    world.look()
    assert [r["spec"]["trigger"]["nodes"] for r in world.runs()] == [["cmp-2"]]


def test_the_driver_taps_the_watches_that_see_everything_else_those_of_its_own_buckets() -> None:
    from operators.graphs.autorunner import _followed

    kinds = ("environments", "configcomponents", "configvalues")
    everything = {p: object() for p in (*kinds, "apps")}
    buckets = {p: object() for p in kinds}
    assert _followed(SimpleNamespace(watches=everything, owned_watches={})) == {p: everything[p] for p in kinds}
    assert _followed(SimpleNamespace(watches={}, owned_watches=buckets)) == buckets  # sharding
    assert _followed(SimpleNamespace(watches={}, owned_watches={})) is None  # --namespace: watches of its own
