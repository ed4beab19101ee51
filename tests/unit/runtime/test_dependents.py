"""Which objects refer to one that changed (`dependents.referrers`): those named after it are looked up by
name, not found by a scan of every object of the kind (issue 31, item 9: one scan per App change made a
transfer's cost grow with the inventory)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operators.runtime.core.kinds import Kind, named_after
from operators.runtime.core.pipeline import Observed
from operators.runtime.engine.reconciler import dependents
from operators.runtime.engine.reconciler.table import ObjectTable, Tracked


def seen(namespace: str, name: str) -> Observed:
    return Observed.from_body({"kind": "Instance", "metadata": {
        "namespace": namespace, "name": name, "uid": f"u-{name}", "generation": 1}, "spec": {"app": name}})


@dataclass(frozen=True)
class Referring:
    """What `referrers` reads of a kind: its name and what it depends on."""

    depends_on: dict[str, Any]
    kind: str = "Instance"


def kind(refers: Any) -> Kind:
    return Referring({"App": refers})  # type: ignore[return-value]


class Unscannable(ObjectTable):
    def items(self) -> list[tuple[str, Tracked]]:
        raise AssertionError("scanned every object")


def table(cls: type[ObjectTable] = ObjectTable) -> ObjectTable:
    out = cls()
    for namespace, name in (("a", "db-1"), ("a", "db-2"), ("b", "db-1")):
        out.record(f"Instance/{namespace}/{name}").seen = seen(namespace, name)
    return out


def names(found: Any) -> list[str]:
    return [key for key, _ in found]


def test_the_referrer_named_after_an_object_is_looked_up_not_scanned_for() -> None:
    found = dependents.referrers(table(Unscannable), kind(named_after), "App", "a", "db-1", lambda _: True)
    assert names(found) == ["Instance/a/db-1"]
    assert names(dependents.referrers(table(Unscannable), kind(named_after), "App", "a", "db-9", lambda _: True)) == []


def test_a_test_of_the_spec_still_finds_every_referrer_of_the_namespace() -> None:
    found = dependents.referrers(table(), kind(lambda spec, name: spec.get("app") == name), "App", "a", "db-2",
                                 lambda _: True)
    assert names(found) == ["Instance/a/db-2"]
    # a cluster-scoped object (namespace ""): its namesakes in every namespace
    assert names(dependents.referrers(table(), kind(named_after), "App", "", "db-1", lambda _: True)) == [
        "Instance/a/db-1", "Instance/b/db-1"]


def test_a_test_of_the_spec_is_made_only_of_the_objects_of_the_namespace() -> None:
    tested: list[str] = []

    def refers(spec: Any, name: str) -> bool:
        tested.append(spec["app"])
        return True

    found = dependents.referrers(table(), kind(refers), "App", "b", "x", lambda _: True)
    assert names(found) == ["Instance/b/db-1"]
    assert tested == ["db-1"]  # namespace a's two objects were never tested: the keys said they are elsewhere


def test_a_namespaced_objects_referrers_are_read_from_the_tables_namespace_index() -> None:
    found = dependents.referrers(table(Unscannable), kind(lambda spec, name: spec.get("app") == name), "App", "a",
                                 "db-2", lambda _: True)
    assert names(found) == ["Instance/a/db-2"]
    emptied = table()
    emptied.went("Instance/b/db-1")
    assert emptied.in_namespace("b") == [] and [k for k, _ in emptied.in_namespace("a")] == [
        "Instance/a/db-1", "Instance/a/db-2"]
