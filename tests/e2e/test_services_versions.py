"""Entity versions end to end (issue 31, item 5; docs/services.md#entity-versions): an entity gains a version 2,
its instance stays on version 1 until migrated, a migration that does not fit version 2 is refused at apply time
naming the attribute, one that fits lands the instance in its target state on version 2, and version 1 cannot be
removed while an instance uses it. No realization: the lifecycle is all there is to watch, so it runs in seconds."""

from __future__ import annotations

import copy
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.test_apps import apply, get
from tests.e2e.test_services import entity, in_state, instance, merge, walk


def _versioned(v1: dict[str, Any]) -> dict[str, Any]:
    """Version 2 of the entity: v1 kept whole in `versions`; the top-level fields gain a required `tier` (with a
    default) and a required `size` (without: a migration must give it)."""
    v2 = copy.deepcopy(v1)
    v2["spec"]["version"] = 2
    v2["spec"]["versions"] = [{**copy.deepcopy(v1["spec"]), "version": 1}]
    v2["spec"]["attributes"] += [{"name": "tier", "type": "string", "default": "gold"},
                                 {"name": "size", "type": "int", "modifier": "rw+"}]
    return v2


def test_an_instance_migrates_to_a_new_entity_version(kubectl: Kubectl, namespace: str,
                                                      operator: OperatorProcess) -> None:
    v1 = entity("tiered", namespace)
    del v1["spec"]["realization"]
    apply(kubectl, v1)
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "20s", "serviceentity/tiered")
    apply(kubectl, instance("t-1", namespace, "tiered", who="x"))
    up = in_state(kubectl, namespace, "t-1", "up", seconds=30)
    assert up["entityVersion"] == 1  # no versions given: the entity is version 1, and so is its instance

    v2 = _versioned(v1)
    apply(kubectl, v2)
    wait_until(lambda: (get(kubectl, "serviceentity", "tiered", namespace).get("status") or {}).get("versions")
               == [1, 2], 20, "the entity at versions 1 and 2")
    only_v2 = copy.deepcopy(v2)
    del only_v2["spec"]["versions"]
    removed = apply(kubectl, only_v2, check=False)
    assert removed.returncode != 0
    assert "spec.versions: version 1 cannot be removed: instances use it (t-1)" in removed.stderr

    refused = merge(kubectl, namespace, "t-1", {"spec": {"entityVersion": 2, "migration": {"targetState": "up"}}},
                    check=False)
    assert refused.returncode != 0
    assert "cannot move to entity version 2: status.activeAttributes.size: required" in refused.stderr
    assert (get(kubectl, "serviceinstance", "t-1", namespace)["spec"].get("entityVersion")) is None  # nothing written

    merge(kubectl, namespace, "t-1", {"spec": {"entityVersion": 2, "migration": {
        "targetState": "up", "attributes": {"size": 3}, "currentVersion": up["version"]}}})
    moved = in_state(kubectl, namespace, "t-1", "up", seconds=30, version_above=up["version"])
    assert moved["entityVersion"] == 2
    assert moved["activeAttributes"] == {**up["activeAttributes"], "tier": "gold", "size": 3}
    assert walk(moved, up["version"]) == [("up", "up", "migrate")]
    table = kubectl("get", "si", "t-1", "-n", namespace).stdout.splitlines()
    assert table[0].split()[-2:] == ["ENTITYVERSION", "AGE"] and table[1].split()[-2] == "2"

    apply(kubectl, only_v2)  # no instance uses version 1 any more: it goes
