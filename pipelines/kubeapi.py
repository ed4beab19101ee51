"""The Kubernetes client the `kubernetes` step type and the Job backend of `exec` are given.

`pipelines` does not pick a client or credentials: in a cluster, the caller builds one that acts
as the namespace's service account (never as the operator), and passes it in. The runner's command
line loads it from ``--kube-api module:factory``. The protocol is synchronous because executors run
in worker threads; it is small so that an adapter over any client is a few lines.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol


class KubeApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class KubeApi(Protocol):
    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create; raise `KubeApiError` (409) when it exists."""

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply (create or update) with Stead's field manager."""

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete with background propagation; False when it did not exist."""

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        """Objects matching a label selector."""

    def logs(self, namespace: str, pod: str) -> str:
        """A pod's (first container's) log."""


def load_kube_api(spec: str) -> KubeApi:
    """Import ``module:factory`` and call the factory for a client."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--kube-api must be module:factory, not {spec!r}")
    factory = getattr(importlib.import_module(module_name), attr)
    api: KubeApi = factory()
    return api
