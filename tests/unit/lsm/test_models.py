"""The models are the schema: the CRDs the three kinds will get, with Inmanta's field names in camelCase."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from operators.lsm import (
    BUILTINS,
    LifecycleSpec,
    LifecycleStatus,
    ServiceEntitySpec,
    ServiceEntityStatus,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
)
from operators.lsm.models import BuiltinName, LifecycleRef, LogEntry
from operators.runtime.core.kinds import Model
from operators.runtime.kube.crds import structural


def _props(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    for name in path:
        schema = schema["properties"][name]
        schema = schema.get("items", schema)
    return schema


@pytest.mark.parametrize("model", [LifecycleSpec, LifecycleStatus, ServiceEntitySpec, ServiceEntityStatus,
                                   ServiceInstanceSpec, ServiceInstanceStatus])
def test_every_model_gives_a_structural_schema(model: type[Model]) -> None:
    schema = structural(model)
    assert schema["type"] == "object"
    assert "$ref" not in str(schema) and "anyOf" not in str(schema)


def test_the_lifecycle_fields_are_inmantas_in_camel_case() -> None:
    schema = structural(LifecycleSpec)
    assert set(schema["properties"]) == {"description", "initialState", "states", "transfers"}
    assert schema["required"] == ["initialState", "states"]
    assert set(_props(schema, "states")["properties"]) == {
        "name", "label", "exportResources", "validateSelf", "validateOthers", "purgeResources", "deleted",
        "description"}
    transfer = _props(schema, "transfers")
    assert set(transfer["properties"]) == {
        "source", "target", "error", "auto", "apiSetState", "onUpdate", "onDelete", "resourceBased", "validate",
        "configName", "targetOperation", "errorOperation", "description"}
    assert transfer["properties"]["targetOperation"]["enum"] == [
        "clear candidate", "clear active", "clear rollback", "promote", "rollback"]
    # duplicate state names are refused by the API server itself
    assert schema["properties"]["states"]["x-kubernetes-list-type"] == "map"
    assert schema["properties"]["states"]["x-kubernetes-list-map-keys"] == ["name"]


def test_the_entity_schema() -> None:
    schema = structural(ServiceEntitySpec)
    attribute = _props(schema, "attributes")["properties"]
    assert attribute["type"]["enum"] == ["string", "int", "float", "bool", "dict", "list"]
    assert attribute["modifier"]["enum"] == ["r", "rw", "rw+"]
    assert attribute["default"] == {"description": "The value an instance gets when its client gives none.",
                                    "x-kubernetes-preserve-unknown-fields": True}
    lifecycle = schema["properties"]["lifecycle"]
    assert lifecycle["x-kubernetes-validations"][0]["rule"] == (
        "(has(self.name) ? 1 : 0) + (has(self.cluster) ? 1 : 0) + (has(self.builtin) ? 1 : 0) == 1")
    assert lifecycle["properties"]["builtin"]["enum"] == list(BUILTINS)
    assert set(_props(schema, "realization", "outputs")["properties"]) == {
        "attribute", "property", "deployment", "replica"}


def test_the_instance_schema() -> None:
    spec = structural(ServiceInstanceSpec)
    assert set(spec["properties"]) == {"entity", "attributes", "currentVersion", "stateRequest", "expert",
                                      "entityVersion", "migration"}
    assert spec["properties"]["attributes"]["x-kubernetes-preserve-unknown-fields"] is True
    assert set(spec["properties"]["stateRequest"]["properties"]) == {"target", "currentVersion", "message"}
    status = structural(ServiceInstanceStatus)
    for name in ("state", "version", "modelState", "identity", "candidateAttributes", "activeAttributes",
                 "rollbackAttributes", "app", "log", "conditions"):
        assert name in status["properties"]
    assert set(_props(status, "log")["properties"]) == {
        "from", "to", "trigger", "version", "time", "operation", "error", "message", "user"}


def test_a_log_entry_says_from_on_the_wire() -> None:
    entry = LogEntry(from_="up", to="deleting", trigger="on_delete", version=5, time="t")
    dumped = entry.model_dump(by_alias=True, exclude_none=True)
    assert dumped == {"from": "up", "to": "deleting", "trigger": "on_delete", "version": 5, "time": "t",
                      "error": False}
    assert LogEntry.model_validate(dumped) == entry


def test_a_lifecycle_reference_is_a_namespaced_one_or_a_builtin() -> None:
    assert LifecycleRef(builtin="simple").key == "builtin:simple"
    assert LifecycleRef(name="mine").key == "mine"
    assert set(get_args(BuiltinName)) == set(BUILTINS)
