"""Fuel's task files as published: loading, the repeated-key rule, errors, and writing back."""

from __future__ import annotations

import pytest
import yaml

from operators.graphs import FuelFormatError, dump_tasks, load_dir, load_tasks
from tests.unit.graphs.support import FUEL_LIBRARY, fuel_library_tasks


def test_the_fuel_library_file_loads() -> None:
    tasks = fuel_library_tasks()
    assert len(tasks) == 21
    by_id = {t.id: t for t in tasks}
    start = by_id["openstack-network-start"]
    # the task that repeats `version` and `tags` (same values both times): accepted
    assert start.type == "skipped" and start.version == "2.2.0"
    assert start.tags == ["compute", "primary-neutron", "neutron"]
    assert start.cross_depends[0].name == "netconfig" and start.cross_depends[0].role == ["self"]
    assert start.cross_depends[-1].name == "/^(primary-)?rabbitmq$/" and start.cross_depends[-1].role == ["*"]
    assert start.required_for == ["openstack-network-common-config"]
    # YAML anchors: the same condition text on two tasks
    server = by_id["openstack-network-server-config"].condition
    primary = by_id["primary-openstack-network-server-config"].condition
    assert server is not None and primary is not None and server.yaql_exp == primary.yaql_exp
    assert server.yaql_exp is not None and server.yaql_exp.startswith("changedAny($.quantum")
    l3 = by_id["openstack-network-agents-l3"]
    assert l3.cross_depends[0].role == ["/^(primary-)?neutron$/"]
    assert by_id["openstack-network-agents-sriov"].groups == ["compute"]
    assert by_id["primary-openstack-network-server-config"].reexecute_on == ["deploy_changes"]


def test_a_key_repeated_with_another_value_is_an_error_naming_file_task_and_key() -> None:
    text = "- id: a\n  type: shell\n- id: netconfig\n  type: puppet\n  version: 2.0.0\n  tags: [x]\n  version: 2.1.0\n"
    with pytest.raises(FuelFormatError) as error:
        load_tasks(text, "tasks.yaml")
    assert str(error.value).startswith("tasks.yaml:7: task 'netconfig': key 'version' is repeated with a different")


def test_a_key_repeated_with_the_same_value_is_accepted_and_merge_keys_are_not_repeats() -> None:
    tasks = load_tasks("- &base {id: a, type: shell, roles: [x]}\n- <<: *base\n  id: b\n  roles: [y]\n"
                       "- {id: c, type: shell, tags: [t], tags: [t]}\n")
    assert [(t.id, t.roles) for t in tasks] == [("a", ["x"]), ("b", ["y"]), ("c", [])]


def test_fuel_spellings_translate() -> None:
    [task] = load_tasks(
        "- id: x\n  type: group\n  role: '*'\n  tasks: [y]\n  fault_tolerance: 1\n  test_pre: {cmd: ls}\n"
        "  condition: 'true'\n  cross_depended_by: [{name: z, role: master, policy: any}]\n"
    )
    assert task.roles == ["*"] and task.fault_tolerance == "1"
    assert task.custom == {"test_pre": {"cmd": "ls"}}
    assert task.condition is not None and task.condition.legacy == "true"
    assert task.cross_depended_by[0].role == ["master"] and task.cross_depended_by[0].policy == "any"


@pytest.mark.parametrize(("text", "message"), [
    ("- id: a\n  type: nope\n", "f.yaml: tasks[0] (a).type: Input should be"),
    ("- id: a\n  type: shell\n  cross-depends: {yaql_exp: '$.x'}\n",
     "f.yaml: tasks[0] (a).cross-depends: the {yaql_exp: ...} form is not supported"),
    ("- id: a\n  type: shell\n  cross-depends: [{role: self}]\n", "f.yaml: tasks[0] (a).cross-depends[0].name: Field"),
    ("- id: a\n  type: shell\n  condition: {other: 1}\n", "f.yaml: tasks[0] (a).condition: a string or"),
    ("- id: a\n  type: shell\n  role: [x]\n  roles: [y]\n", "f.yaml: tasks[0] (a).roles: conflicts"),
    ("{id: a}\n", "f.yaml: a task file is a list of tasks"),
    ("- [a]\n", "f.yaml: tasks[0]: a task is a mapping"),
    ("- id: a\n  type: shell\n  x: [\n", "f.yaml:4:1: not YAML: expected the node content"),
])
def test_bad_input_is_named(text: str, message: str) -> None:
    with pytest.raises(FuelFormatError) as error:
        load_tasks(text, "f.yaml")
    assert str(error.value).startswith(message), str(error.value)


def test_download_writes_fuel_form_and_reads_back_the_same() -> None:
    tasks = fuel_library_tasks()
    text = dump_tasks(tasks)
    raw = yaml.safe_load(text)
    start = next(t for t in raw if t["id"] == "openstack-network-start")
    assert start["cross-depends"][0] == {"name": "netconfig", "role": "self"}
    assert start["required_for"] == ["openstack-network-common-config"]
    assert "crossDepends" not in start and "custom" not in start
    assert next(t for t in raw if t["id"] == "neutron-db")["condition"]["yaql_exp"].startswith("changedAny(")
    assert load_tasks(text) == tasks
    custom = load_tasks("- {id: a, type: shell, role: '*', test_post: {cmd: x}, fault_tolerance: '-1'}\n")
    assert yaml.safe_load(dump_tasks(custom)) == [
        {"id": "a", "type": "shell", "roles": "*", "fault_tolerance": -1, "test_post": {"cmd": "x"}}]


def test_a_directory_loads_every_task_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "tasks.yaml").write_text("- {id: b, type: shell}\n")
    (tmp_path / "a.yaml").write_text(FUEL_LIBRARY.read_text())
    (tmp_path / "notes.txt").write_text("not tasks")
    tasks = load_dir(tmp_path)
    assert len(tasks) == 22 and tasks[-1].id == "b"
