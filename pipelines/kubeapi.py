"""The Kubernetes client the `kubernetes` step type and the Job backend of `exec` are given.

`pipelines` does not pick a client or credentials: in a cluster, the caller builds one that acts
as the namespace's service account (never as the operator), and passes it in. The runner's command
line loads it from ``--kube-api module:factory``. The protocol is synchronous because executors run
in worker threads; it is small so that an adapter over any client is a few lines.

`RestKubeApi` is the real one (``--kube-api pipelines.kubeapi:from_environment``): it acts with the
credential file or kubeconfig it is explicitly given, never with whatever the environment holds.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import os
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
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

    def events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """The core/v1 Events about one object (field selector on ``involvedObject``); `KubeApiError`
        (403) when the credential may not list events."""

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        """Objects matching a label selector."""

    def logs(self, namespace: str, pod: str, limit_bytes: int | None = None) -> str:
        """A pod's (first container's) log; at most `limit_bytes` of it when given (``limitBytes``)."""

    def namespaced(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves `kind` of `api_version` as a namespaced resource (API
        discovery); `KubeApiError` when it serves no such kind."""


def load_kube_api(spec: str) -> KubeApi:
    """Import ``module:factory`` and call the factory for a client."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--kube-api must be module:factory, not {spec!r}")
    factory = getattr(importlib.import_module(module_name), attr)
    api: KubeApi = factory()
    return api


# --- the real client ------------------------------------------------------------------------------

CREDENTIALS_ENV = "STEAD_KUBE_CREDENTIALS"
"""The path of the runner's credentials file (JSON: ``server``, ``token``, optional ``caData``, the
base64 of the API server's CA in PEM). Only the path travels in the environment, never the token."""
KUBECONFIG_ENV = "STEAD_RUNNER_KUBECONFIG"
"""The path of a kubeconfig for the runner (a developer's alternative to a credentials file)."""
FIELD_MANAGER = "stead"
USER_AGENT = "stead-runner"


