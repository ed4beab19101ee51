"""The workflow model: what a valid DAG is, how instances and their requirements expand."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pipelines.model import Instance, Workflow, find_cycle


def wf(*steps: dict[str, Any], **extra: Any) -> Workflow:
    return Workflow.model_validate({"steps": list(steps), **extra})


def test_minimal_workflow_and_defaults() -> None:
    w = wf({"id": "a", "type": "noop"})
    step = w.step("a")
    assert (step.retries, step.timeout_seconds, step.target, step.depends_on) == (0, None, [], [])
    assert list(w.instances()) == [Instance("a")]
    assert w.parallelism == 8 and not w.continue_on_failure


def test_camel_case_fields_and_shorthands() -> None:
    w = wf(
        {"id": "a", "type": "noop", "target": "r1"},
        {"id": "b", "type": "noop", "dependsOn": ["a"], "retries": 2, "retryIntervalSeconds": 1.5, "timeoutSeconds": 9},
        continueOnFailure=True,
    )
    b = w.step("b")
    assert w.step("a").target == ["r1"]
    assert [d.step for d in b.depends_on] == ["a"] and b.depends_on[0].targets == "same"
    assert (b.retries, b.retry_interval_seconds, b.timeout_seconds) == (2, 1.5, 9)
    assert w.continue_on_failure


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"id": "a", "type": "x"}, {"id": "a", "type": "x"}],
         "steps[1].id: duplicate step id 'a' (first at steps[0])"),
        ([{"id": "a", "type": "x", "dependsOn": ["zz"]}], "depends on 'zz', which is not a step"),
        ([{"id": "a", "type": "x", "dependsOn": ["a"]}], "depends on itself"),
        ([{"id": "a@b", "type": "x"}], "step id 'a@b' must match"),
        ([{"id": "a", "type": "x", "target": ["r/1"]}], "target 'r/1' must match"),
        ([{"id": "a", "type": "x", "target": ["r", "r"]}], "target 'r' is listed twice"),
        ([{"id": "a", "type": "x", "retries": -1}], "greater than or equal to 0"),
        ([{"id": "a", "type": "x", "timeoutSeconds": 0}], "greater than 0"),
        ([{"id": "a", "type": "x", "bogus": 1}], "Extra inputs are not permitted"),
    ],
)
def test_invalid_workflows_name_the_problem(steps: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        wf(*steps)


def test_cycles_are_named() -> None:
    message = "dependency cycle (each step waits for the next): b -> d -> c -> b"
    with pytest.raises(ValidationError, match=re.escape(message)):
        wf(
            {"id": "a", "type": "x"},
            {"id": "b", "type": "x", "dependsOn": ["a", "d"]},
            {"id": "c", "type": "x", "dependsOn": ["b"]},
            {"id": "d", "type": "x", "dependsOn": ["c"]},
        )


def test_secrets_may_not_shadow_variables() -> None:
    with pytest.raises(ValidationError, match="share names: pw"):
        wf({"id": "a", "type": "x"}, variables={"pw": "x"}, secrets={"pw": "ref"})


def test_requirements_bind_same_target_or_all() -> None:
    w = wf(
        {"id": "install", "type": "x", "target": ["r1", "r2"]},
        {"id": "start", "type": "x", "target": ["r1", "r2"], "dependsOn": ["install"]},
        {"id": "lb", "type": "x", "target": ["r1"], "dependsOn": [{"step": "start", "targets": "all"}]},
        {"id": "done", "type": "x", "dependsOn": ["lb", "start"]},
        {"id": "other", "type": "x", "target": ["r3"], "dependsOn": ["install"]},
    )
    req = w.requirements()
    assert req[Instance("start", "r1")] == [Instance("install", "r1")]
    assert req[Instance("lb", "r1")] == [Instance("start", "r1"), Instance("start", "r2")]
    assert req[Instance("done")] == [Instance("lb", "r1"), Instance("start", "r1"), Instance("start", "r2")]
    # r3 has no instance of `install`: it waits for all of them
    assert req[Instance("other", "r3")] == [Instance("install", "r1"), Instance("install", "r2")]


def test_instance_keys_round_trip() -> None:
    assert Instance("a", "r1").key == "a@r1" and Instance.parse("a@r1") == Instance("a", "r1")
    assert Instance("a").key == "a" and Instance.parse("a") == Instance("a")


def test_a_long_chain_validates_without_recursion() -> None:
    steps = [{"id": f"s{i}", "type": "noop", **({"dependsOn": [f"s{i - 1}"]} if i else {})} for i in range(5000)]
    assert len(list(wf(*steps).instances())) == 5000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=0, max_value=11), max_size=4), min_size=1, max_size=12))
def test_find_cycle_agrees_with_a_topological_sort(edges: list[list[int]]) -> None:
    graph = {str(i): sorted({str(j) for j in deps if j < len(edges)}) for i, deps in enumerate(edges)}
    cycle = find_cycle(graph)
    # Kahn's algorithm decides whether a cycle exists
    indeg = {n: len(d) for n, d in graph.items()}
    users: dict[str, list[str]] = {n: [] for n in graph}
    for n, deps in graph.items():
        for d in deps:
            users[d].append(n)
    ready = [n for n, k in indeg.items() if k == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    assert bool(cycle) == (seen < len(graph))
    if cycle:
        assert cycle[0] == cycle[-1]
        for a, b in itertools.pairwise(cycle):
            assert b in graph[a]
