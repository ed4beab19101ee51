"""The console's way to the API servers: as its user, never as itself.

The console holds no cluster credentials. From the kubeconfig (or in-cluster) it takes only where the API
server is and the CA it is trusted by; every request then carries the signed-in user's own bearer token, so
the API server's authentication, RBAC, admission and audit judge the user, exactly as for `kubectl`. The
operator's API server (configuration, graphs, services, run outputs) is reached the same way: it reviews the
token itself (TokenReview, SubjectAccessReview).
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.console.settings import ConsoleSettings
from operators.runtime import ClusterAccess, KubeClient, load_configuration

USER_AGENT = "stead-console"
UPSTREAM_CONNECTIONS = 4096
"""Connections the console may hold open to each API server. Every topic a page follows is a WATCH that
holds a connection for as long as it is followed (a namespace's list page follows one per kind), so the
client's usual bound (32) was reached by three users on list pages, and every other request, a sign-in
included, then waited for a watch to end (found by `bench/console_load.py --separate`). The bounds that
matter are the console's own: topics per stream and streams per session (`ConsoleSettings`)."""


IN_CLUSTER_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
"""The API server's CA in a Pod. The chart mounts only this file there (from kube-root-ca.crt), no token."""


def kube_access(kubeconfig: Path | None, environ: Mapping[str, str] = os.environ,
                in_cluster_ca: Path = IN_CLUSTER_CA) -> ClusterAccess:
    """The API server's address and CA, and nothing else of the kubeconfig (no token, no client certificate).
    In a Pod, from KUBERNETES_SERVICE_HOST/PORT and the CA file alone: the kubernetes package's in-cluster
    loader insists on a token file, and the console's Pod has none."""
    if kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST") and "KUBECONFIG" not in environ:
        host, port = environ["KUBERNETES_SERVICE_HOST"], environ.get("KUBERNETES_SERVICE_PORT") or "443"
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        return ClusterAccess(server=server, ssl_context=ssl.create_default_context(cafile=str(in_cluster_ca)),
                             headers={})
    cfg = load_configuration(kubeconfig)
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    return ClusterAccess(server=cfg.host.rstrip("/"), ssl_context=context, headers={})


def stead_access(url: str, ca: Path | None) -> ClusterAccess:
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    return ClusterAccess(server=url.rstrip("/"), ssl_context=context, headers={})


class AsUser:
    """A `Requester` that sends every request with one user's bearer token."""

    def __init__(self, client: KubeClient, token: str) -> None:
        self._client = client
        self._auth = (("Authorization", f"Bearer {token}"),)

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        return await self._client.request(method, path, body, content_type, params, headers=self._auth)

    def lines(self, path: str, params: dict[str, str], read_timeout: float) -> AsyncGenerator[bytes, None]:
        """A WATCH as the user (`KubeClient.lines`)."""
        return self._client.lines(path, params, read_timeout, headers=self._auth)


@dataclass
class Upstreams:
    """The two API servers' connection pools, shared by every user (a pool carries no credentials)."""

    kube: KubeClient
    stead: KubeClient | None

    def as_user(self, token: str) -> tuple[AsUser, AsUser | None]:
        return AsUser(self.kube, token), (AsUser(self.stead, token) if self.stead is not None else None)


@contextlib.asynccontextmanager
async def upstreams(settings: ConsoleSettings, kube: ClusterAccess | None = None
                    ) -> AsyncGenerator[Upstreams, None]:
    """Open both pools for as long as the console runs (`kube`: given by an operator process that has it)."""
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            KubeClient(kube or kube_access(settings.kubeconfig), concurrency=UPSTREAM_CONNECTIONS,
                       user_agent=USER_AGENT))
        stead = None
        if settings.stead_api:
            stead = await stack.enter_async_context(
                KubeClient(stead_access(settings.stead_api, settings.stead_api_ca),
                           concurrency=UPSTREAM_CONNECTIONS, user_agent=USER_AGENT))
        yield Upstreams(client, stead)


def bearer(headers: Sequence[tuple[str, str]]) -> str | None:
    """The token of an `Authorization: Bearer` header among `headers` (None: none)."""
    for name, value in headers:
        if name.lower() == "authorization" and value[:7].lower() == "bearer ":
            return value[7:].strip() or None
    return None