class RestKubeApi:
    """`KubeApi` over the API server's REST interface (stdlib HTTP, thread-safe, no shared state but caches).

    It acts with exactly the credential it is given, and nothing else: there is no fallback to
    ``$KUBECONFIG``, ``~/.kube/config`` or a mounted service-account token (in the operator's pod
    that would be the operator's own). The operator gives the runner a short-lived token of the
    namespace's service account, minted with the TokenRequest API
    (``POST /api/v1/namespaces/NS/serviceaccounts/SA/token``) and written to a 0600 file in the run's
    directory; only the file's path reaches the runner (`CREDENTIALS_ENV`). The file is read again
    when it changes, so the operator can refresh a token that would expire during a long run.

    Resources are found by API discovery (cached per group/version): any kind the API server serves,
    custom resources included, works in `kubernetes` steps.
    """

    def __init__(
        self, server: str, *, token: str | None = None, ssl_context: ssl.SSLContext | None = None,
        credentials_file: Path | None = None, timeout: float = 30.0,
    ) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self._ssl = ssl_context or ssl.create_default_context()
        self._credentials_file = credentials_file
        self._credentials_mtime = credentials_file.stat().st_mtime_ns if credentials_file else 0
        self.timeout = timeout
        self._lock = threading.Lock()
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    # construction ------------------------------------------------------------------------------

    @classmethod
    def from_credentials_file(cls, path: Path) -> RestKubeApi:
        server, token, context = _read_credentials(path)
        return cls(server, token=token, ssl_context=context, credentials_file=path)

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None) -> RestKubeApi:
        """The current (or named) context of an explicit kubeconfig: token or client certificate."""
        # here, not above: only an explicit kubeconfig needs the kubernetes client, which takes
        # about a second to import (more on a loaded machine); runners on in-cluster credentials never pay for it
        from kubernetes import client as kclient
        from kubernetes import config as kconfig

        cfg = kclient.Configuration()
        kconfig.load_kube_config(config_file=str(path), context=context, client_configuration=cfg)
        ssl_context = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else None
        if ssl_context is None:
            ssl_context = ssl.create_default_context()
        if not cfg.verify_ssl:
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        if cfg.cert_file and cfg.key_file:
            ssl_context.load_cert_chain(cfg.cert_file, cfg.key_file)
        raw = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
        token = str(raw).removeprefix("Bearer ").strip() if raw else None
        return cls(str(cfg.host), token=token, ssl_context=ssl_context)

    # the protocol ------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._json("GET", self._path(api_version, kind, namespace, name))
        except KubeApiError as error:
            if error.status == 404:
                return None
            raise

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        meta = manifest.get("metadata") or {}
        path = self._path(str(manifest["apiVersion"]), str(manifest["kind"]), meta.get("namespace"), None)
        return self._json("POST", path, dict(manifest))

    def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        meta = manifest.get("metadata") or {}
        path = self._path(str(manifest["apiVersion"]), str(manifest["kind"]), meta.get("namespace"), meta["name"])
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
        return self._json("PATCH", f"{path}?{query}", dict(manifest), "application/apply-patch+yaml")

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        try:
            self._json("DELETE", self._path(api_version, kind, namespace, name), body)
        except KubeApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        path = f"/api/v1/namespaces/{_seg(namespace)}/events?" + urllib.parse.urlencode({"fieldSelector": selector})
        items = self._json("GET", path).get("items") or []
        return [{"apiVersion": "v1", "kind": "Event", **item} for item in items]

    def list(self, api_version: str, kind: str, namespace: str | None, label_selector: str) -> list[dict[str, Any]]:
        path = self._path(api_version, kind, namespace, None)
        if label_selector:
            path += "?" + urllib.parse.urlencode({"labelSelector": label_selector})
        items = self._json("GET", path).get("items") or []
        return [{"apiVersion": api_version, "kind": kind, **item} for item in items]

    def logs(self, namespace: str, pod: str, limit_bytes: int | None = None) -> str:
        path = f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(pod)}/log"
        if limit_bytes is not None:
            path += "?" + urllib.parse.urlencode({"limitBytes": max(1, int(limit_bytes))})
        try:
            return self._request("GET", path).decode("utf-8", errors="replace")
        except KubeApiError as error:
            if error.status in (400, 404):  # no container started (yet), or the pod is gone
                return ""
            raise

    def namespaced(self, api_version: str, kind: str) -> bool:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        return self._resource(api_version, kind, base)[1]

    # plumbing ----------------------------------------------------------------------------------

    def _path(self, api_version: str, kind: str, namespace: str | None, name: str | None) -> str:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        plural, namespaced = self._resource(api_version, kind, base)
        path = base
        if namespaced:
            if not namespace:
                raise KubeApiError(400, f"{kind} {name or ''} is namespaced: a namespace is needed")
            path += f"/namespaces/{_seg(namespace)}"
        path += f"/{plural}"
        if name:
            path += f"/{_seg(name)}"
        return path

    def _resource(self, api_version: str, kind: str, base: str) -> tuple[str, bool]:
        with self._lock:
            known = self._resources.get(api_version)
        if known is None or kind not in known:
            found: dict[str, tuple[str, bool]] = {}
            for res in self._json("GET", base).get("resources") or []:
                if "/" not in str(res.get("name", "")):
                    found[str(res["kind"])] = (str(res["name"]), bool(res.get("namespaced")))
            with self._lock:
                self._resources[api_version] = known = found
        if kind not in known:
            raise KubeApiError(400, f"the API server serves no {kind} in {api_version}")
        return known[kind]

    def _json(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        raw = self._request(method, path, body, content_type)
        data: dict[str, Any] = json.loads(raw) if raw else {}
        return data

    def _request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> bytes:
        token, context = self._current()
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if data is not None:
            headers["Content-Type"] = content_type
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                payload: bytes = response.read()
                return payload
        except urllib.error.HTTPError as error:
            raise KubeApiError(error.code, _status_message(error.read())) from None
        except (urllib.error.URLError, OSError) as error:
            raise KubeApiError(0, f"cannot reach the API server at {self.server}: {error}") from None

    def _current(self) -> tuple[str | None, ssl.SSLContext]:
        """The credential to use now: the credentials file again if it was rewritten (a refreshed token)."""
        path = self._credentials_file
        if path is not None:
            with contextlib.suppress(OSError):
                mtime = path.stat().st_mtime_ns
                if mtime != self._credentials_mtime:
                    _, token, context = _read_credentials(path)
                    with self._lock:
                        self._token, self._ssl, self._credentials_mtime = token, context, mtime
        with self._lock:
            return self._token, self._ssl


def _seg(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _status_message(raw: bytes) -> str:
    """The API server's message of a failed call (a Status object), never a body dump."""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", errors="replace")
    if isinstance(data, dict):
        return str(data.get("message") or data.get("reason") or "")
    return ""


def _read_credentials(path: Path) -> tuple[str, str, ssl.SSLContext]:
    data = json.loads(path.read_text(encoding="utf-8"))
    server, token = data.get("server"), data.get("token")
    if not isinstance(server, str) or not isinstance(token, str) or not server or not token:
        raise ValueError(f"{path}: a credentials file needs a server and a token")
    ca = data.get("caData")
    if ca:
        context = ssl.create_default_context(cadata=base64.b64decode(ca).decode("ascii"))
    else:
        context = ssl.create_default_context()
    return server, token, context


def write_credentials(path: Path, server: str, token: str, ca_pem: str | None = None) -> None:
    """Write (atomically, mode 0600) the runner's credentials file that `RestKubeApi` reads."""
    body = {"server": server, "token": token, **({"caData": base64.b64encode(ca_pem.encode()).decode()}
                                                  if ca_pem else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(body, fh)
    os.replace(tmp, path)


def from_environment() -> RestKubeApi:
    """The runner's factory (``--kube-api pipelines.kubeapi:from_environment``).

    `CREDENTIALS_ENV` (the operator's way) or `KUBECONFIG_ENV`; deliberately not ``$KUBECONFIG`` nor
    an in-cluster token, which would be whoever started the runner rather than the namespace.
    """
    credentials = os.environ.get(CREDENTIALS_ENV)
    if credentials:
        return RestKubeApi.from_credentials_file(Path(credentials))
    kubeconfig = os.environ.get(KUBECONFIG_ENV)
    if kubeconfig:
        return RestKubeApi.from_kubeconfig(Path(kubeconfig))
    raise ValueError(f"no Kubernetes credentials for the runner: set {CREDENTIALS_ENV} or {KUBECONFIG_ENV}")
