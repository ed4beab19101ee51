"""CRDs come from the models only: the checked-in files must match, and be structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.catalog import KINDS
from operators.cli import CRD_DIRS
from operators.runtime.kube import crds as crdgen

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("directory", CRD_DIRS, ids=str)
def test_checked_in_crds_match_the_models(directory: Path) -> None:
    assert sorted(p.name for p in (ROOT / directory).glob("*.yaml")) == sorted(f"{k.plural}.yaml" for k in KINDS)
    for kind in KINDS:
        path = ROOT / directory / f"{kind.plural}.yaml"
        assert path.read_text() == crdgen.render(kind), f"{path} is stale: run `stead crds`"


def _walk(node: Any, path: str = "") -> list[str]:
    """Places that make a schema non-structural: refs, unions, nodes without a type."""
    bad: list[str] = []
    if isinstance(node, dict):
        for key in ("$ref", "anyOf", "oneOf", "allOf", "title", "default"):
            if key in node:
                bad.append(f"{path}: {key}")
        if ("properties" in node or "items" in node) and "type" not in node:
            bad.append(f"{path}: no type")
        for key, value in node.items():
            if key == "properties":
                for name, sub in value.items():
                    bad.extend(_walk(sub, f"{path}.{name}"))
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                bad.extend(_walk(value, f"{path}[]"))
    return bad


def test_schemas_are_structural_and_described() -> None:
    for kind in KINDS:
        crd = crdgen.crd_for(kind)
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        assert _walk(schema) == []
        spec = schema["properties"]["spec"]
        assert all("description" in p for p in spec["properties"].values())
        assert version["subresources"] == {"status": {}}
        assert crd["spec"]["names"].get("categories") == ["stead"]  # `kubectl get stead`: every kind
        names = [c["name"] for c in version["additionalPrinterColumns"]]
        assert names[:2] == ["Phase", "Ready"] and names[-1] == "Age"
        yaml.safe_load(crdgen.render(kind))


def test_free_form_mappings_are_kept_not_pruned() -> None:

    from pydantic import Field

    from operators.runtime.core.kinds import Model

    class Free(Model):
        data: dict[str, Any] = Field(default_factory=dict, description="anything")
        labels: dict[str, str] = Field(default_factory=dict, description="strings")

    schema = crdgen.structural(Free)["properties"]
    assert schema["data"] == {"description": "anything", "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert schema["labels"]["additionalProperties"] == {"type": "string"}


class _Refusing:
    """A client whose every request is refused: the chart left the built-ins to someone else."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.calls = 0

    async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from operators.runtime.kube.client import ApiError
        self.calls += 1
        raise ApiError(self.status, "forbidden")

    async def apply(self, path: str, obj: dict[str, Any], manager: str = "stead") -> dict[str, Any]:
        return await self.request("PATCH", path)


def test_shipped_objects_are_not_retried_when_forbidden(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from operators.lsm.kinds import CLUSTER_LIFECYCLE_KIND
    kube = _Refusing(403)
    asyncio.run(crdgen.apply_shipped(kube, [CLUSTER_LIFECYCLE_KIND], wait_seconds=30))  # type: ignore[arg-type]
    assert kube.calls == len(crdgen.shipped_objects(CLUSTER_LIFECYCLE_KIND))  # one GET each, no retry loop
    assert caplog.text.count("not applied: 403") == kube.calls
