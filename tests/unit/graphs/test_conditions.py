"""yaql conditions with Fuel's change functions, force, legacy strings and bounds."""

from __future__ import annotations

from typing import Any

import pytest

from operators.graphs import ConditionError, TaskCondition, compile_expression, evaluate, evaluations
from operators.graphs import conditions as cond
from operators.graphs.conditions import evaluate_expression

NEW: dict[str, Any] = {"a": {"b": 1}, "l": [1, 2], "roles": ["primary-controller"], "same": {"k": "v"}}
OLD: dict[str, Any] = {"a": {"b": 2}, "l": [1, 3], "roles": ["primary-controller"], "same": {"k": "v"}}


def y(text: str) -> TaskCondition:
    return TaskCondition(yaql_exp=text)


@pytest.mark.parametrize(("text", "with_last", "without_last"), [
    ("changed($.a.b)", True, True),
    ("changed($.same)", False, True),
    ("changedAny($.same, $.a)", True, True),
    ("changedAny($.same, $.roles)", False, True),
    ("changedAll($.a, $.l)", True, True),
    ("changedAll($.a, $.same)", False, True),
    ("changed($.get('missing'))", False, True),
    ("changed($.nested.deep)", True, True),  # fails on old data (none there): a change, as in Fuel
    ("'primary-controller' in $.roles and not changed($.roles)", True, False),
])
def test_change_functions(text: str, with_last: bool, without_last: bool) -> None:
    new = {**NEW, "nested": {"deep": 1}}
    assert evaluate(y(text), new, OLD) is with_last
    assert evaluate(y(text), new, None) is without_last


def test_values_of_new_old_added_deleted() -> None:
    assert evaluate_expression("new($.a.b)", NEW, OLD) == 1
    assert evaluate_expression("old($.a.b)", NEW, OLD) == 2
    assert evaluate_expression("added($.l)", NEW, OLD) == [2]
    assert evaluate_expression("deleted($.l)", NEW, OLD) == [3]
    assert evaluate_expression("added($.a)", NEW, OLD) == {"b": 1}
    assert evaluate_expression("deleted($.a)", NEW, OLD) == {"b": 2}
    assert evaluate_expression("added($.l)", NEW, None) == [1, 2]
    assert evaluate_expression("deleted($.l)", NEW, None) is None
    assert evaluate_expression("old($.a).isUndef()", NEW, None) is True
    assert evaluate_expression("old($.a).isUndef()", NEW, OLD) is False


def test_force_makes_every_change_true() -> None:
    assert evaluate(y("changed($.same)"), NEW, OLD) is False
    assert evaluate(y("changed($.same)"), NEW, OLD, force=True) is True
    assert evaluate(y("changedAll($.same, $.roles)"), NEW, OLD, force=True) is True
    assert evaluate(y("not changed($.same)"), NEW, OLD, force=True) is False


def test_selections_compare_by_value_not_identity() -> None:
    data = {"nodes": {"n1": {"node_roles": ["controller"], "r": 1}, "n2": {"node_roles": ["compute"], "r": 2}}}
    text = "changed($.nodes.values().where($.node_roles.any($.matches('controller'))).select($.r))"
    assert evaluate(y(text), data, data) is False
    assert evaluate(y(text), data, {"nodes": {"n1": {"node_roles": ["controller"], "r": 9}}}) is True


def test_legacy_conditions() -> None:
    assert evaluate(TaskCondition(legacy="true"), {}, None) is True
    assert evaluate(TaskCondition(legacy="False"), {}, None) is False
    with pytest.raises(ConditionError, match=r"legacy condition .* is not supported"):
        evaluate(TaskCondition(legacy="cluster:status == 'operational'"), {}, None)


def test_no_condition_is_true() -> None:
    assert evaluate(None, {}, None) is True


def test_expressions_are_compiled_once() -> None:
    assert compile_expression("changed($.zz)") is compile_expression("changed($.zz)")


def test_errors_are_condition_errors() -> None:
    with pytest.raises(ConditionError, match="does not parse"):
        evaluate(y("changed($.a"), NEW, OLD)
    with pytest.raises(ConditionError, match="KeyError"):
        evaluate(y("$.missing"), NEW, OLD)


@pytest.mark.parametrize(("text", "message"), [
    ("sequence().sum() > 0", "collection exceeds|longer than"),
    ("range(100000000).len() > 0", "collection exceeds"),
    ("len('a' * 100000000) > 0", "memory quota"),
    ("range(5000).select(range(5000).sum()).sum() > 0", "longer than"),
    ("range(5000).select(range(5000).len()).sum() > 0", "longer than"),  # len() takes a bare iterator
    ("repeat(1).len() > 0", "collection exceeds"),
    ("1.repeat().len() > 0", "collection exceeds"),
    ("[1, 2].cycle().len() > 0", "collection exceeds"),
])
def test_hostile_expressions_are_bounded(text: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cond, "TIME_BUDGET_SECONDS", 0.2)
    with pytest.raises(ConditionError, match=message):
        evaluate(y(text), {}, None)


