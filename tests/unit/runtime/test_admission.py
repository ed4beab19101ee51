"""Webhook configurations: one webhook per kind, mutating only for kinds that mutate."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from operators.calm.blueprint import KIND as BLUEPRINT
from operators.environment import KIND
from operators.runtime.core.kinds import AdmissionRequest
from operators.runtime.kube.admission import mutating_configuration, validating_configuration


def test_validating_configuration_only_for_kinds_with_checks_beyond_the_schema() -> None:
    config = validating_configuration([KIND, BLUEPRINT], "https://127.0.0.1:9443/", b"CA")
    (hook,) = config["webhooks"]  # the Environment's checks are all in its CRD schema
    assert hook["name"] == "blueprints.stead.dev"
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/validate-blueprints",
                                    "caBundle": base64.b64encode(b"CA").decode()}
    assert hook["rules"][0]["resources"] == ["blueprints"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"


def test_mutating_configuration_only_for_mutating_kinds() -> None:
    assert mutating_configuration([KIND], "https://h:1", b"CA") is None

    async def mutate(request: AdmissionRequest) -> dict[str, Any] | None:
        return None

    mutating = dataclasses.replace(KIND, mutation=mutate)
    config = mutating_configuration([KIND, mutating], "https://h:1", b"CA")
    assert config is not None
    (hook,) = config["webhooks"]
    assert hook["clientConfig"]["url"] == "https://h:1/mutate-environments"
    assert hook["sideEffects"] == "NoneOnDryRun"
