"""The configuration HTTP API as an addon of the operator process, served over TLS.

Certificates come from a mounted directory (`tls.crt`/`tls.key`, from the Helm chart or
cert-manager) or, on a developer's machine, are made at start-up by a CA whose certificate is
written next to the store so that `stead config` can trust it (`$STEAD_HOME/config-api/ca.crt`).

Reads are served from a watch-fed cache (`operators.config.cache`), writes go to the API
server. The watches use the same credentials as the operator: `kubeconfig`, else what
`load_access` finds (`$KUBECONFIG`, which `stead run --kubeconfig` sets, or in-cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from operators.config.api import ConfigApi
from operators.config.auth import (
    Authenticator,
    BasicAuthenticator,
    ChainAuthenticator,
    TokenReviewAuthenticator,
    secret_loader,
)
from operators.config.cache import cached_repository
from operators.config.repository import ConfigRepository, KubeConfigRepository
from operators.runtime.engine.services import Services
from operators.runtime.kube.client import KubeClient, load_access
from operators.runtime.serving.certs import make_ca, make_leaf
from operators.runtime.serving.http import HttpServer
from operators.runtime.serving.metrics import RequestObserver
from operators.runtime.serving.tls import on_renewal, write_private
from operators.runtime.serving.workers import WorkerPool

log = logging.getLogger(__name__)


@dataclass
class ConfigApiServer:
    """`/api/v1/config` on `listen:port` with TLS; authentication by bearer token, optionally Basic.

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
    cert_reload_seconds: float = 30.0  # how often mounted certificates are checked for a renewal
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
            pool = WorkerPool(self.name, [sys.executable, "-m", "operators.config.worker", self.worker_argument()],
                              self.workers)
            await pool.start()
            self._stack.push_async_callback(pool.stop)
        else:
            await self.serve(services.kube, self._stack, services.metrics.request_observer(self.name))
        log.info("config API on https://%s:%d/api/v1/config (%s)", self.listen, self.port,
                 f"{self.workers} worker processes" if self.workers else "in the operator's process")

    async def serve(self, kube: KubeClient, stack: contextlib.AsyncExitStack,
                    observe: RequestObserver | None = None) -> None:
        """Serve the API from this process until `stack` closes; `observe` is told of each answered
        request. Only the operator's own process passes one: a worker (`operators.config.worker`) is a
        process of its own, whose requests the operator's `/metrics` cannot count, so workers serve
        unobserved."""
        cert, key = self._tls_files()
        authenticators: list[Authenticator] = [TokenReviewAuthenticator(kube)]
        if self.basic_secret is not None:
            authenticators.append(BasicAuthenticator(secret_loader(kube, *self.basic_secret)))
        repository: ConfigRepository = KubeConfigRepository(kube)
        if self.cache:
            repository = await stack.enter_async_context(cached_repository(kube, load_access(self.kubeconfig)))
        api = ConfigApi(repository, ChainAuthenticator(*authenticators), self.default_namespace)
        server = HttpServer(api, errors=api.problem, observe=observe)
        await server.start(self.listen, self.port, (cert, key))
        stack.push_async_callback(server.stop)
        if self.mounted:  # cert-manager renews them in place: serve the renewal without a restart
            reloader = asyncio.create_task(on_renewal(cert, key, server.reload, self.cert_reload_seconds, "config API"))
            stack.push_async_callback(_cancel, reloader)

    def worker_argument(self) -> str:
        """What a worker process needs to serve as this server does (paths and names, no secret)."""
        return json.dumps({
            "listen": self.listen, "port": self.port, "tls_dir": str(self.tls_dir),
            "basic_secret": self.basic_secret, "default_namespace": self.default_namespace, "name": self.name,
            "cache": self.cache, "kubeconfig": None if self.kubeconfig is None else str(self.kubeconfig),
            "log_level": logging.getLogger().getEffectiveLevel(),
        })

    @classmethod
    def for_worker(cls, argument: str) -> tuple[ConfigApiServer, int]:
        """The server a worker runs from `worker_argument()` (its certificates made already), and
        the log level."""
        given = json.loads(argument)
        secret = given["basic_secret"]
        server = cls(
            listen=given["listen"], port=given["port"], tls_dir=Path(given["tls_dir"]), mounted=True,
            basic_secret=None if secret is None else (secret[0], secret[1]),
            default_namespace=given["default_namespace"], name=given["name"], cache=given["cache"],
            kubeconfig=None if given["kubeconfig"] is None else Path(given["kubeconfig"]))
        return server, int(given["log_level"])

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
