"""A small asynchronous Kubernetes API client for the few writes Stead makes itself.

Kopf watches; Stead writes: status merge patches, Events, listing at start-up and applying
its CRDs. These are few, well-known calls, so a thin aiohttp client (aiohttp already comes
with Kopf) beats running the blocking `kubernetes` client in threads on the hot path.
Credentials are read with the `kubernetes` package's loaders, so every kubeconfig form
(client certificates, tokens, exec plugins, in-cluster) works the same as for kubectl.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any, cast

import aiohttp
from kubernetes import client as kclient
from kubernetes import config as kconfig

# What every client shares lives in `api` (standard library only, for the CLI's light client); named here
# again for the many modules that import it from this one.
from operators.runtime.kube.api import OUTAGE_STATUSES as OUTAGE_STATUSES
from operators.runtime.kube.api import USER_AGENT as USER_AGENT
from operators.runtime.kube.api import ApiError as ApiError
from operators.runtime.kube.api import ApiUnreachable as ApiUnreachable
from operators.runtime.kube.api import ClusterAccess as ClusterAccess
from operators.runtime.kube.api import HeaderRequester as HeaderRequester
from operators.runtime.kube.api import Requester as Requester
from operators.runtime.kube.api import core_path as core_path
from operators.runtime.kube.api import custom_path as custom_path
from operators.runtime.kube.api import error_message
from operators.runtime.kube.api import is_outage as is_outage
from operators.runtime.kube.api import list_all as list_all
from operators.runtime.kube.api import segment as segment


def load_configuration(kubeconfig: Path | None = None) -> kclient.Configuration:
    """Client settings from a kubeconfig file, `$KUBECONFIG`, or the in-cluster service account."""
    cfg = kclient.Configuration()
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ and "KUBECONFIG" not in os.environ:
        kconfig.load_incluster_config(client_configuration=cfg)
    else:
        path = kubeconfig or (Path(os.environ["KUBECONFIG"].split(os.pathsep)[0]) if os.environ.get("KUBECONFIG")
                              else Path.home() / ".kube" / "config")
        kconfig.load_kube_config(config_file=str(path), client_configuration=cfg)
    return cfg


def bearer_token(cfg: kclient.Configuration) -> str | None:
    """The bare token of a configuration, without its scheme.

    The ``kubernetes`` package stores it with the scheme, in the case each loader likes: the
    kubeconfig loader writes ``"Bearer <jwt>"``, the in-cluster loader ``"bearer <jwt>"`` (a Pod's
    ServiceAccount token). Leaving a lower-case scheme in place sent ``Bearer bearer <jwt>``, a 401
    on every request of the operator in its Pod.
    """
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if not token:
        return None
    scheme, _, rest = str(token).strip().partition(" ")
    return rest.strip() if rest and scheme.lower() == "bearer" else str(token).strip()


def load_access(kubeconfig: Path | None = None) -> ClusterAccess:
    """Where the API server is and how to authenticate, from `load_configuration`."""
    cfg = load_configuration(kubeconfig)
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    headers: dict[str, str] = {}
    token = bearer_token(cfg)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return ClusterAccess(server=cfg.host.rstrip("/"), ssl_context=context, headers=headers)


class Impersonating:
    """The API server's client acting as another user: Kubernetes impersonation (`Impersonate-User`,
    `-Group`, `-Uid`), so that the API server's own authorization, admission and audit see that user, not
    the client's. The client's account needs the verb `impersonate` on `users`, `groups`,
    `serviceaccounts` (and `uids` in `authentication.k8s.io` when a uid is given)."""

    def __init__(self, kube: Requester, user: str, groups: Sequence[str] = (), uid: str = "") -> None:
        self._kube = cast(HeaderRequester, kube)  # a KubeClient: it takes headers
        self.headers: tuple[tuple[str, str], ...] = (
            ("Impersonate-User", user), *(("Impersonate-Group", group) for group in groups),
            *((("Impersonate-Uid", uid),) if uid else ()))

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        return await self._kube.request(method, path, body, content_type, params, headers=self.headers)


class KubeClient:
    """Asynchronous calls to the API server over one pooled connection set."""

    def __init__(self, access: ClusterAccess, concurrency: int = 32, timeout: float = 30.0,
                 user_agent: str = USER_AGENT) -> None:
        self._access = access
        self._user_agent = user_agent  # `stead-operator/<replica>` with several replicas (told apart in audit logs)
        self._concurrency = concurrency
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self.requests: dict[str, int] = {}

    async def __aenter__(self) -> KubeClient:
        connector = aiohttp.TCPConnector(ssl=self._access.ssl_context, limit=self._concurrency)
        self._session = aiohttp.ClientSession(
            base_url=self._access.server,
            headers={"User-Agent": self._user_agent, **self._access.headers},
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None, headers: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        """One call; `headers` are added to the request's (a name may repeat: `Impersonate-Group`)."""
        if self._session is None:
            raise RuntimeError("KubeClient used outside `async with`")
        self.requests[method] = self.requests.get(method, 0) + 1
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        sent: list[tuple[str, str]] = [("Content-Type", content_type)] if data is not None else []
        sent += headers
        try:
            async with self._session.request(method, path, data=data, headers=sent,
                                             params=params) as resp:
                text = await resp.text()
        except TimeoutError:
            raise ApiUnreachable(f"{method} {path}: no answer from the API server within "
                                 f"{self._timeout:g}s") from None
        except aiohttp.ClientError as error:  # refused, reset, TLS, DNS: the message says which
            raise ApiUnreachable(f"{method} {path}: API server unreachable: "
                                 f"{error or type(error).__name__}") from None
        if resp.status >= 300:
            raise ApiError(resp.status, error_message(text))
        return json.loads(text) if text else {}

    async def lines(self, path: str, params: dict[str, str], read_timeout: float,
                    headers: Sequence[tuple[str, str]] = ()) -> AsyncGenerator[bytes, None]:
        """The lines of a streamed answer (a WATCH: one JSON event a line) as they arrive; `headers` are added
        to the request's (a console's user token).

        No total timeout (a watch is meant to last; the API server ends it after the
        `timeoutSeconds` asked), only `read_timeout` between two reads, so a connection that went
        silent is noticed. Lines are split here, not with aiohttp's `readline`, which refuses a
        line over 128 KiB: an object may be over a megabyte.
        """
        if self._session is None:
            raise RuntimeError("KubeClient used outside `async with`")
        self.requests["WATCH"] = self.requests.get("WATCH", 0) + 1
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout, sock_read=read_timeout)
        try:
            async with self._session.get(path, params=params, timeout=timeout, headers=list(headers)) as resp:
                if resp.status >= 300:
                    raise ApiError(resp.status, error_message(await resp.text()))
                pending = b""
                async for chunk in resp.content.iter_any():
                    pending += chunk
                    if b"\n" not in chunk:
                        continue
                    *complete, pending = pending.split(b"\n")
                    for line in complete:
                        if line:
                            yield line
                if pending.strip():
                    yield pending
        except TimeoutError:
            raise ApiUnreachable(f"WATCH {path}: nothing from the API server for {read_timeout:g}s") from None
        except aiohttp.ClientError as error:
            raise ApiUnreachable(f"WATCH {path}: API server unreachable: {error or type(error).__name__}") from None

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of `status` through the status subresource (never touches spec)."""
        return await self.request(
            "PATCH", custom_path(plural, namespace, name) + "/status", {"status": status},
            content_type="application/merge-patch+json",
        )

    async def remove_finalizer(self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...],
                               finalizer: str) -> dict[str, Any]:
        """Drop one finalizer with a JSON patch that first tests the list it read, so that a
        concurrent change to the finalizers makes this fail (409/422) instead of undoing it."""
        ops = [
            {"op": "test", "path": "/metadata/finalizers", "value": list(finalizers)},
            {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in finalizers if f != finalizer]},
        ]
        return await self.request("PATCH", custom_path(plural, namespace, name), ops,
                                  content_type="application/json-patch+json")

    async def add_finalizer(self, plural: str, namespace: str, name: str, finalizers: tuple[str, ...],
                            finalizer: str) -> dict[str, Any]:
        """Add one finalizer (the same test-then-replace guard as `remove_finalizer`)."""
        ops = [
            {"op": "test", "path": "/metadata/finalizers", "value": list(finalizers)},
            {"op": "replace", "path": "/metadata/finalizers", "value": [*finalizers, finalizer]},
        ] if finalizers else [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
        return await self.request("PATCH", custom_path(plural, namespace, name), ops,
                                  content_type="application/json-patch+json")

    async def list(self, plural: str) -> list[dict[str, Any]]:
        """Every object of a kind in all namespaces, paginated."""
        items, _ = await list_all(self, custom_path(plural))
        return items

    async def apply(self, path: str, obj: dict[str, Any], manager: str = "stead") -> dict[str, Any]:
        """Server-side apply, so repeated applies are no-ops and field ownership is tracked."""
        return await self.request(
            "PATCH", path, obj, content_type="application/apply-patch+yaml",
            params={"fieldManager": manager, "force": "true"},
        )


