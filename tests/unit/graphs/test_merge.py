"""The merge of one graph type: release < plugins < environment, whole-task replacement."""

from __future__ import annotations

import pytest

from operators.graphs import DeploymentGraphSpec, MergeError, merge_graphs, merge_specs
from tests.unit.graphs.support import t


def test_a_later_level_replaces_a_task_whole_and_keeps_its_place() -> None:
    release = [t("a", roles=["x"], requires=["b"], parameters={"cmd": "old", "timeout": 5}), t("b"), t("c")]
    plugin = [t("b", "puppet", parameters={"puppet_manifest": "p.pp"}), t("p")]
    env = [t("a", parameters={"cmd": "new"}), t("e")]
    merged = merge_graphs(release, [("lma", plugin)], env, release_name="mitaka", environment_name="env-1")
    assert merged.task_ids() == ["a", "b", "c", "p", "e"]
    a = merged.tasks[0]
    # whole replacement: nothing of the release's `a` survives (no requires, roles, timeout)
    assert a.parameters == {"cmd": "new"} and a.requires == [] and a.roles == []
    assert merged.tasks[1].type == "puppet"
    assert merged.origin == {"a": "environment 'env-1'", "b": "plugin 'lma'", "c": "release 'mitaka'",
                             "p": "plugin 'lma'", "e": "environment 'env-1'"}


def test_two_plugins_defining_one_id_is_an_error_naming_both() -> None:
    with pytest.raises(MergeError, match="plugins 'lma' and 'contrail' both define task 'x'"):
        merge_graphs([t("x")], [("lma", [t("x")]), ("contrail", [t("y"), t("x")])], [])


def test_a_plugin_may_replace_a_release_task_and_the_environment_a_plugin_task() -> None:
    merged = merge_graphs([t("x", parameters={"cmd": "r"})], [("lma", [t("x", parameters={"cmd": "p"})])],
                          [t("x", parameters={"cmd": "e"})])
    assert [task.parameters["cmd"] for task in merged.tasks] == ["e"]
    merged = merge_graphs([t("x", parameters={"cmd": "r"})], [("lma", [t("x", parameters={"cmd": "p"})])])
    assert merged.tasks[0].parameters["cmd"] == "p"


def test_plugin_order_is_the_environments() -> None:
    merged = merge_graphs(None, [("b", [t("pb")]), ("a", [t("pa")])], None)
    assert merged.task_ids() == ["pb", "pa"]


def test_duplicate_ids_in_one_graph() -> None:
    with pytest.raises(MergeError, match="plugin 'lma': task id 'x' appears twice"):
        merge_graphs([], [("lma", [t("x"), t("x")])])


def test_merge_specs_picks_the_environments_graphs_of_the_type() -> None:
    def g(owner: str, name: str, type_: str, *ids: str) -> DeploymentGraphSpec:
        return DeploymentGraphSpec.model_validate({owner: name, "type": type_, "tasks": [{"id": i, "type": "shell"}
                                                                                         for i in ids]})
    graphs = [
        g("release", "mitaka", "default", "r1", "r2"), g("release", "newton", "default", "n1"),
        g("plugin", "lma", "default", "p1", "r2"), g("plugin", "disabled", "default", "d1"),
        g("environment", "env-1", "default", "e1"), g("environment", "env-2", "default", "x"),
        g("environment", "env-1", "upgrade", "u1"),
    ]
    merged = merge_specs(graphs, "default", release="mitaka", plugins=["lma"], environment="env-1")
    assert merged.task_ids() == ["r1", "r2", "p1", "e1"] and merged.origin["r2"] == "plugin 'lma'"
    assert merge_specs(graphs, "upgrade", release="mitaka", plugins=[], environment="env-1").task_ids() == ["u1"]
    with pytest.raises(MergeError, match="two graphs of type 'default' for release 'mitaka'"):
        merge_specs([*graphs, graphs[0]], "default", release="mitaka", plugins=[], environment="env-1")
