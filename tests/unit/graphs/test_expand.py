"""Expansion over nodes: role forms, tags, groups, stages, same-node and cross dependencies, errors."""

from __future__ import annotations

from typing import Any

import pytest

from operators.graphs import ANCHOR, Expansion, GraphError, GraphNode, expand, fault_tolerance
from tests.unit.graphs.support import stage_tasks, t

NODES = [
    GraphNode("c1", ("primary-controller",), ("primary-controller", "primary-neutron")),
    GraphNode("c2", ("controller",), ("controller", "neutron")),
    GraphNode("k1", ("compute",)),
    GraphNode("k2", ("compute", "ceph-osd")),
    GraphNode("m", ("master",)),
]


def nodes_of(exp: Expansion, task: str) -> list[str]:
    return [exp.instances[i][1] for i in exp.by_task.get(task, [])]


def waits(exp: Expansion, task: str, node: str) -> set[str]:
    return {exp.key(d) for d in exp.deps[exp.index[(task, node)]]}


@pytest.mark.parametrize(("fields", "expected"), [
    ({"roles": ["compute"]}, ["k1", "k2"]),
    ({"roles": ["*"]}, ["c1", "c2", "k1", "k2", "m"]),
    ({"roles": ["master"]}, ["m"]),
    ({"roles": ["/controller$/"]}, ["c1", "c2"]),  # searched anywhere in the name, as Fuel does
    ({"roles": ["/^controller$/"]}, ["c2"]),
    ({"roles": ["/(primary-)?controller$/"]}, ["c1", "c2"]),
    ({"roles": ["/^ceph/", "controller"]}, ["c2", "k2"]),
    ({"tags": ["neutron"], "roles": ["compute"]}, ["c2"]),  # tags first
    ({"tags": ["compute"]}, ["k1", "k2"]),  # a node's tags default to its roles
    ({"groups": ["ceph-osd"]}, ["k2"]),  # no such group: a role
    ({}, []),
])
def test_nodes_of_a_task(fields: dict[str, Any], expected: list[str]) -> None:
    exp = expand([t("x", **fields)], NODES)
    assert nodes_of(exp, "x") == expected
    assert exp.unplaced == ([] if expected else ["x"])


def test_groups_run_their_tasks_on_their_nodes_and_are_anchors() -> None:
    exp = expand([
        t("computes", "group", roles=["compute"], tasks=["a"], fault_tolerance="50%"),
        t("a", roles=["primary-controller"]),
        t("b", groups=["computes"]),
    ], NODES)
    assert nodes_of(exp, "computes") == [ANCHOR]
    assert nodes_of(exp, "a") == ["c1", "k1", "k2"]  # its own nodes and the group's
    assert nodes_of(exp, "b") == ["k1", "k2"]
    assert exp.groups == {"computes": (["k1", "k2"], 1)}


@pytest.mark.parametrize(("value", "total", "may_fail"), [
    (None, 10, 0), ("2", 10, 2), ("20%", 10, 2), ("25%", 10, 2), ("-1", 10, 9), ("-12", 10, 0), ("50", 3, 3),
    ("0", 4, 0), ("100%", 4, 4),
])
def test_fault_tolerance(value: str | None, total: int, may_fail: int) -> None:
    assert fault_tolerance(value, total) == may_fail


def test_stages_are_a_chain_of_anchors_that_tasks_order_against() -> None:
    exp = expand([*stage_tasks(), t("a", roles=["compute"], requires=["deploy_start"], required_for=["deploy_end"]),
                  t("post", roles=["*"], requires=["post_deployment_start"])], NODES)
    assert nodes_of(exp, "deploy_start") == [ANCHOR]
    assert waits(exp, "deploy_end", ANCHOR) == {"deploy_start", "a@k1", "a@k2"}
    assert waits(exp, "a", "k1") == {"deploy_start"}
    assert waits(exp, "post_deployment_start", ANCHOR) == {"deploy_end"}
    assert waits(exp, "post", "m") == {"post_deployment_start"}


def test_requires_bind_on_the_same_node_only() -> None:
    exp = expand([t("net", roles=["*"]), t("ctl", roles=["controller"]),
                  t("x", roles=["controller", "compute"], requires=["net", "ctl"]),
                  t("y", roles=["compute"], required_for=["/^(ctl|net)$/"])], NODES)
    assert waits(exp, "x", "c2") == {"net@c2", "ctl@c2"}
    assert waits(exp, "x", "k1") == {"net@k1"}  # ctl exists but not on k1: nothing to wait for
    assert waits(exp, "net", "k1") == {"y@k1"}


