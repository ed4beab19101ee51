"""The configuration HTTP API as an addon of the operator process, served over TLS.

Certificates come from a mounted directory (`tls.crt`/`tls.key`, from the Helm chart or
cert-manager) or, on a developer's machine, are made at start-up by a CA whose certificate is
written next to the store so that `stead config` can trust it (`$STEAD_HOME/config-api/ca.crt`).

Reads are served from a watch-fed cache (`operators.config.cache`), writes go to the API
server. The watches use the same credentials as the operator: `kubeconfig`, else what
`load_access` finds (`$KUBECONFIG`, which `stead run --kubeconfig` sets, or in-cluster).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from operators.config.api import create_app
from operators.config.auth import (
    Authenticator,
    BasicAuthenticator,
    ChainAuthenticator,
    TokenReviewAuthenticator,
    secret_loader,
)
from operators.config.cache import cached_repository
from operators.config.repository import ConfigRepository, KubeConfigRepository
from operators.runtime.certs import make_ca, make_leaf
from operators.runtime.kube import load_access
from operators.runtime.services import Services

log = logging.getLogger(__name__)


@dataclass
class ConfigApiServer:
    """`/api/v1/config` on `listen:port` with TLS; authentication by bearer token, optionally Basic."""

    listen: str
    port: int
    tls_dir: Path
    mounted: bool = False  # True: tls.crt/tls.key are given; False: make them and write ca.crt
    basic_secret: tuple[str, str] | None = None  # (namespace, name) of a Secret with username/password
    default_namespace: str = "default"
    name: str = "config-api"
    cache: bool = True  # False: every read goes to the API server (three requests per lookup)
    kubeconfig: Path | None = None
    _runner: web.AppRunner | None = field(default=None, init=False, repr=False)
    _stack: contextlib.AsyncExitStack | None = field(default=None, init=False, repr=False)

    def _ssl_context(self) -> ssl.SSLContext:
        cert, key = self.tls_dir / "tls.crt", self.tls_dir / "tls.key"
        if not self.mounted:
            self.tls_dir.mkdir(parents=True, exist_ok=True)
            ca = make_ca("stead-config-api-ca")
            leaf = make_leaf(ca, "stead-config-api", hosts=[self.listen, "localhost", "127.0.0.1"])
            cert.write_bytes(leaf.cert_pem)
            key.write_bytes(leaf.key_pem)
            key.chmod(0o600)
            (self.tls_dir / "ca.crt").write_bytes(ca.cert_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        return context

    async def start(self, services: Services) -> None:
        authenticators: list[Authenticator] = [TokenReviewAuthenticator(services.kube)]
        if self.basic_secret is not None:
            authenticators.append(BasicAuthenticator(secret_loader(services.kube, *self.basic_secret)))
        self._stack = contextlib.AsyncExitStack()
        repository: ConfigRepository = KubeConfigRepository(services.kube)
        if self.cache:
            repository = await self._stack.enter_async_context(
                cached_repository(services.kube, load_access(self.kubeconfig)))
        app = create_app(repository, ChainAuthenticator(*authenticators), self.default_namespace)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.listen, self.port, ssl_context=self._ssl_context()).start()
        log.info("config API on https://%s:%d/api/v1/config", self.listen, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None