# --- what upload refuses beyond parsing -----------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("$.node.name = cmp-1", "yaqlExp '$.node.name = cmp-1': the bare word 'cmp' is an operand of a subtraction "
                            "(yaql reads 'cmp-1' as a subtraction, which cannot take a string): quote the name "
                            "('cmp-1')"),
    ("'primary-controller' in $.roles and $.role = primary-controller", "quote the name ('primary-controller')"),
    ("changedAny($.a, $.b) and chnaged($.c)", "no function 'chnaged' in yaql or Fuel's functions"),
    ("$.nodes.values().lenght() > 1", "no method 'lenght' in yaql or Fuel's functions"),
    ("isUndef(old($.a))", "no function 'isUndef'"),  # a method only: old($.a).isUndef()
])
def test_conditions_that_can_only_fail_are_refused_naming_the_expression(text: str, message: str) -> None:
    problem = cond.condition_problem(y(text))
    assert problem is not None and message in problem, problem
    with pytest.raises(ConditionError):  # and they do fail, whatever the data
        evaluate(y(text), {**NEW, "node": {"name": "cmp-1"}, "role": "x", "nodes": {}, "b": 1, "c": 2}, OLD)


@pytest.mark.parametrize("text", [
    "$.node.name = 'cmp-1'", "$.role = compute", "$.a.b - 1 > 0", "len($.l) > 1 and $.l.len() > 1",
    "old($.a).isUndef()", "let(x => 1) -> $x = 1", "dict(a => 1).a = 1", "def(f, $ * 2) -> f(2) = 4",
    "$.nodes.values().where($.node_roles.any($.matches('controller'))).select($.r).len() >= 0",
    "changedAny($.quantum, $.get('database_vip'), $.get('region', 'RegionOne'))",
])
def test_what_yaql_takes_is_not_refused(text: str) -> None:
    assert cond.condition_problem(y(text)) is None


def test_fuel_librarys_conditions_pass_the_checks() -> None:
    from tests.unit.graphs.support import fuel_library_tasks

    conditions = [t.condition for t in fuel_library_tasks() if t.condition is not None]
    assert len(conditions) > 10 and [cond.condition_problem(c) for c in conditions] == [None] * len(conditions)


# --- Fuel's $.get(key, default) -------------------------------------------------------------------------

DATA: dict[str, Any] = {"astute": {"debug": True, "region": "r1", "port": 1}, "nova": {"port": 2},
                        "node": {"name": "cmp-1", "roles": ["compute"]}, "nodes": []}


@pytest.mark.parametrize(("text", "value"), [
    ("$.astute.get('debug', false)", True),          # Stead's own spelling: the resource named
    ("$.get('debug', false)", True),                 # Fuel's: the one resource that has the key
    ("$.get('region')", "r1"),
    ("$.get('missing', 'RegionOne')", "RegionOne"),  # no resource has it: the default
    ("$.get('missing')", None),
    ("$.get('astute').port", 1),                     # a key of $ itself (a resource) is that
    ("$.get('node').name", "cmp-1"),
    ("$.get('name', 'none')", "none"),               # node and nodes are not resources
    ("$.nova.get('debug', 'd')", "d"),               # any other mapping: yaql's own get
    ("$.astute.get('port')", 1),
])
def test_fuel_get_reads_the_one_resource_that_has_the_key(text: str, value: Any) -> None:
    assert evaluate_expression(text, DATA, None) == value


def test_fuel_get_of_a_key_several_resources_have_names_them_never_a_value() -> None:
    with pytest.raises(ConditionError) as error:
        evaluate_expression("$.get('port', 0) > 1", DATA, None)
    assert str(error.value) == ("$.get('port'): the key is in several resources (astute, nova): name one, e.g. "
                                "$.astute.get('port', ...)")


def test_fuel_get_compares_with_the_last_runs_data_too() -> None:
    old = {**DATA, "astute": {**DATA["astute"], "debug": False}}
    assert evaluate(y("changed($.get('debug', false))"), DATA, old) is True
    assert evaluate(y("changed($.get('region'))"), DATA, old) is False
    assert evaluate_expression("old($.get('debug'))", DATA, old) is False


@pytest.mark.parametrize(("text", "expected"), [
    ("changedAny($.a.b, $?.c, $.get('d', 1), $.e.select($.f))", ({"a", "c", "e", "f"}, {"d"})),
    ("$.x and $.y.keys().first() = 'k'", ({"x", "y"}, set())),
    ("len($) > 1", None),
    ("$['a']", None),
    ("$.keys()", None),
    ("$.get($.k)", None),
    ("let(a => 1) -> $a", None),
    ("(", None),
])
def test_reads_names_every_key_of_data_an_expression_can_read(text: str, expected: Any) -> None:
    read = evaluations.reads(text)
    assert (read if read is None else (set(read[0]), set(read[1]))) == expected


def test_nodes_that_read_the_same_values_share_one_evaluation_and_a_failure_is_never_shared() -> None:
    shared = evaluations.SharedEvaluations(force=False)
    same = {"a": {"x": 1}, "node": {"name": "n1"}}
    condition = TaskCondition.model_validate({"yaql_exp": "changed($.a)"})
    assert shared.evaluate(condition, "n1", same, same) is False
    assert shared.evaluate(condition, "n2", {**same, "node": {"name": "n2"}}, same) is False
    assert shared.evaluated == 1  # `node` is not read
    assert shared.evaluate(condition, "n3", {**same, "a": {"x": 2}}, same) is True
    assert shared.evaluate(condition, "n4", same, None) is True  # no last run
    assert shared.evaluated == 3
    whole = TaskCondition.model_validate({"yaql_exp": "len($) = 2"})
    assert [shared.evaluate(whole, n, same, same) for n in ("n1", "n2")] == [True, True] and shared.evaluated == 5
    failing = TaskCondition.model_validate({"yaql_exp": "$.b.c"})
    for node in ("n1", "n2"):
        with pytest.raises(ConditionError):
            shared.evaluate(failing, node, same, same)
    assert shared.evaluated == 7
