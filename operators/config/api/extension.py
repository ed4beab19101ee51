"""Routes that other parts of Stead serve on the configuration API's server (same port, TLS and
authentication): an `ApiExtension` gives its routes, the lines it adds to the root's route list and
its part of the OpenAPI document.

The configuration API does not import its extensions (they live in layers above it, e.g. the
service inventory of `operators.lsm.api`): whoever composes the process names them by import path
(`"package.module:factory"`), so that worker processes (`--config-api-workers`) load them too. A
factory is called with the API server's client, the authenticator and the default namespace.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from operators.config.api.calls import Call
from operators.config.auth import Authenticator
from operators.runtime.kube.client import Requester
from operators.runtime.serving.http import Response

Handler = Callable[[Call], Awaitable[Response]]
RouteDoc = tuple[str, str, str]
"""(method, path template, what it does), as the root lists it."""


class ApiExtension(Protocol):
    """What an extension gives the API."""

    def routes(self) -> Sequence[tuple[str, Mapping[str, Handler]]]:
        """Path patterns (regular expressions on the decoded path, anchored at the end by the API) and
        their handlers by method; HEAD is added wherever GET is."""
        ...

    def route_docs(self) -> Sequence[RouteDoc]:
        ...

    def openapi_paths(self) -> Mapping[str, Any]:
        ...

    def openapi_schemas(self) -> Mapping[str, Any]:
        ...


ExtensionFactory = Callable[[Requester, Authenticator, str], ApiExtension]


def load_extension(reference: str) -> ExtensionFactory:
    """The factory an import path `package.module:attribute` names (ValueError when it names none)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"API extension {reference!r}: expected package.module:factory")
    factory = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(factory):
        raise ValueError(f"API extension {reference!r}: {attribute} is not a factory of {module_name}")
    return factory  # type: ignore[no-any-return]