def test_cross_dependencies_all_any_and_self() -> None:
    exp = expand([
        t("db", tags=["primary-controller", "controller", "compute"]),
        t("all", roles=["compute"], cross_depends=[{"name": "db", "role": ["/(primary-)?controller/"]}]),
        t("any", roles=["compute"], cross_depends=[{"name": "db", "role": ["/(primary-)?controller/"],
                                                     "policy": "any"}]),
        t("star", roles=["compute"], cross_depends=[{"name": "/^d/"}]),
        t("self", roles=["compute"], cross_depends=[{"name": "db", "role": ["self"]}]),
        t("by", roles=["master"], cross_depended_by=[{"name": "db", "role": ["compute"]}]),
    ], NODES)
    assert waits(exp, "all", "k1") == {"db@c1", "db@c2"}
    assert waits(exp, "any", "k1") == {"db@c1"}  # the first node, by name, that has the task
    assert waits(exp, "star", "k2") == {"db@c1", "db@c2", "db@k1", "db@k2"}
    assert waits(exp, "self", "k2") == {"db@k2"}
    assert waits(exp, "db", "k1") == {"by@m"} and waits(exp, "db", "c1") == set()


def test_any_picks_a_node_that_has_the_task() -> None:
    exp = expand([t("db", roles=["controller"]),
                  t("x", roles=["compute"], cross_depends=[{"name": "db", "role": ["*"], "policy": "any"}])], NODES)
    assert waits(exp, "x", "k1") == {"db@c2"}  # c1 comes first but has no db


def test_a_reference_to_a_missing_task_names_both_tasks() -> None:
    with pytest.raises(GraphError) as error:
        expand([t("a", roles=["*"], requires=["nope"], cross_depends=[{"name": "/^zz/"}]),
                t("g", "group", roles=["*"], tasks=["ghost"])], NODES)
    assert error.value.problems == [
        "group 'g': tasks names 'ghost', which is not in the merged graph",
        "task 'a': requires 'nope', which is not in the merged graph",
        "task 'a': crossDepends '/^zz/', no task of the merged graph matches",
    ]


def test_a_cycle_names_its_tasks() -> None:
    with pytest.raises(GraphError, match=r"dependency cycle .*: (a@k1 -> b@k1 -> a@k1|b@k1 -> a@k1 -> b@k1)"):
        expand([t("a", roles=["compute"], requires=["b"]), t("b", roles=["compute"], requires=["a"])], NODES)
    with pytest.raises(GraphError, match="dependency cycle"):
        expand([t("a", roles=["compute"], cross_depends=[{"name": "a"}])], NODES)


def test_one_by_one_chains_the_instances_in_node_order() -> None:
    exp = expand([t("r", "reboot", roles=["*"], strategy={"type": "one_by_one"})], NODES)
    assert waits(exp, "r", "c2") == {"r@c1"} and waits(exp, "r", "m") == {"r@k2"} and waits(exp, "r", "c1") == set()


def test_a_parallel_amount_lets_at_most_that_many_instances_run_at_once() -> None:
    exp = expand([t("r", "reboot", roles=["*"], strategy={"type": "parallel", "amount": 2})], NODES)
    order = ["c1", "c2", "k1", "k2", "m"]
    assert {n: waits(exp, "r", n) for n in order} == {
        "c1": set(), "c2": set(), "k1": {"r@c1"}, "k2": {"r@c2"}, "m": {"r@k1"}}
    # two chains, each one instance at a time: whatever each instance takes, never more than two run
    chains: list[list[str]] = []
    for node in order:
        before = waits(exp, "r", node)
        chain = next((c for c in chains if before == {f"r@{c[-1]}"}), None)
        if chain is None:
            chains.append([node])
        else:
            chain.append(node)
    assert chains == [["c1", "k1", "m"], ["c2", "k2"]]
    wide = expand([t("r", "reboot", roles=["*"], strategy={"type": "parallel", "amount": 5})], NODES)
    assert all(waits(wide, "r", n) == set() for n in order)  # as many as there are nodes: no order added
    plain = expand([t("r", "reboot", roles=["*"], strategy={"type": "parallel"})], NODES)
    assert all(waits(plain, "r", n) == set() for n in order)


