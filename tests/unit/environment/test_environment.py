"""The Environment kind: its model, its semantic checks and its summary."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from operators.environment import KIND
from operators.environment.logic import components_condition, spec_problems, summarize
from operators.environment.models import EnvironmentSpec
from operators.runtime.core.pipeline import Observed, StoredRecord, compose_status, run
from operators.runtime.core.store import LocalStore, object_key
from operators.runtime.kube.crds import crd_for

GOOD = {
    "release": "mitaka-9.0",
    "hierarchyLevels": ["cluster", "role", "node"],
    "nodes": [
        {"name": "node-1", "fqdn": "node-1.domain.tld", "roles": ["controller", "mongo"]},
        {"name": "node-2", "roles": ["compute"]},
        {"name": "node-3", "roles": ["compute"]},
    ],
}


def test_a_good_spec_has_no_problems_and_summarizes() -> None:
    assert KIND.check_spec(GOOD) == []
    assert summarize(EnvironmentSpec.model_validate(GOOD)) == {
        "nodeCount": 3, "roles": {"compute": 2, "controller": 1, "mongo": 1},
    }


def test_the_schema_makes_node_names_and_levels_unique() -> None:
    """The API server enforces these itself: no webhook needed for the Environment."""
    spec = crd_for(KIND)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["nodes"]["x-kubernetes-list-type"] == "map"
    assert spec["nodes"]["x-kubernetes-list-map-keys"] == ["name"]
    assert spec["hierarchyLevels"]["x-kubernetes-list-type"] == "set"
    assert not KIND.validates


def test_duplicate_node_names_name_both_places() -> None:
    spec = {**GOOD, "nodes": [*GOOD["nodes"], {"name": "node-2", "roles": ["x"]}]}
    assert spec_problems(spec) == ['spec.nodes[3].name: duplicate node name "node-2" (first at spec.nodes[1])']


def test_duplicate_levels() -> None:
    spec = {**GOOD, "hierarchyLevels": ["cluster", "role", "cluster"]}
    assert spec_problems(spec) == [
        'spec.hierarchyLevels[2]: duplicate level "cluster" (first at spec.hierarchyLevels[0])'
    ]


def test_empty_levels_and_nodes_without_roles_name_the_field() -> None:
    assert KIND.check_spec({**GOOD, "hierarchyLevels": []})[0].startswith("spec.hierarchyLevels: ")
    assert KIND.check_spec({**GOOD, "hierarchyLevels": ["cluster", ""]})[0].startswith("spec.hierarchyLevels[1]: ")
    problems = KIND.check_spec({**GOOD, "nodes": [{"name": "n", "roles": []}]})
    assert problems[0].startswith("spec.nodes[0].roles: ")


def test_ssh_access_names_its_secrets_and_a_bad_field() -> None:
    ssh = {"privateKey": {"name": "nodes-key", "key": "id_ed25519"},
           "knownHosts": {"name": "nodes-hosts", "key": "known_hosts"}}
    assert KIND.check_spec({**GOOD, "ssh": ssh}) == []
    access = EnvironmentSpec.model_validate({**GOOD, "ssh": ssh}).ssh
    assert access is not None and (access.user, access.port) == ("root", 22)
    assert KIND.check_spec({**GOOD, "ssh": {**ssh, "port": 0}})[0].startswith("spec.ssh.port: ")
    assert KIND.check_spec({**GOOD, "ssh": {"privateKey": ssh["privateKey"]}})[0].startswith("spec.ssh.knownHosts: ")
    assert KIND.check_spec({**GOOD, "ssh": {**ssh, "user": "root; rm -rf /"}})[0].startswith("spec.ssh.user: ")


def test_unknown_fields_are_refused() -> None:
    assert KIND.check_spec({**GOOD, "relase": "typo"})[0].startswith("spec.relase: ")


def test_default_hierarchy() -> None:
    assert EnvironmentSpec.model_validate({"release": "r"}).hierarchy_levels == ["role", "node"]


def test_components_that_do_not_exist_are_named_in_a_condition_not_blocking_readiness() -> None:
    missing, condition = components_condition(["nova", "fuel", "keystone"], {"fuel", "other"})
    assert missing == ["nova", "keystone"]
    assert condition == {"type": "ComponentsFound", "status": "False", "reason": "ComponentNotFound",
                         "message": "spec.components: no ConfigComponent named nova, keystone in this namespace "
                                    "(ConfigComponents here: fuel, other)"}
    assert components_condition(["fuel"], {"fuel"})[1]["status"] == "True"
    assert components_condition([], set())[0] == []


def test_the_environment_shows_its_missing_components_and_is_rechecked_when_one_appears(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    spec = {**GOOD, "components": ["fuel"]}
    obj = Observed(kind="Environment", namespace="ns", name="e", uid="u", generation=1, labels={}, spec=spec,
                   status={})
    services = SimpleNamespace(store=store)
    outcome = asyncio.run(run(KIND.pipeline, obj, "Init", services=services))
    status = compose_status(obj, outcome, "T")
    assert status["phase"] == "Provisioned" and status["missingComponents"] == ["fuel"]
    found = {c["type"]: c for c in status["conditions"]}
    assert found["Ready"]["status"] == "True" and found["ComponentsFound"]["status"] == "False"

    store.put(object_key("ConfigComponent", "ns", "fuel"), StoredRecord("u-fuel", 1, {}, {}))
    assert KIND.depends_on["ConfigComponent"](spec, "fuel")
    again = compose_status(obj, asyncio.run(run(KIND.pipeline, obj, "Init", services=services)), "T")
    assert again["missingComponents"] is None
    assert {c["type"]: c["status"] for c in again["conditions"]}["ComponentsFound"] == "True"


def test_a_run_from_init_parses_the_spec_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Validate's check and provision's model are one parse (issue 32: each parse of an Environment's
    spec was ~2% of the operator's CPU per object), and a bad spec still ends in InvalidSpec."""
    parses: list[object] = []
    real = EnvironmentSpec.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: type[EnvironmentSpec], value: object, **kwargs: object) -> EnvironmentSpec:
        parses.append(value)
        return real(cls, value, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(EnvironmentSpec, "model_validate", classmethod(counted))
    obj = Observed(kind="Environment", namespace="ns", name="e", uid="u", generation=1, labels={}, spec=GOOD,
                   status={})
    services = SimpleNamespace(store=LocalStore(tmp_path / "store"))
    outcome = asyncio.run(run(KIND.pipeline, obj, "Init", services=services))
    assert outcome.error is None and len(parses) == 1
    bad = dataclasses.replace(obj, spec={**GOOD, "nodes": "no"})
    failed = asyncio.run(run(KIND.pipeline, bad, "Init", services=services))
    assert failed.error is not None and failed.error.reason == "InvalidSpec" and "spec.nodes" in failed.error.message
