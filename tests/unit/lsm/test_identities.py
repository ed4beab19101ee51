"""The index of service identities (`operators.lsm.identities`): fed by the ServiceInstance watch's events, it
answers a creation's uniqueness check as the LIST did (the older instance keeps an identity, deleted ones and
other entities' do not count) without an API call; out of sync, or without it, the LIST is used again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from operators.lsm.identities import Identities, IdentityIndex, index_of
from operators.lsm.models import SERVICE_INSTANCE
from operators.runtime.core.kinds import Refusal
from operators.runtime.core.pipeline import PermanentError
from operators.runtime.core.store import LocalStore
from operators.runtime.kube.watch import Watch
from tests.unit.fakeapi import FakeApi
from tests.unit.lsm.kindsupport import INSTANCES, NS, World, body, instance_spec, observed, run


def instance(name: str, identity: str, created: str, *, entity: str = "greeter", status: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    obj = observed({**instance_spec(identity), "entity": entity}, status, name=name)
    return body(obj, created=created)


def others(index: Identities, instance_name: str = "db-5", tie_break: bool = True) -> dict[str, str]:
    return dict(index.others(NS, "greeter", "name", instance_name, tie_break=tie_break))


def test_the_oldest_other_holder_not_deleted_of_the_same_entity_holds_an_identity() -> None:
    index = Identities()
    index(None, instance("db-2", "a", "2025-01-01T00:00:02Z"))
    index("ADDED", instance("db-1", "a", "2025-01-01T00:00:01Z"))
    index("ADDED", instance("db-0", "b", "2025-01-01T00:00:00Z", status={"deleted": True}))
    index("ADDED", instance("db-3", "c", "2025-01-01T00:00:00Z", entity="other"))
    index("ADDED", instance("db-5", "a", "2025-01-01T00:00:05Z"))
    assert others(index) == {"a": "db-1"}
    # a younger holder does not count against an older instance (the pipeline's tie-break); admission counts all
    assert others(index, "db-1") == {}
    assert others(index, "db-1", tie_break=False) == {"a": "db-2"}


def test_later_events_move_the_holders_of_a_value_already_asked_for() -> None:
    index = Identities()
    index("ADDED", instance("db-1", "a", "2025-01-01T00:00:01Z"))
    assert index.others(NS, "greeter", "name", "db-5", tie_break=False).get("a") == "db-1"
    index("MODIFIED", instance("db-1", "a", "2025-01-01T00:00:01Z", status={"identity": "z"}))  # status wins
    index("ADDED", instance("db-2", "b", "2025-01-01T00:00:02Z"))
    found = index.others(NS, "greeter", "name", "db-5", tie_break=False)
    assert found.get("a") is None and found.get("z") == "db-1" and found.get("b") == "db-2"
    index("DELETED", instance("db-1", "a", "2025-01-01T00:00:01Z"))
    assert dict(index.others(NS, "greeter", "name", "db-5", tie_break=False)) == {"b": "db-2"}


# --- the index in the pipeline and in admission ------------------------------------------------------


@dataclass
class Watched(World):
    """Services with the operator's watches, as the process lends them (the index taps the instances')."""

    watches: dict[str, Watch] = field(default_factory=dict)


@pytest.fixture
def world(tmp_path: Path, kube: FakeApi) -> Watched:
    w = Watched(kube, LocalStore(tmp_path / "store"))
    w.catalog()
    watch = Watch(kube, INSTANCES, SERVICE_INSTANCE.kind, None)  # type: ignore[arg-type]
    w.watches[SERVICE_INSTANCE.plural] = watch
    asyncio.run(IdentityIndex().start(w))  # type: ignore[arg-type]
    watch.listed.set()  # listed and following: in sync
    return w


def tell(world: Watched, event: str, obj: dict[str, Any]) -> None:
    index = index_of(world)
    assert index is not None
    index(event, obj)


def test_a_creation_finds_an_older_holder_in_the_index_without_a_list(world: Watched) -> None:
    tell(world, "ADDED", instance("db-0", "db-1", "2025-01-01T00:00:00Z"))
    mine = observed(instance_spec())
    tell(world, "ADDED", body(mine, created="2025-01-01T00:00:01Z"))
    _, outcome = run(world, mine)
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "DuplicateIdentity"
    assert "name=db-1 is already used by service instance db-0" in outcome.error.message
    assert world.kube.count("GET", "/serviceinstances") == 0
    with pytest.raises(Refusal, match="already used by service instance db-0"):  # admission reads it too
        asyncio.run(world.admit("CREATE", instance_spec(), name="db-7"))
    assert world.kube.count("GET", "/serviceinstances") == 0


def test_out_of_sync_the_index_is_not_trusted_and_the_namespace_is_listed(world: Watched) -> None:
    world.watches[SERVICE_INSTANCE.plural].listed.clear()  # e.g. listing again after a failure
    world.kube.add(f"{INSTANCES}/db-0", instance("db-0", "db-1", "2025-01-01T00:00:00Z"))
    mine = observed(instance_spec())
    world.kube.add(f"{INSTANCES}/db-1", body(mine, created="2025-01-01T00:00:01Z"))
    _, outcome = run(world, mine)
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "DuplicateIdentity"
    assert world.kube.count("GET", "/serviceinstances") == 1
