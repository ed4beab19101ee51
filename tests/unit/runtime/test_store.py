"""The LMDB store: records survive reopening, deletes respect the object's incarnation."""

from __future__ import annotations

from pathlib import Path

from operators.runtime.core.pipeline import StoredRecord
from operators.runtime.core.store import LocalStore, object_key


def test_put_get_survives_reopen(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "db")
    key = object_key("Environment", "ns", "a")
    store.put(key, StoredRecord("u1", 3, {"release": "r"}, {"phase": "Provisioned"}))
    store.close()
    reopened = LocalStore(tmp_path / "db")
    assert reopened.get(key) == StoredRecord("u1", 3, {"release": "r"}, {"phase": "Provisioned"})
    assert reopened.get(object_key("Environment", "ns", "missing")) is None
    reopened.close()


def test_delete_only_the_same_incarnation(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "db")
    key = object_key("Environment", "ns", "a")
    store.put(key, StoredRecord("u2", 1, {}, {}))
    assert not store.delete(key, uid="u1")  # an old object's DELETED event arriving late
    assert store.get(key) is not None
    assert store.delete(key, uid="u2")
    assert store.get(key) is None
    assert not store.delete(key)
    store.close()


def test_items_are_scoped_to_one_kind(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "db")
    for name in ("b", "a"):
        store.put(object_key("Environment", "ns", name), StoredRecord(name, 1, {}, {}))
    store.put(object_key("Environments", "ns", "x"), StoredRecord("x", 1, {}, {}))
    store.put(object_key("App", "ns", "z"), StoredRecord("z", 1, {}, {}))
    assert [k for k, _ in store.items("Environment")] == ["Environment/ns/a", "Environment/ns/b"]
    assert store.count("App") == 1
    assert store.count("Blueprint") == 0
    store.close()
