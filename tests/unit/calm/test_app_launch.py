"""Launching an App whose Blueprint is missing or not Active: a clear reason, and no timer storm."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from operators.calm.app import BLUEPRINT_RECHECK_SECONDS, KIND, launch
from operators.calm.cli_runs import launch_app
from operators.runtime.core.pipeline import Observed, PermanentError, StepContext, StoredRecord, TemporaryError
from operators.runtime.core.store import LocalStore, object_key
from tests.unit.fakeapi import FakeApi

BLUEPRINTS = "/apis/stead.dev/v1alpha1/namespaces/ns/blueprints"


@dataclass
class FakeServices:
    kube: FakeApi
    store: LocalStore


def app(blueprint: str) -> Observed:
    return Observed(kind="App", namespace="ns", name="ghost", uid="u-ghost", generation=1, labels={},
                    spec={"blueprint": blueprint}, status={})


def launch_with(kube: FakeApi, store: LocalStore, blueprint: str) -> Any:
    return asyncio.run(launch(StepContext(obj=app(blueprint), facts={}, services=FakeServices(kube, store))))


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "store")
    for namespace, name in (("ns", "three-tier"), ("ns", "web"), ("other", "secret-project")):
        store.put(object_key("Blueprint", namespace, name),
                  StoredRecord(f"u-{name}", 1, {"applicationProfiles": []}, {"state": "Active"}))
    return store


def test_a_missing_blueprint_stalls_naming_the_blueprints_of_the_namespace(kube: FakeApi, store: LocalStore) -> None:
    with pytest.raises(PermanentError) as stalled:
        launch_with(kube, store, "no-such-bp")
    assert stalled.value.reason == "BlueprintNotFound"
    assert stalled.value.message.startswith("spec.blueprint: no Blueprint 'no-such-bp' in namespace ns ")
    assert "(Active blueprints here: three-tier, web)" in stalled.value.message
    assert "secret-project" not in stalled.value.message  # another tenant's names are not shown


def test_a_blueprint_not_active_yet_is_waited_for_with_its_reason(kube: FakeApi, store: LocalStore) -> None:
    kube.add(f"{BLUEPRINTS}/draft", {"status": {"state": "Error", "conditions": [
        {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "spec.x: unknown field"},
        {"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "spec.x: unknown field"}]}})
    with pytest.raises(TemporaryError) as waiting:
        launch_with(kube, store, "draft")
    assert waiting.value.waiting and waiting.value.reason == "BlueprintNotActive"
    assert waiting.value.message == ("blueprint draft is not Active yet (state: Error: spec.x: unknown field); "
                                     "the App launches when it is")
    assert waiting.value.delay == BLUEPRINT_RECHECK_SECONDS  # a slow safety net, not a 5 s poll


def test_an_app_is_checked_again_when_its_blueprint_becomes_ready() -> None:
    refers = KIND.depends_on["Blueprint"]
    assert refers({"blueprint": "three-tier"}, "three-tier")
    assert not refers({"blueprint": "three-tier"}, "web")


def test_the_cli_refuses_to_launch_from_a_missing_blueprint(kube: FakeApi, capsys: pytest.CaptureFixture[str]) -> None:
    kube.add(f"{BLUEPRINTS}/web", {"spec": {}})
    kube.add(f"{BLUEPRINTS}/three-tier", {"spec": {}})
    args = argparse.Namespace(name="ghost", namespace="ns", blueprint="no-such-bp", input=[])
    assert asyncio.run(launch_app(kube, args)) == 1
    assert capsys.readouterr().err == ("stead: no blueprint 'no-such-bp' in namespace ns (blueprints here: "
                                       "three-tier, web); nothing launched\n")
    assert kube.count("POST") == 0
    args.blueprint = "web"
    assert asyncio.run(launch_app(kube, args)) == 0
    assert capsys.readouterr().out == "app/ghost launched (its create run: ghost-create)\n"
