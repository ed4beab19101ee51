"""What a tenant's graph may cost the operator (issue 25, findings 1 and 15): regexes in linear time
(RE2), planning in a limited process of its own, bounded plans and admission, and condition errors
that never quote the data (ConfigValues, which `view` may not read)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from operators.graphs import expansion, plan
from operators.graphs.conditions import ConditionError, compile_expression, evaluate_expression
from operators.graphs.models import GraphRunSpec, GraphSelection, Task, check_graph, check_run, check_tasks
from operators.graphs.plan import PlanError, make_plan, plan_run
from operators.graphs.planner import PlanFailed, PlanLimits, make_plan_document, mask_values, plan_in_process

EVIL = "'" + "a" * 40 + "!' =~ '(a+)+$'"
"""Python's re needs about 2^40 steps for this; the issue's 29-character version froze the loop 77 s."""
PASSWORD = "pw-S3cret-7Hq2"
NODES = [{"name": "n1", "roles": ["controller"]}, {"name": "n2", "roles": ["compute"]}]


def task(task_id: str, **more: Any) -> Task:
    return Task.model_validate({"id": task_id, "type": "shell", "roles": ["*"], **more})


def test_a_backtracking_regex_in_a_condition_answers_at_once() -> None:
    evaluate_expression("'a' =~ 'a'", {}, None)  # the engine made, the parser loaded
    started = time.process_time()
    assert evaluate_expression(EVIL, {}, None) is False
    assert evaluate_expression("regex('(a+)+$').matches('" + "a" * 40 + "!')", {}, None) is False
    assert time.process_time() - started < 1  # re: about 2^40 steps


def test_yaqls_regex_functions_keep_their_meaning_over_re2() -> None:
    def ev(text: str) -> Any:
        return evaluate_expression(text, {"s": "abcadc"}, None)

    assert ev("$.s =~ 'a.c'") is True and ev("$.s !~ 'x'") is True
    assert ev("regex('A.C', ignoreCase => true).matches($.s)") is True
    assert ev("$.s.matches('^abc')") is True
    assert ev("regex('a(.)c').search($.s, $2.value)") == "b"
    assert ev("regex('a.c').searchAll($.s)") == ["abc", "adc"]
    assert ev("$.s.replace(regex('a.'), 'x')") == "xcxc"
    assert ev("regex('c').split($.s)") == ["ab", "ad", ""]
    assert ev("escapeRegex('a.b')") == "a\\.b"
    assert ev("isRegex(regex('a'))") is True


def test_a_pattern_that_needs_backtracking_is_refused_naming_the_field() -> None:
    with pytest.raises(ConditionError, match="RE2 refuses"):
        evaluate_expression("'aa' =~ '(a)\\\\1'", {}, None)
    problems = check_graph({"release": "r", "tasks": [
        {"id": "t", "type": "shell", "roles": ["/(a)\\1/"], "requires": ["/(?=x)/"]}]})
    assert any(p.startswith("spec.tasks[0] (t).roles[0]: invalid regex") and "RE2" in p for p in problems)
    assert any(p.startswith("spec.tasks[0] (t).requires[0]: invalid regex") for p in problems)


def test_a_stored_role_regex_re2_refuses_fails_the_plan_naming_it() -> None:
    stored = Task.model_construct(**{**task("t").__dict__, "roles": ["/(x)\\1/"]})  # stored before RE2 checked
    with pytest.raises(expansion.GraphError, match=r"role or tag '/\(x\)\\\\1/': invalid regex"):
        make_plan([(GraphSelection(type="default"), [stored])], NODES)


def test_a_runs_subgraph_regex_is_linear_and_checked_at_admission() -> None:
    ids = ["a" * 60 + "-", "deploy"]
    spec = GraphRunSpec.model_validate({"environment": "e", "graphs": [{"type": "default"}],
                                        "subgraphs": [{"start": ["/^(a+)+$/"], "end": ["deploy"]}]})
    started = time.process_time()
    with pytest.raises(PlanError, match=r"subgraphs\[0\].start"):  # matches nothing, at once
        plan_run(spec, {"default": [task(i) for i in ids]}, NODES)
    assert time.process_time() - started < 1
    assert check_run({"environment": "e", "graphs": [{}], "subgraphs": [{"end": ["/(x)\\1/"]}]}) == [
        "spec.subgraphs[0].end[0]: invalid regex '/(x)\\\\1/': invalid escape sequence: \\1 "
        "(RE2 syntax: no backreferences or lookaround)"]


def test_admission_parses_a_bounded_amount_of_condition_text() -> None:
    tasks = [task(f"t{i}", condition={"yaqlExp": f"$.x{i} = " + "1 + " * 2000 + "1"}) for i in range(10)]
    parsed = compile_expression.cache_info().misses
    problems = check_tasks(tasks)
    assert compile_expression.cache_info().misses == parsed  # none of it parsed
    total = sum(len(t.condition.yaql_exp or "") for t in tasks if t.condition)
    assert problems == [f"spec.tasks: the conditions total {total} "
                        "characters (distinct yaqlExp texts), more than 65536: share conditions between tasks (YAML "
                        "anchors) or split the graph"]


def test_admission_compiles_a_bounded_number_of_regexes() -> None:
    tasks = [task(f"t{i}", requires=[f"/^x{i}-{j}$/" for j in range(200)]) for i in range(11)]
    assert check_tasks(tasks) == ["spec.tasks: 2200 distinct /regex/ references, more than 2000: name tasks and "
                                  "roles, or share patterns"]


def test_a_plan_is_bounded_in_instances_bindings_and_conditions(monkeypatch: pytest.MonkeyPatch) -> None:
    selection = GraphSelection(type="default")
    monkeypatch.setattr(expansion, "MAX_INSTANCES", 3)
    monkeypatch.setattr(plan, "MAX_INSTANCES", 3)
    with pytest.raises(expansion.GraphError, match="more than 3 task instances"):
        make_plan([(selection, [task("a"), task("b")])], NODES)
    monkeypatch.setattr(expansion, "MAX_INSTANCES", 100)
    monkeypatch.setattr(plan, "MAX_INSTANCES", 100)
    monkeypatch.setattr(expansion, "MAX_BINDINGS", 3)
    with pytest.raises(expansion.GraphError, match="task 'b': crossDepends: the graph binds more than 3"):
        make_plan([(selection, [task("a"), task("b", crossDepends=[{"name": "a"}])])], NODES)
    monkeypatch.setattr(plan, "MAX_CONDITION_EVALUATIONS", 3)
    tasks = [task(f"c{i}", condition={"yaqlExp": f"{i} > 0"}) for i in range(3)]
    with pytest.raises(PlanError, match="more than 3 conditions"):
        make_plan([(selection, tasks)], NODES)


SECRET_DATA = {"db": {"password": PASSWORD, "port": "5432"}, "zero": 0}


@pytest.mark.parametrize("expression", [
    "int($.db.password) > 0",                 # ValueError: invalid literal for int(): 'pw-...'
    "$.db.password.nosuch()",                 # NoMatchingMethodException quotes the receiver
    "$.db.password + 1",                      # NoMatchingFunctionException
    "$.db[$.db.password]",                    # KeyError of the value
    "1 / $.zero",
    "$.db.password =~ concat('(', $.db.password, ')\\\\1')",  # RE2's refusal would quote the pattern
])
def test_a_failing_condition_never_quotes_the_data(expression: str) -> None:
    with pytest.raises(ConditionError) as failed:
        evaluate_expression(expression, SECRET_DATA, None)
    assert PASSWORD not in str(failed.value) and "S3cret" not in str(failed.value), str(failed.value)


def test_errors_are_masked_with_the_nodes_configuration_values_but_not_their_names() -> None:
    data = {"n1": {**SECRET_DATA, "node": {"name": "n1"}, "nodes": [{"name": "n1"}]}}
    masked = mask_values(f"task 'x' on n1: {PASSWORD!r} and {PASSWORD.encode().hex()}", data)
    assert PASSWORD not in masked and PASSWORD.encode().hex() not in masked and "on n1" in masked


def _payload(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"spec": {"environment": "e", "graphs": [{"type": "default"}], "dryRun": True},
            "merged": {"default": tasks}, "nodes": [{**n, "address": "10.0.0.1"} for n in NODES],
            "nodeData": {"n1": {}, "n2": {}}, "lastData": None,
            "privateKeyRef": "k", "name": "ns/r"}


async def _no_variables() -> dict[str, str]:
    return {"ssh_known_hosts": "hosts"}


def test_the_planner_process_writes_the_plan_and_returns_its_facts(tmp_path: Path) -> None:
    facts = asyncio.run(plan_in_process(_payload([{"id": "t", "type": "shell", "roles": ["*"],
                                                   "condition": {"yaqlExp": EVIL}}]), tmp_path / "plan.json",
                                        _no_variables))
    assert facts["state"] == "Succeeded" and facts["plan"]["skipped"] == 2
    assert '"ssh_known_hosts": "hosts"' in (tmp_path / "plan.json").read_text()


def test_a_planner_past_its_cpu_limit_is_stopped_and_the_plan_fails_saying_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    burn = "range(10000).select(range(10000).len()).sum() > 0"  # about a second each (the per-condition bound)
    tasks = [{"id": f"t{i}", "type": "shell", "roles": ["*"], "condition": {"yaqlExp": f"{i} > 0 and {burn}"}}
             for i in range(6)]
    started = time.monotonic()
    with pytest.raises(PlanFailed) as failed:
        asyncio.run(plan_in_process(_payload(tasks), tmp_path / "plan.json", _no_variables,
                                    PlanLimits(cpu_seconds=1, wall_seconds=20)))
    assert failed.value.reason == "PlanTooCostly" and "more than 1s of CPU" in failed.value.message
    assert time.monotonic() - started < 10 and not (tmp_path / "plan.json").exists()
    with pytest.raises(PlanFailed, match=r"longer than 1\.5s"):
        asyncio.run(plan_in_process(_payload(tasks), tmp_path / "plan.json", _no_variables,
                                    PlanLimits(cpu_seconds=30, wall_seconds=1.5)))



def test_the_planner_limits_itself_and_offers_itself_to_the_oom_killer() -> None:
    probe = ("import resource; from operators.graphs.planner import _limit, PlanLimits; "
             "_limit(PlanLimits(cpu_seconds=7, memory_bytes=1 << 30)); "
             "print(resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_AS), "
             "open('/proc/self/oom_score_adj').read().strip())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["(7,", "8)", f"({1 << 30},", f"{1 << 30})", "1000"]


def test_the_planner_masks_a_failed_plans_message_with_the_configuration() -> None:
    payload = _payload([{"id": "t", "type": "shell", "roles": ["*"]}])
    payload["spec"]["graphs"] = [{"type": "default", "tasks": [PASSWORD]}]  # a problem that names it
    payload["nodeData"] = {"n1": SECRET_DATA, "n2": {}}
    with pytest.raises(PlanFailed) as failed:
        make_plan_document(payload)
    assert "graphs[0].tasks: '***" in failed.value.message and PASSWORD not in failed.value.message
