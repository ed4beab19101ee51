"""What a kind's steps and admission checks may ask of the operator process, as protocols.

The process builds one `operators.runtime.engine.services.Services` (the API client, the vault, the run
settings, ...) and lends it to every step (`StepContext.services`) and admission check
(`AdmissionRequest.services`). Those live in the layers above the core, so the core says only what
the steps use of them, here, and the engine's `Services` satisfies it: the core imports nothing from
above, and a unit test hands a step a fake with just the part it touches.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only (`pipeline` imports this module; the store imports lmdb)
    from operators.runtime.core.pipeline import Observed
    from operators.runtime.core.store import LocalStore


class Api(Protocol):
    """The API server as steps reach it: `KubeClient`, or a test's fake."""

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]: ...

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        ...


class EventSink(Protocol):
    """Where a step records a Kubernetes Event about its object."""

    def record(self, obj: Observed, type_: str, reason: str, message: str) -> None: ...


class SecretVault(Protocol):
    """The secrets vault (`operators.runtime.secrets.Vault`), as steps and admission use it."""

    async def fetch(self, project: str, uuids: Collection[str]) -> int: ...

    async def refreshed(self, project: str, uuid: str, owner: str | None = None) -> str: ...

    def owner_of(self, project: str, uuid: str) -> str | None: ...

    def seal(self, project: str, value: str, owner: str = "") -> tuple[str, bytes]: ...

    def sealed_problem(self, project: str, uuid: str, blob: bytes, owner: str) -> str | None: ...

    async def store_sealed(self, project: str, uuid: str, blob: bytes, owner: str) -> bool: ...

    async def delete(self, project: str, uuid: str, owner: str | None = None) -> bool: ...


class RunConfig(Protocol):
    """The operator's workflow-run settings (`operators.runtime.engine.runs.RunSettings`), as steps read them."""

    @property
    def state_dir(self) -> Path: ...

    @property
    def job_service_account(self) -> str: ...

    @property
    def http_allow(self) -> tuple[str, ...]: ...

    @property
    def service_cidrs(self) -> tuple[str, ...]: ...


class RunQueue(Protocol):
    """The bound on workflow runs at once (`operators.runtime.engine.slots.RunSlots`)."""

    @property
    def limit(self) -> int: ...

    async def acquire(self, namespace: str, queued: Callable[[int, int], Awaitable[None]] | None = None, *,
                      at_once: bool = False) -> None: ...

    def release(self, namespace: str) -> None: ...


class StepMetrics(Protocol):
    """The operator's metrics a step feeds (`operators.runtime.serving.metrics.Metrics`)."""

    def observe_step(self, kind: str, step_type: str, outcome: str, seconds: float) -> None: ...


class Services(Protocol):
    """What the operator process lends to a kind's steps and admission checks; the engine's
    `Services` is the one implementation (read-only here: a step never replaces one)."""

    @property
    def kube(self) -> Api: ...

    @property
    def store(self) -> LocalStore: ...

    @property
    def events(self) -> EventSink: ...

    @property
    def vault(self) -> SecretVault: ...

    @property
    def runs(self) -> RunConfig: ...

    @property
    def run_slots(self) -> RunQueue: ...

    @property
    def metrics(self) -> StepMetrics: ...

    @property
    def replica(self) -> str: ...

    @property
    def owns(self) -> Callable[[str], bool]: ...

