"""The configuration kinds' pipeline steps and admission, with a fake API client."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from operators.config import COMPONENT_KIND, VALUES_KIND
from operators.config.models import ConfigValuesSpec
from operators.config.reconcile import (
    DEPENDS_ON,
    admit_values,
    published_configmap,
    validate_component,
    validate_values,
)
from operators.config.repository import COMPONENTS, ENVIRONMENTS, StoredValues
from operators.runtime.core.kinds import AdmissionRequest, Refusal
from operators.runtime.core.pipeline import Observed, PermanentError, StepContext, TemporaryError
from operators.runtime.kube.client import custom_path
from tests.unit.fakeapi import FakeApi

ENV = {"release": "r", "hierarchyLevels": ["node"], "components": ["fuel"],
       "nodes": [{"name": "n1", "fqdn": "n1.tld", "roles": ["compute"]}]}
FUEL = {"metadata": {"name": "fuel"}, "spec": {"resources": [{"name": "astute"}]}}


def api(env: dict[str, Any] | None = ENV, components: list[dict[str, Any]] | None = None) -> FakeApi:
    """An API server holding Environment "e" (unless None) and the ConfigComponents (FUEL by default) of ns."""
    kube = FakeApi()
    if env is not None:
        kube.add(custom_path(ENVIRONMENTS, "ns", "e"), {"spec": env})
    chosen: list[dict[str, Any]] = [FUEL] if components is None else components
    for component in chosen:
        kube.add(custom_path(COMPONENTS, "ns", component["metadata"]["name"]), component)
    return kube


def step_ctx(spec: dict[str, Any], kube: FakeApi) -> StepContext:
    obj = Observed(kind="ConfigValues", namespace="ns", name="cv", uid="u", generation=1, labels={}, spec=spec,
                   status={})
    return StepContext(obj=obj, facts={}, services=SimpleNamespace(kube=kube))


SPEC = {"environment": "e", "resource": "astute", "level": {"node": "n1"}}


def test_validate_gives_the_point_and_tells_temporary_from_permanent() -> None:
    assert asyncio.run(validate_values(step_ctx(SPEC, api()))) == {"point": "node=n1.tld"}
    # a missing reference is Stalled, not polled: the runtime checks it again when the object appears
    with pytest.raises(PermanentError, match=r'spec\.environment: no Environment "e" in this namespace'):
        asyncio.run(validate_values(step_ctx(SPEC, api(env=None))))
    with pytest.raises(PermanentError, match=r"spec\.resource: no ConfigComponent fuel in this namespace"):
        asyncio.run(validate_values(step_ctx(SPEC, api(components=[]))))
    with pytest.raises(PermanentError, match=r"spec\.level: level 'rack'"):
        asyncio.run(validate_values(step_ctx({**SPEC, "level": {"rack": "1"}}, api())))
    with pytest.raises(TemporaryError, match="no Kubernetes client"):
        asyncio.run(validate_values(StepContext(obj=step_ctx(SPEC, api()).obj, facts={})))


def test_admission_refuses_with_the_reason() -> None:
    def request(spec: dict[str, Any]) -> AdmissionRequest:
        return AdmissionRequest(operation="CREATE", namespace="ns", name="cv", labels={}, spec=spec, old=None,
                                dry_run=False,
                                services=SimpleNamespace(kube=api()))

    asyncio.run(admit_values(request(SPEC)))
    with pytest.raises(Refusal, match=r'spec\.resource: resource "nope" is not defined'):
        asyncio.run(admit_values(request({**SPEC, "resource": "nope"})))
    with pytest.raises(Refusal, match=r"spec\.level"):
        asyncio.run(admit_values(request({**SPEC, "level": {"node": "ghost"}})))


def test_admission_lets_through_what_gitops_may_apply_later() -> None:
    def request(spec: dict[str, Any], kube: FakeApi) -> AdmissionRequest:
        return AdmissionRequest(operation="CREATE", namespace="ns", name="cv", labels={}, spec=spec, old=None,
                                dry_run=False, services=SimpleNamespace(kube=kube))

    asyncio.run(admit_values(request(SPEC, api(env=None))))  # the Environment comes later
    asyncio.run(admit_values(request({**SPEC, "resource": "nope"}, api(components=[]))))  # the component too
    with pytest.raises(Refusal, match=r"spec\.level"):  # but what is wrong whatever comes later is refused
        asyncio.run(admit_values(request({**SPEC, "level": {"node": "ghost"}}, api(components=[]))))


def test_component_step_and_kinds() -> None:
    obj = Observed(kind="ConfigComponent", namespace="ns", name="c", uid="u", generation=1, labels={},
                   spec={"resources": [{"name": "a"}, {"name": "b/c"}]}, status={})
    assert asyncio.run(validate_component(StepContext(obj=obj, facts={}))) == {
        "resourceCount": 2, "resources": ["a", "b/c"]}
    assert COMPONENT_KIND.check_spec({"resources": [{"name": "a"}, {"name": "a"}]})[0].startswith(
        "spec.resources[1].name: duplicate")
    assert VALUES_KIND.check_spec({"environment": "e"})[0] == "spec.resource: Field required"


def test_published_configmap_is_owned_by_the_requesting_object() -> None:
    spec = ConfigValuesSpec.model_validate({**SPEC, "publish": {"configMap": "cm", "format": "json"}})
    stored = StoredValues("cv", "u", "1", spec, (("node", "n1.tld"),), {})
    body = published_configmap(stored, "ns", {"b": 1, "a": [1]})
    assert json.loads(body["data"]["values.json"]) == {"a": [1], "b": 1}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert body["metadata"]["annotations"]["stead.dev/level"] == "node=n1.tld"


def test_the_published_key_defaults_to_the_format_and_may_be_named() -> None:
    def key(publish: dict[str, str]) -> list[str]:
        spec = ConfigValuesSpec.model_validate({**SPEC, "publish": {"configMap": "cm", **publish}})
        return list(published_configmap(StoredValues("cv", "u", "1", spec, (), {}), "ns", {"a": 1})["data"])

    assert key({}) == ["values.json"] and key({"format": "yaml"}) == ["values.yaml"]
    assert key({"format": "yaml", "key": "hiera.yaml"}) == ["hiera.yaml"]


def test_which_values_a_change_of_an_environment_or_component_concerns() -> None:
    assert DEPENDS_ON["Environment"](SPEC, "e") and not DEPENDS_ON["Environment"](SPEC, "other")
    assert DEPENDS_ON["ConfigComponent"](SPEC, "any-component")


def test_only_configmaps_controlled_by_a_configvalues_count_as_steads() -> None:
    from operators.config.reconcile import stead_published

    spec = ConfigValuesSpec.model_validate({**SPEC, "publish": {"configMap": "cm", "format": "json"}})
    assert stead_published(published_configmap(StoredValues("cv", "u", "1", spec, (), {}), "ns", {"a": 1}))
    assert not stead_published({"metadata": {"name": "cm", "labels": {"app.kubernetes.io/managed-by": "stead"}}})
    assert not stead_published({"metadata": {"ownerReferences": [{"kind": "Deployment", "apiVersion": "apps/v1",
                                                                    "controller": True}]}})
