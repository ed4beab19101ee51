"""Version history: pure helpers, and recording/pruning/reverting through a fake API client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.config.history import (
    DATA_KEY,
    LABEL_UID,
    History,
    HistoryError,
    Owner,
    data_hash,
    data_in_force,
    parse_version,
    sync,
    to_prune,
    version_body,
    version_name,
)
from tests.unit.fakeapi import FakeApi

OWNER = Owner(namespace="ns", name="cv1", uid="uid-1")
CONFIGMAPS = "/api/v1/namespaces/ns/configmaps"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_version_configmap_is_immutable_owned_and_labelled() -> None:
    body = version_body(OWNER, 3, {"b": 1, "a": [1]}, "spec", "2025-01-01T00:00:00Z")
    assert body["immutable"] is True
    assert body["metadata"]["name"] == "cv1-v3"
    assert body["metadata"]["labels"] == {LABEL_UID: "uid-1", "stead.dev/version": "3",
                                          "app.kubernetes.io/part-of": "stead", "stead.dev/config-values": "cv1"}
    assert body["metadata"]["ownerReferences"][0] | {} == {
        "apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues", "name": "cv1", "uid": "uid-1",
        "blockOwnerDeletion": False, "controller": False}
    assert body["data"][DATA_KEY] == '{"a":[1],"b":1}'
    version = parse_version(body)
    assert version is not None and version.number == 3 and version.data == {"a": [1], "b": 1}
    assert version.data_hash == data_hash({"a": [1], "b": 1}) == data_hash({"b": 1, "a": [1]})


def test_long_names_stay_valid_and_distinct() -> None:
    long = "x" * 253
    assert len(version_name(long, 12345)) <= 253 and version_name(long, 1) != version_name(long, 2)
    assert version_name(long, 1) != version_name(long[:-1] + "y", 1)
    assert "stead.dev/config-values" not in version_body(Owner("ns", long, "u"), 1, {}, "spec", "t")["metadata"][
        "labels"]


def test_prune_keeps_the_newest() -> None:
    versions = [parse_version(version_body(OWNER, n, {"n": n}, "spec", "t")) for n in (4, 1, 3, 2)]
    kept = [v for v in versions if v is not None]
    assert [v.number for v in to_prune(kept, 2)] == [1, 2]
    assert [v.number for v in to_prune(kept, 0)] == [1, 2, 3]  # never the newest
    assert parse_version({"metadata": {"labels": {}}, "data": {}}) is None


def test_each_change_makes_a_version_and_same_data_does_not(kube: FakeApi) -> None:
    history = History(kube, OWNER)
    first = run(sync(history, {"a": 1}, None, limit=10))
    assert first.created and first.current.number == 1
    again = run(sync(history, {"a": 1}, None, limit=10))
    assert not again.created and again.current.number == 1
    second = run(sync(history, {"a": 2}, None, limit=10))
    assert second.created and second.current.number == 2
    assert [v.number for v in second.kept] == [1, 2]
    assert run(history.read(1)).data == {"a": 1}
    assert run(history.read(7)) is None


def test_retention_deletes_the_oldest_and_numbers_never_repeat(kube: FakeApi) -> None:
    history = History(kube, OWNER)
    for n in range(1, 6):
        result = run(sync(history, {"n": n}, None, limit=2))
    assert [v.number for v in result.kept] == [4, 5]
    assert sorted(kube.names(CONFIGMAPS)) == ["cv1-v4", "cv1-v5"]
    assert run(sync(history, {"n": 6}, None, limit=2)).current.number == 6


def test_revert_to_puts_an_old_version_in_force_as_a_new_version(kube: FakeApi) -> None:
    history = History(kube, OWNER)
    run(sync(history, {"a": 1}, None, limit=10))
    run(sync(history, {"a": 2}, None, limit=10))
    reverted = run(sync(history, {"a": 2}, 1, limit=10))
    assert reverted.created and reverted.current.number == 3
    assert reverted.current.data == {"a": 1} and reverted.current.source == "revert:1"
    assert not run(sync(history, {"a": 2}, 1, limit=10)).created  # steady while revertTo stays
    assert run(data_in_force(history, {"a": 2}, 1)) == {"a": 1}
    back = run(sync(history, {"a": 2}, None, limit=10))  # revertTo removed: spec.data again
    assert back.created and back.current.number == 4 and back.current.data == {"a": 2}
    with pytest.raises(HistoryError, match=r"spec.revertTo: version 9 is not kept \(kept: 1, 2, 3, 4\)"):
        run(sync(history, {}, 9, limit=10))


def test_a_crash_between_create_and_status_is_recovered_without_duplicates(kube: FakeApi) -> None:
    history = History(kube, OWNER)
    run(history.record({"a": 1}))
    # the same data again, with a stale view of the versions (as after a crash): the name exists
    version, created = run(history.record({"a": 1}, known=[]))
    assert not created and version.number == 1
    # different data with a stale view: another writer took number 1, we take 2
    version, created = run(history.record({"a": 3}, known=[]))
    assert created and version.number == 2


def test_versions_of_another_incarnation_are_not_read(kube: FakeApi) -> None:
    run(History(kube, OWNER).record({"old": True}))
    reborn = History(kube, Owner("ns", "cv1", "uid-2"))
    assert run(reborn.versions()) == []
    assert run(reborn.read(1)) is None


def test_a_leftover_of_an_earlier_object_with_the_same_name_is_a_retryable_error(kube: FakeApi) -> None:
    from operators.config.history import StaleHistory

    run(History(kube, OWNER).record({"old": True}))
    with pytest.raises(StaleHistory, match="waiting for the garbage collector"):
        run(History(kube, Owner("ns", "cv1", "uid-2")).record({"new": True}))
