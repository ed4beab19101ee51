"""The client of the `stead` commands that talk to the cluster (`stead actionrun logs`, `stead service list`,
`stead graph list`, ...): the standard library's HTTP over one kept-alive connection, credentials from the
kubeconfig read with PyYAML (`operators.runtime.kube.kubeconfig`).

Why not the operator's client (`operators.runtime.kube.client`): it loads credentials with the `kubernetes`
package and talks with aiohttp, and importing those two took 0.9-1.9 s of every command on a small idle
machine, for a handful of sequential requests (issue 27: a command should answer in 0.3 s). A command makes
its requests one after the other, so blocking calls in the coroutine are fine here; the operator, with
thousands of concurrent requests, keeps aiohttp.

Every kubeconfig form the `kubernetes` loader reads keeps working: tokens, token files, client certificates
and CAs (files or inline), `insecure-skip-tls-verify` and exec plugins are read here; the rest (the
in-cluster service account, auth-provider plugins, a username and password) and any kubeconfig this reader
refuses go to that loader, as before (`load_cluster_access`), so its messages stay what they were.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from operators.runtime.kube.api import USER_AGENT, ApiError, ApiUnreachable, ClusterAccess, error_message
from operators.runtime.kube.kubeconfig import (
    KubeconfigCluster,
    KubeconfigError,
    KubeconfigUser,
    current_context,
    kubeconfig_paths,
    load_cert_chain,
)

EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


def load_cluster_access(kubeconfig: Path | None = None) -> ClusterAccess:
    """Where the API server is and how to authenticate, as `client.load_access` finds them: read here when the
    kubeconfig is one of the forms `light_access` reads (no `kubernetes` import), else by that function.
    `KubeconfigError` or `OSError` when there is no usable kubeconfig (the message says why)."""
    access = light_access(kubeconfig)
    if access is not None:
        return access
    from kubernetes.config.config_exception import ConfigException

    from operators.runtime.kube.client import load_access

    try:
        return load_access(kubeconfig)
    except ConfigException as error:
        raise KubeconfigError(str(error)) from None


def light_access(kubeconfig: Path | None = None, environ: Mapping[str, str] = os.environ) -> ClusterAccess | None:
    """The `ClusterAccess` of the kubeconfig's current context, read without the `kubernetes` package; None when
    that package's loader must read it: in a Pod without a kubeconfig (the service account), a user with an
    auth-provider or a username and password, or a kubeconfig this reader refuses or cannot use (that
    loader then says what is wrong, in its words, as the commands always did). `KubeconfigError` when an
    exec plugin fails (running it again there would only hide why)."""
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in environ and "KUBECONFIG" not in environ:
        return None
    try:
        found = current_context(kubeconfig_paths(kubeconfig))
    except KubeconfigError:
        return None
    if found is None or found[1] is None:
        return None
    user, cluster = found[0], found[1]
    if user.plugin == "auth-provider" or (user.password and not (user.token or user.token_file or user.exec)):
        return None
    headers: dict[str, str] = {}
    certificate, key = user.client_certificate, user.client_key
    try:
        token = user.token or (user.token_file.read_text() if user.token_file else None)
    except OSError:
        return None
    if not token and user.exec is not None:
        status = run_exec_plugin(user, cluster)
        token = status.get("token")
        if not token and status.get("clientCertificateData") and status.get("clientKeyData"):
            certificate = str(status["clientCertificateData"]).encode()
            key = str(status["clientKeyData"]).encode()
    if token and token.strip():  # as written, as kubectl sends it (a "Bearer " in the file stays)
        headers["Authorization"] = f"Bearer {token.strip()}"
    try:
        context = _ssl_context(cluster, certificate if cluster.server.startswith("https") else None, key)
    except (OSError, ValueError):  # a missing or unreadable file, a PEM that is none: that loader says which
        return None
    return ClusterAccess(server=cluster.server.rstrip("/"), ssl_context=context, headers=headers)


def _ssl_context(cluster: KubeconfigCluster, certificate: Path | bytes | None, key: Path | bytes | None
                 ) -> ssl.SSLContext:
    """Verification as the cluster entry says (its CA, else the system's; none with insecure-skip-tls-verify),
    and the client certificate when there is one."""
    authority = cluster.certificate_authority
    if isinstance(authority, bytes):
        context = ssl.create_default_context(cadata=authority.decode())
    elif authority is not None:
        context = ssl.create_default_context(cafile=str(authority))
    elif cluster.insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # without loading the system's CAs: nothing is verified
    else:
        context = ssl.create_default_context()
    if cluster.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if certificate is not None and key is not None:
        load_cert_chain(context, certificate, key)
    return context


def run_exec_plugin(user: KubeconfigUser, cluster: KubeconfigCluster) -> dict[str, Any]:
    """The `status` of the ExecCredential an exec plugin prints (a token, or a client certificate and key), run
    as kubectl and the `kubernetes` package run it: the kubeconfig's directory as its working directory, its
    `env` added to ours, `KUBERNETES_EXEC_INFO` saying whether it may prompt (stdin is passed on when stdout is
    a terminal) and, with `provideClusterInfo`, the cluster. `KubeconfigError` with the plugin's own words
    when it fails."""
    import subprocess

    config = user.exec or {}
    api_version = str(config.get("apiVersion") or "")
    if not config.get("command") or not api_version:
        missing = "command" if not config.get("command") else "apiVersion"
        raise KubeconfigError(f"exec: malformed request. missing key '{missing}'")
    interactive = sys.stdout.isatty()
    spec: dict[str, Any] = {"interactive": interactive}
    if config.get("provideClusterInfo") and cluster.entry is not None:
        spec["cluster"] = dict(cluster.entry)
        for extension in cluster.entry.get("extensions") or []:
            if isinstance(extension, dict) and extension.get("name") == "client.authentication.k8s.io/exec":
                spec["cluster"]["config"] = extension.get("extension")
                break
    env = dict(os.environ)
    env.update({str(item["name"]): str(item["value"]) for item in config.get("env") or []
                if isinstance(item, dict) and "name" in item})
    env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "spec": spec})
    argv = [str(config["command"]), *(str(arg) for arg in config.get("args") or [])]
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None if interactive else subprocess.PIPE,
                              stdin=None if interactive else subprocess.DEVNULL, cwd=user.source.parent, env=env,
                              text=True, check=False)
    except OSError as error:
        raise KubeconfigError(f"exec: {argv[0]}: {error.strerror or error}") from None
    if done.returncode != 0:
        said = (done.stderr or "").strip()
        raise KubeconfigError(f"exec: process returned {done.returncode}{f'. {said}' if said else ''}")
    try:
        credential = json.loads(done.stdout)
    except ValueError as error:
        raise KubeconfigError(f"exec: failed to decode process output: {error}") from None
    if not isinstance(credential, dict) or not isinstance(credential.get("status"), dict):
        raise KubeconfigError("exec: malformed response. missing key 'status'")
    if credential.get("apiVersion") != api_version:
        raise KubeconfigError(f"exec: plugin api version {credential.get('apiVersion')} does not match {api_version}")
    status: dict[str, Any] = credential["status"]
    if not status.get("token") and not (status.get("clientCertificateData") and status.get("clientKeyData")):
        raise KubeconfigError("exec: missing token or clientCertificateData and clientKeyData in the plugin's output")
    return status


class LightClient:
    """A `HeaderRequester` (`operators.runtime.kube.api`) over one kept-alive connection of `http.client`;
    used in `async with`, as `KubeClient` is. Each request blocks until answered: a command makes one at a
    time."""

    def __init__(self, access: ClusterAccess, timeout: float = 30.0, user_agent: str = USER_AGENT) -> None:
        self._access = access
        url = urllib.parse.urlsplit(access.server)
        self._https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port or (443 if self._https else 80)
        self._where = url.netloc
        self._prefix = url.path.rstrip("/")  # a server behind a path (a proxy's): every path goes below it
        self._timeout = timeout
        self._headers = {"User-Agent": user_agent, **access.headers}
        self._connection: http.client.HTTPConnection | None = None
        self._used = False
        self.requests: dict[str, int] = {}

    async def __aenter__(self) -> LightClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None, headers: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        """One call, as `KubeClient.request` makes it: the answer's JSON; `ApiError` for a non-2xx answer,
        `ApiUnreachable` when none came."""
        self.requests[method] = self.requests.get(method, 0) + 1
        target = self._prefix + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        sent = [*self._headers.items(), *headers]
        if data is not None:
            sent += [("Content-Type", content_type), ("Content-Length", str(len(data)))]
        elif method in ("POST", "PUT", "PATCH"):
            sent.append(("Content-Length", "0"))
        status, text = self._exchange(method, target, data, sent, path)
        if status >= 300:
            raise ApiError(status, error_message(text))
        return json.loads(text) if text else {}

    def _exchange(self, method: str, target: str, data: bytes | None, headers: Sequence[tuple[str, str]],
                  path: str) -> tuple[int, str]:
        """The status and body of one request; once more on a fresh connection when a kept-alive one turns out
        closed by the server before it answered (as every HTTP client does)."""
        while True:
            reused = self._connection is not None and self._used
            connection = self._connect(method, path)
            try:
                connection.putrequest(method, target, skip_accept_encoding=True)
                for name, value in headers:
                    connection.putheader(name, value)
                connection.endheaders(data)
                response = connection.getresponse()
                text = response.read().decode("utf-8", errors="replace")
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError,
                    ssl.SSLZeroReturnError) as error:
                self.close()
                if reused:
                    continue
                raise ApiUnreachable(f"{method} {path}: API server unreachable: {self._where}: "
                                     f"{error or type(error).__name__}") from None
            except TimeoutError:
                self.close()
                raise ApiUnreachable(f"{method} {path}: no answer from the API server within "
                                     f"{self._timeout:g}s") from None
            except (OSError, http.client.HTTPException) as error:
                self.close()
                raise ApiUnreachable(f"{method} {path}: API server unreachable: {self._where}: "
                                     f"{error or type(error).__name__}") from None
            self._used = True
            if response.will_close:
                self.close()
            return response.status, text

    def _connect(self, method: str, path: str) -> http.client.HTTPConnection:
        if self._connection is not None:
            return self._connection
        connection = (http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout,
                                                  context=self._access.ssl_context) if self._https
                      else http.client.HTTPConnection(self._host, self._port, timeout=self._timeout))
        try:
            connection.connect()
        except TimeoutError:
            raise ApiUnreachable(f"{method} {path}: no answer from the API server within "
                                 f"{self._timeout:g}s") from None
        except OSError as error:  # refused, unreachable, a name that does not resolve, TLS
            reason = (f"certificate verify failed: {error.verify_message}"
                      if isinstance(error, ssl.SSLCertVerificationError) else error.strerror or str(error))
            raise ApiUnreachable(f"{method} {path}: API server unreachable: cannot connect to host "
                                 f"{self._where}: {reason}") from None
        self._connection, self._used = connection, False
        return connection
