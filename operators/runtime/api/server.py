"""The HTTP API server as an addon of the operator process, served over TLS: every domain's routes
(`operators.runtime.api.extension`; the configuration store's at `/api/v1/config`, the first), behind one
authentication (`operators.runtime.api.auth`).

Certificates come from a mounted directory (`tls.crt`/`tls.key`, from the Helm chart or
cert-manager) or, on a developer's machine, are made at start-up by a CA whose certificate is
written next to the store so that `stead config` can trust it (`$STEAD_HOME/config-api/ca.crt`).

Client certificates (`client_ca`): `auto` trusts the CA that the cluster's API server trusts for
its own clients, as aggregated API servers do: `client-ca-file` of the ConfigMap
`kube-system/extension-apiserver-authentication`, which kube-apiserver publishes (none there, or
not readable: certificates are not asked for); a path trusts the CA bundle in that file; `off`
asks for none. With a CA, TLS is terminated by the relay of `operators.runtime.serving.relay`,
and the bundle is read again every `cert_reload_seconds` (a renewed CA applies to new connections).

The extensions are given as factories (`operators.catalog.API_EXTENSIONS`). They may serve reads from
watch-fed caches (`cache`); writes go to the API server. The watches use the same credentials as the
operator: `kubeconfig`, else what `load_access` finds (`$KUBECONFIG`, which `stead run --kubeconfig` sets,
or in-cluster). A worker process (`workers`) runs `python -m {worker}`, a module of the entry-point layer
that knows the extensions (`operators.apiworker`): nothing names them by string.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from operators.runtime.api.auth import (
    Authenticator,
    BasicAuthenticator,
    CertificateAuthenticator,
    ChainAuthenticator,
    TokenReviewAuthenticator,
    secret_loader,
)
from operators.runtime.api.extension import ExtensionFactory, ExtensionSettings
from operators.runtime.api.host import ApiHost
from operators.runtime.engine.services import Services
from operators.runtime.kube.client import ApiError, KubeClient, Requester, core_path
from operators.runtime.kube.watch import Watch
from operators.runtime.serving.certs import make_ca, make_leaf
from operators.runtime.serving.clientca import ClientCa
from operators.runtime.serving.http import HttpServer
from operators.runtime.serving.metrics import RequestObserver
from operators.runtime.serving.tls import on_renewal, write_private
from operators.runtime.serving.workers import WorkerPool

log = logging.getLogger(__name__)


@dataclass
class ApiServer:
    """The API on `listen:port` with TLS; authentication by bearer token, optionally Basic.

    With `workers` = 0 the API is served by the operator's own process and event loop; with N,
    by N processes of its own listening on the same port (`operators.runtime.serving.workers`), each
    with its own watches, caches and API-server client: lookups then use every core the pod
    has, and a busy reconciler never delays them. The kernel gives each connection to one
    worker; as between replicas, a write made through one worker shows in the others once
    their watches deliver it (milliseconds), and in the one it went through at once.
    """

    listen: str
    port: int
    tls_dir: Path
    mounted: bool = False  # True: tls.crt/tls.key are given; False: make them and write ca.crt
    basic_secret: tuple[str, str] | None = None  # (namespace, name) of a Secret with username/password
    default_namespace: str = "default"
    name: str = "config-api"
    cache: bool = True  # False: every read goes to the API server (three requests per lookup)
    kubeconfig: Path | None = None
    workers: int = 0
    cert_reload_seconds: float = 30.0  # how often mounted certificates and the client CA are checked for a renewal
    client_ca: str = "off"  # auto: the cluster's client CA; off; or the path of a CA bundle (see the module)
    extensions: tuple[ExtensionFactory, ...] = ()  # what it serves: the domains' routes (`api.extension`)
    worker: str = "operators.apiworker"  # the module a worker process runs (it knows the extensions)
    runs_state_dir: Path | None = None  # where the operator's runs keep their files, for the extensions that serve them
    _stack: contextlib.AsyncExitStack | None = field(default=None, init=False, repr=False)

    def _tls_files(self) -> tuple[Path, Path]:
        cert, key = self.tls_dir / "tls.crt", self.tls_dir / "tls.key"
        if not self.mounted:
            self.tls_dir.mkdir(parents=True, exist_ok=True)
            ca = make_ca("stead-config-api-ca")
            leaf = make_leaf(ca, "stead-config-api", hosts=[self.listen, "localhost", "127.0.0.1"])
            write_private(key, leaf.key_pem)
            cert.write_bytes(leaf.cert_pem)
            (self.tls_dir / "ca.crt").write_bytes(ca.cert_pem)
        return cert, key

    async def start(self, services: Services) -> None:
        self._stack = contextlib.AsyncExitStack()
        if self.workers > 0:
            self._tls_files()  # once, here: every worker serves the same certificate
            # Workers are processes of their own: their requests are not in this process's /metrics.
            pool = WorkerPool(self.name, [sys.executable, "-m", self.worker, self.worker_argument()],
                              self.workers)
            await pool.start()
            self._stack.push_async_callback(pool.stop)
        else:
            await self.serve(services.kube, self._stack, services.metrics.request_observer(self.name),
                             services.watches)
        log.info("config API on https://%s:%d/api/v1/config (%s)", self.listen, self.port,
                 f"{self.workers} worker processes" if self.workers else "in the operator's process")

    async def serve(self, kube: KubeClient, stack: contextlib.AsyncExitStack,
                    observe: RequestObserver | None = None, watches: Mapping[str, Watch] | None = None) -> None:
        """Serve the API from this process until `stack` closes; `observe` is told of each answered
        request. Only the operator's own process passes one: a worker (`operators.runtime.api.worker`) is a
        process of its own, whose requests the operator's `/metrics` cannot count, so workers serve
        unobserved. `watches`: the operator's, by plural, for the extensions' caches to follow."""
        cert, key = self._tls_files()
        tokens = TokenReviewAuthenticator(kube)
        authenticators: list[Authenticator] = [tokens]
        if self.basic_secret is not None:
            authenticators.append(BasicAuthenticator(secret_loader(kube, *self.basic_secret)))
        bundle = await read_client_ca(kube, self.client_ca)
        try:
            client_ca = ClientCa(bundle) if bundle is not None else None
        except ValueError as error:
            raise ValueError(f"the client CA ({self.client_ca}) holds no readable certificate: {error}") from None
        if client_ca is not None:
            authenticators.append(CertificateAuthenticator(tokens))
        authenticator = ChainAuthenticator(*authenticators)
        settings = ExtensionSettings(runs_state_dir=self.runs_state_dir, kubeconfig=self.kubeconfig,
                                     watches=watches, cache=self.cache)
        extensions = [factory(kube, authenticator, self.default_namespace, settings) for factory in self.extensions]
        for extension in extensions:
            await extension.start(stack)
        api = ApiHost(authenticator, self.default_namespace, extensions)
        server = HttpServer(api, errors=api.problem, observe=observe, gate=api.gate)
        await server.start(self.listen, self.port, (cert, key), client_ca=client_ca)
        stack.push_async_callback(server.stop)
        if self.mounted:  # cert-manager renews them in place: serve the renewal without a restart
            reloader = asyncio.create_task(on_renewal(cert, key, server.reload, self.cert_reload_seconds, "config API"))
            stack.push_async_callback(_cancel, reloader)
        if client_ca is not None:
            log.info("config API: client certificates of %s accepted (%s)", _describe_ca(client_ca),
                     "the cluster's client CA" if self.client_ca == "auto" else self.client_ca)
            watcher = asyncio.create_task(self._follow_client_ca(kube, server, client_ca))
            stack.push_async_callback(_cancel, watcher)

    async def _follow_client_ca(self, kube: Requester, server: HttpServer, current: ClientCa) -> None:
        """Trust a renewed client CA bundle for the connections to come (checked every `cert_reload_seconds`)."""
        while True:
            await asyncio.sleep(self.cert_reload_seconds)  # a poll interval, not a synchronisation
            try:
                bundle = await read_client_ca(kube, self.client_ca)
                if bundle is None or bundle == current.pem:
                    continue
                current = ClientCa(bundle)
            except (OSError, ValueError, ApiError) as error:
                log.warning("config API: client CA not reloaded (keeping the previous one): %s", error)
                continue
            server.trust(current)
            log.info("config API: client CA reloaded: %s", _describe_ca(current))

    def worker_argument(self) -> str:
        """What a worker process needs to serve as this server does (paths and names, no secret)."""
        return json.dumps({
            "listen": self.listen, "port": self.port, "tls_dir": str(self.tls_dir),
            "basic_secret": self.basic_secret, "default_namespace": self.default_namespace, "name": self.name,
            "cache": self.cache, "kubeconfig": None if self.kubeconfig is None else str(self.kubeconfig),
            "log_level": logging.getLogger().getEffectiveLevel(), "client_ca": self.client_ca,
            "worker": self.worker,
            "runs_state_dir": None if self.runs_state_dir is None else str(self.runs_state_dir),
        })

    @classmethod
    def for_worker(cls, argument: str, extensions: tuple[ExtensionFactory, ...] = ()) -> tuple[ApiServer, int]:
        """The server a worker runs from `worker_argument()` (its certificates made already), serving
        `extensions` (the worker's module knows them), and the log level."""
        given = json.loads(argument)
        secret = given["basic_secret"]
        server = cls(
            listen=given["listen"], port=given["port"], tls_dir=Path(given["tls_dir"]), mounted=True,
            basic_secret=None if secret is None else (secret[0], secret[1]),
            default_namespace=given["default_namespace"], name=given["name"], cache=given["cache"],
            kubeconfig=None if given["kubeconfig"] is None else Path(given["kubeconfig"]),
            client_ca=given.get("client_ca", "off"), extensions=extensions, worker=given["worker"],
            runs_state_dir=None if given.get("runs_state_dir") is None else Path(given["runs_state_dir"]))
        return server, int(given["log_level"])

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None


CLIENT_CA_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
"""Where kube-apiserver publishes the CA of its clients' certificates (key `client-ca-file`)."""


async def read_client_ca(kube: Requester, setting: str) -> bytes | None:
    """The client CA bundle `setting` names (`auto`, `off` or a path; see the module), None for none.

    `auto` without the ConfigMap, its key, or the permission to read it is None (logged): the API
    then takes tokens and Basic only. A path that cannot be read is an error (OSError).
    """
    if setting == "off":
        return None
    if setting != "auto":
        return await asyncio.to_thread(Path(setting).read_bytes)
    namespace, name = CLIENT_CA_CONFIGMAP
    try:
        configmap = await kube.request("GET", core_path("configmaps", namespace, name))
    except ApiError as error:
        if error.status in (403, 404):
            log.info("config API: no client certificates (ConfigMap %s/%s: %s %s)", namespace, name,
                     error.status, error.message)
            return None
        raise
    bundle = (configmap.get("data") or {}).get("client-ca-file")
    if not bundle:
        log.info("config API: no client certificates (ConfigMap %s/%s has no client-ca-file)", namespace, name)
        return None
    return str(bundle).encode()


def _describe_ca(client_ca: ClientCa) -> str:
    names = [c.subject.rfc4514_string() for c in client_ca.certificates]
    return f"CA {', '.join(names)}" if len(names) == 1 else f"{len(names)} CAs ({'; '.join(names)})"


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