def test_an_amount_that_would_make_a_cycle_is_reported_like_any_other() -> None:
    # a@k1 waits for a@k2 (the ceph-osd node); a chain in node order would make a@k2 wait for a@k1
    def tasks(**strategy: Any) -> list[dict[str, Any]]:
        return [t("a", roles=["compute"], cross_depends=[{"name": "a", "role": ["ceph-osd"]}], **strategy)]
    assert waits(expand(tasks(), NODES), "a", "k1") == {"a@k2"}
    with pytest.raises(GraphError, match="dependency cycle"):
        expand(tasks(strategy={"type": "parallel", "amount": 1}), NODES)


def test_skipped_tasks_without_nodes_are_anchors_others_are_unplaced() -> None:
    exp = expand([t("anchor", "skipped"), t("nowhere", roles=["storage"]), t("x", roles=["compute"],
                                                                          requires=["anchor", "nowhere"])], NODES)
    assert nodes_of(exp, "anchor") == [ANCHOR] and exp.unplaced == ["nowhere"]
    assert waits(exp, "x", "k1") == {"anchor"}


def test_nodes_from_environment_dicts() -> None:
    node = GraphNode.of({"name": "n", "roles": ["compute"], "address": "10.0.0.1",
                         "labels": {"stead.dev/tags": "compute, neutron"}})
    assert node.effective_tags == ("compute", "neutron") and node.address == "10.0.0.1"
    assert GraphNode.of({"name": "m", "roles": ["a"]}).effective_tags == ("a",)


# --- groups order their tasks ------------------------------------------------------------------------


def ancestors(exp: Expansion, task: str, node: str = ANCHOR) -> set[str]:
    """Everything an instance waits for, directly or through others."""
    seen: set[int] = set()
    stack = [exp.index[(task, node)]]
    while stack:
        for d in exp.deps[stack.pop()]:
            if d not in seen:
                seen.add(d)
                stack.append(d)
    return {exp.key(d) for d in seen}


def grouped() -> list[Any]:
    """controllers (c1, c2) -> computes (k1, k2): members by `groups` and by a group's `tasks`."""
    return [
        *stage_tasks(),
        t("controllers", "group", roles=["/controller$/"], requires=["deploy_start"], required_for=["deploy_end"]),
        t("computes", "group", roles=["compute"], tasks=["hiera"], requires=["controllers"],
          required_for=["deploy_end"]),
        t("hiera", groups=["controllers"]),
        t("db", groups=["controllers"], requires=["hiera"]),
        t("nova", groups=["computes"], requires=["hiera"]),
        t("late", groups=["controllers"]),  # no order of its own: the group's only
        t("smoke", roles=["*"], requires=["post_deployment_start"]),
    ]


def test_a_group_requiring_another_starts_no_task_before_every_task_of_the_other_ended() -> None:
    exp = expand(grouped(), NODES)
    controller_tasks = {f"{task}@{n}" for task in ("hiera", "db", "late") for n in ("c1", "c2")}
    for task in ("hiera", "nova"):
        for node in ("k1", "k2"):
            assert controller_tasks <= ancestors(exp, task, node), (task, node)
    for key in controller_tasks:
        task, node = key.split("@")
        assert not {a for a in ancestors(exp, task, node) if a.endswith(("@k1", "@k2"))}, key
    # every task of a group required for deploy_end ends before it, so before anything after it
    smoke = ancestors(exp, "smoke", "m")
    assert controller_tasks | {f"{task}@{n}" for task in ("hiera", "nova") for n in ("k1", "k2")} <= smoke
    assert "controllers" in smoke and "computes" in smoke
    assert exp.members == {"controllers": [exp.index[(task, n)] for task in ("hiera", "db", "late")
                                           for n in ("c1", "c2")],
                           "computes": [exp.index[(task, n)] for task in ("hiera", "nova") for n in ("k1", "k2")]}


