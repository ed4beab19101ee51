"""The typed contract of a kind: its spec parsed once per run, declared once per step, and Stead's objects
reached by `Resource` with exactly the requests written out by hand before."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError, model_validator

from operators.runtime.core.kinds import AdmissionRequest, Kind, Model, Resource, StatusBase, spec_admission
from operators.runtime.core.pipeline import Observed, PermanentError, Pipeline, StepContext, run, spec_step
from operators.runtime.kube.client import ApiError
from operators.runtime.kube.objects import Objects
from tests.unit.fakeapi import FakeApi


class WidgetSpec(Model):
    size: int
    parses: ClassVar[int] = 0

    @model_validator(mode="before")
    @classmethod
    def _count(cls, data: Any) -> Any:
        WidgetSpec.parses += 1
        return data


class OtherSpec(Model):
    colour: str


def _obj(spec: Mapping[str, Any]) -> Observed:
    return Observed("Widget", "ns", "w", "u1", 1, {}, dict(spec), {})


def test_a_run_parses_the_spec_once_for_all_its_steps() -> None:
    seen: list[WidgetSpec] = []

    @spec_step(WidgetSpec)
    async def first(ctx: StepContext[WidgetSpec]) -> Mapping[str, Any]:
        seen.append(ctx.spec)
        return {"size": ctx.spec.size}

    @spec_step(WidgetSpec)
    async def second(ctx: StepContext[WidgetSpec]) -> Mapping[str, Any]:
        seen.append(ctx.spec)
        return {}

    pipeline = Pipeline(phases=("Init", "Validated", "Provisioned"), steps={"Init": first, "Validated": second})
    WidgetSpec.parses = 0
    outcome = asyncio.run(run(pipeline, _obj({"size": 3}), "Init"))
    assert outcome.error is None and outcome.facts == {"size": 3}
    assert WidgetSpec.parses == 1
    assert seen[0] is seen[1]


def test_an_invalid_spec_fails_in_the_step_that_reads_it_not_before() -> None:
    @spec_step(WidgetSpec)
    async def validate(ctx: StepContext[WidgetSpec]) -> Mapping[str, Any]:
        try:
            return {"size": ctx.spec.size}
        except ValidationError:
            raise PermanentError("InvalidSpec", "spec.size: required") from None

    pipeline = Pipeline(phases=("Init", "Provisioned"), steps={"Init": validate})
    outcome = asyncio.run(run(pipeline, _obj({}), "Init"))
    assert isinstance(outcome.error, PermanentError) and outcome.error.reason == "InvalidSpec"


def test_a_step_called_by_hand_reads_its_spec_too() -> None:
    @spec_step(WidgetSpec)
    async def size(ctx: StepContext[WidgetSpec]) -> Mapping[str, Any]:
        return {"size": ctx.spec.size}

    assert asyncio.run(size(StepContext(obj=_obj({"size": 5}), facts={}))) == {"size": 5}


def test_a_kind_refuses_a_step_that_reads_its_spec_as_another_model() -> None:
    @spec_step(OtherSpec)
    async def wrong(ctx: StepContext[OtherSpec]) -> Mapping[str, Any]:
        return {}

    with pytest.raises(ValueError, match="wrong read the spec as another model than WidgetSpec"):
        Kind(kind="Widget", plural="widgets", short_names=(), description="", spec_model=WidgetSpec,
             status_model=StatusBase, pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": wrong}))


def test_an_admission_check_gets_the_parsed_spec_and_the_old_one() -> None:
    got: list[tuple[int, int]] = []

    @spec_admission(WidgetSpec)
    async def check(request: AdmissionRequest[WidgetSpec]) -> None:
        assert request.old is not None
        got.append((request.parsed.size, request.parse(request.old["spec"]).size))

    request: AdmissionRequest[Any] = AdmissionRequest(
        operation="UPDATE", namespace="ns", name="w", labels={}, spec={"size": 2}, old={"spec": {"size": 1}},
        dry_run=False)
    asyncio.run(check(request))
    assert got == [(2, 1)]


WIDGET = Resource("Widget", "widgets")
PATH = "/apis/stead.dev/v1alpha1/namespaces/ns/widgets"


def test_objects_send_one_request_each_as_written_by_hand() -> None:
    api = FakeApi()
    objects = Objects(api)

    async def calls() -> None:
        await objects.create(WIDGET, "ns", {"metadata": {"name": "w"}, "spec": {"size": 1}})
        assert (await objects.get(WIDGET, "ns", "w"))["spec"] == {"size": 1}
        await objects.patch(WIDGET, "ns", "w", {"spec": {"size": 2}})
        await objects.patch_status(WIDGET, "ns", "w", {"status": {"phase": "Init"}})
        assert [o["spec"] for o in await objects.list(WIDGET, "ns")] == [{"size": 2}]
        await objects.delete(WIDGET, "ns", "w")
        assert await objects.find(WIDGET, "ns", "w") is None

    asyncio.run(calls())
    assert api.calls == [("POST", PATH), ("GET", f"{PATH}/w"), ("PATCH", f"{PATH}/w"), ("PATCH", f"{PATH}/w/status"),
                         ("GET", PATH), ("DELETE", f"{PATH}/w"), ("GET", f"{PATH}/w")]


def test_find_answers_none_only_for_a_missing_object() -> None:
    api = FakeApi()
    api.fail_with(ApiError(403, "forbidden"), "GET")
    with pytest.raises(ApiError, match="403"):
        asyncio.run(Objects(api).find(WIDGET, "ns", "w"))
