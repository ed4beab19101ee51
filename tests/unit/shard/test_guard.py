"""The write side of fencing: `WriteGuard` and `FencedKube` refuse writes before they are sent."""

from __future__ import annotations

from typing import Any

import pytest

from operators.runtime.kube.client import ApiError
from operators.runtime.shard import Fence, FencedKube, NotOwned, WriteGuard
from operators.runtime.shard.guard import namespace_of
from tests.unit.shard.conftest import FakeTime, sync


class Inner:
    """Stands in for `KubeClient`: what it was asked to send."""

    _access = _concurrency = _timeout = None

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.requests: dict[str, int] = {}

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        self.sent.append((method, path))
        return {}


def open_fence(clock: FakeTime, seconds: float = 10.0) -> Fence:
    fence = Fence(clock.mono)
    fence.extend("inc-1", clock.mono(), clock.mono(), seconds, 0.0)
    return fence


def test_namespaces_of_paths() -> None:
    assert namespace_of("/apis/stead.dev/v1alpha1/namespaces/team-a/apps/x/status") == "team-a"
    assert namespace_of("/api/v1/namespaces/team-a/events") == "team-a"
    assert namespace_of("/apis/stead.dev/v1alpha1/clusterlifecycles/x") is None
    assert namespace_of("/api/v1/namespaces/team-a") is None  # the namespace object itself


@sync
async def test_writes_only_for_projects_held_while_the_fence_is_open(clock: FakeTime) -> None:
    held = {"team-a"}
    fence = open_fence(clock)
    guard = WriteGuard(lambda p: p in held, fence)
    inner = Inner()
    kube = FencedKube(inner, guard, lambda ns: [ns], exempt=("stead-system",))  # type: ignore[arg-type]
    await kube.patch_status("apps", "team-a", "x", {"phase": "Init"})
    await kube.request("GET", "/apis/stead.dev/v1alpha1/namespaces/team-b/apps/x")  # reads: never refused
    with pytest.raises(NotOwned) as refused:
        await kube.patch_status("apps", "team-b", "x", {"phase": "Init"})
    assert isinstance(refused.value, ApiError) and refused.value.status == 403
    await kube.request("POST", "/api/v1/namespaces/stead-system/secrets", {})  # the operator's own: fence only
    clock.advance(10.5)  # our lease may be over: nothing is written, whatever the project
    with pytest.raises(NotOwned, match="lease"):
        await kube.patch_status("apps", "team-a", "x", {"phase": "Init"})
    with pytest.raises(NotOwned):
        await kube.request("PATCH", "/apis/stead.dev/v1alpha1/clusterlifecycles/x", {})
    assert [m for m, _ in inner.sent] == ["PATCH", "GET", "POST"] and guard.refused == 3


@sync
async def test_a_namespace_holding_a_labelled_project_is_written_by_the_projects_holder(clock: FakeTime) -> None:
    guard = WriteGuard(lambda p: p == "shop", open_fence(clock))
    inner = Inner()
    kube = FencedKube(inner, guard, lambda ns: ["shop", ns] if ns == "team-a" else [ns])  # type: ignore[arg-type]
    await kube.request("POST", "/apis/stead.dev/v1alpha1/namespaces/team-a/actionruns", {})
    with pytest.raises(NotOwned):
        await kube.request("POST", "/apis/stead.dev/v1alpha1/namespaces/team-b/actionruns", {})