def test_a_group_is_a_start_and_an_end_anchor_with_edges_linear_in_its_members() -> None:
    exp = expand(grouped(), NODES)
    # the start waits for what the group requires; the end for the start and its last members only
    assert waits(exp, "controllers::start", ANCHOR) == {"deploy_start"}
    assert waits(exp, "computes::start", ANCHOR) == {"controllers"}
    assert waits(exp, "controllers", ANCHOR) == {"controllers::start", "db@c1", "db@c2", "late@c1", "late@c2"}
    # only the members that wait for no other member wait for the start
    assert waits(exp, "hiera", "c1") == {"controllers::start"} and waits(exp, "late", "c2") == {"controllers::start"}
    assert waits(exp, "db", "c1") == {"hiera@c1"} and waits(exp, "nova", "k2") == {"hiera@k2"}
    # what requires a group waits for its end; the stage a group is required for too
    assert waits(exp, "deploy_end", ANCHOR) == {"deploy_start", "controllers", "computes"}
    assert nodes_of(exp, "controllers") == [ANCHOR] and nodes_of(exp, "controllers::start") == [ANCHOR]
    # a chain of 50 tasks in a group on 5 nodes: 2 edges per node, not per task (nor tasks x tasks)
    chain = [t("g", "group", roles=["*"]), *(t(f"s{k}", groups=["g"], requires=[f"s{k - 1}"] if k else [])
                                            for k in range(50))]
    wide = expand(chain, NODES)
    plain = expand([task.model_copy(update={"groups": ["*"]}) for task in chain[1:]], NODES)
    assert wide.edge_count - plain.edge_count == 2 * len(NODES) + 1  # + the end waiting for the start


def test_what_a_group_is_required_for_waits_for_it_and_what_is_required_for_it_precedes_it() -> None:
    exp = expand([
        t("controllers", "group", roles=["controller"], required_for=["computes"]),
        t("computes", "group", roles=["compute"], cross_depends=[{"name": "prep", "role": ["master"]}]),
        t("ctl", groups=["controllers"]), t("nova", groups=["computes"]),
        t("prep", roles=["master"]),
        t("before", roles=["master"], required_for=["controllers"]),
        t("after", roles=["master"], requires=["computes"]),
    ], NODES)
    assert waits(exp, "computes::start", ANCHOR) == {"controllers", "prep@m"}
    assert waits(exp, "controllers::start", ANCHOR) == {"before@m"}
    assert waits(exp, "after", "m") == {"computes"}
    assert {"ctl@c2", "before@m", "prep@m"} <= ancestors(exp, "nova", "k1")
    assert "nova@k1" in ancestors(exp, "after", "m")


def test_a_member_of_two_ordered_groups_on_one_node_runs_in_the_earlier_one() -> None:
    nodes = [GraphNode("both", ("controller", "compute")), GraphNode("k", ("compute",))]
    exp = expand([
        t("controllers", "group", roles=["controller"]),
        t("computes", "group", roles=["compute"], requires=["controllers"]),
        t("hiera", groups=["controllers", "computes"]),
        t("nova", groups=["computes"], requires=["hiera"]),
        t("solo", "group", roles=["compute"], tasks=["hiera"]),  # unordered with both: hiera is its member too
    ], nodes)
    assert [exp.key(i) for i in exp.members["controllers"]] == ["hiera@both"]
    assert [exp.key(i) for i in exp.members["computes"]] == ["hiera@k", "nova@both", "nova@k"]
    assert [exp.key(i) for i in exp.members["solo"]] == ["hiera@both", "hiera@k"]
    assert {"hiera@both", "controllers"} <= ancestors(exp, "nova", "both")
    assert "hiera@both" in ancestors(exp, "nova", "k")


def test_a_task_listed_by_a_group_is_its_member_on_the_groups_nodes_only() -> None:
    exp = expand([t("computes", "group", roles=["compute"], tasks=["a", "deploy_start"]), *stage_tasks()[:3],
                  t("a", roles=["master"])], NODES)
    assert [exp.key(i) for i in exp.members["computes"]] == ["a@k1", "a@k2"]  # not a@m, not the stage
    assert waits(exp, "a", "m") == set()


def test_a_member_that_requires_its_own_group_is_a_cycle_naming_it() -> None:
    with pytest.raises(GraphError, match=r"dependency cycle .*a@k1.*computes"):
        expand([t("computes", "group", roles=["compute"]), t("a", groups=["computes"], requires=["computes"])],
               NODES)


def test_groups_ordered_through_stages_take_a_shared_instance_in_the_earlier_one() -> None:
    nodes = [GraphNode("both", ("controller", "compute"))]
    exp = expand([*stage_tasks(),
                  t("early", "group", roles=["controller"], required_for=["deploy_end"]),
                  t("late", "group", roles=["compute"], requires=["post_deployment_start"]),
                  t("hiera", groups=["late", "early"])], nodes)  # the order written does not matter
    assert [exp.key(i) for i in exp.members["early"]] == ["hiera@both"] and exp.members["late"] == []
    assert "hiera@both" in ancestors(exp, "late")
