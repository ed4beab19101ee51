"""Routes that other parts of Stead serve on the configuration API's server (same port, TLS and
authentication): an `ApiExtension` gives its routes, the lines it adds to the root's route list and
its part of the OpenAPI document.

The configuration API does not import its extensions (they live in layers above it, e.g. the
service inventory of `operators.lsm.api`): whoever composes the process names them by import path
(`"package.module:factory"`), so that worker processes (`--config-api-workers`) load them too. A
factory is called with the API server's client, the authenticator, the default namespace and the
process's `ExtensionSettings` (what an extension needs of the process beyond the API server, such as
where the runs keep their files: passed in, never read from a global, so that a worker process and a
test give each extension exactly what it serves from).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

from operators.config.api.calls import NAMESPACE_PATTERN, ApiProblem, Call, bad_request, not_found
from operators.config.auth import CERTIFICATE_SCHEME, Access, Authenticator
from operators.runtime.kube.client import ApiError, Impersonating, Requester
from operators.runtime.serving.http import Response

Handler = Callable[[Call], Awaitable[Response]]
IMPERSONATED_SCHEMES = frozenset({"Bearer", CERTIFICATE_SCHEME})
"""The identities that are Kubernetes users (a token's, a client certificate's): writes impersonate them."""
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


@dataclass(frozen=True)
class ExtensionSettings:
    """What the operator's process tells its API extensions about itself (`stead operator`'s flags)."""

    runs_state_dir: Path | None = None
    """Where the operator's workflow runs keep their files (`RunSettings.state_dir`): the whole output of each
    task instance is there. None: this server has no runs' files to serve (their routes answer 503)."""


ExtensionFactory = Callable[[Requester, Authenticator, str, ExtensionSettings], ApiExtension]


class ExtensionBase:
    """What an extension's handlers share: the API server's client (the operator's credentials), the
    authenticator that checks each caller, the namespace a call names (`?namespace=`, else the server's
    default) and the caller's permission on `resource` there (a SubjectAccessReview per request)."""

    resource = ""
    """The plural the caller's permissions are checked on, unless a call names another."""

    def __init__(self, kube: Requester, authenticator: Authenticator, default_namespace: str = "default",
                 settings: ExtensionSettings | None = None) -> None:
        self.kube = kube
        self.authenticator = authenticator
        self.default_namespace = default_namespace
        self.settings = settings or ExtensionSettings()

    def _namespace(self, call: Call) -> str:
        namespace = call.query.get("namespace", self.default_namespace)
        if not NAMESPACE_PATTERN.match(namespace) or len(namespace) > 63:
            bad_request(f"query parameter namespace: {namespace!r} is not a valid namespace name")
        return namespace

    def caller(self, call: Call) -> Requester:
        """The API server's client for the writes `call` makes: impersonating its caller, so that the API
        server's own authorization, admission (webhooks, ValidatingAdmissionPolicies) and audit see the real
        user rather than the operator. A Basic identity is no Kubernetes user: its writes stay the operator's."""
        identity = call.identity
        if identity.scheme not in IMPERSONATED_SCHEMES:
            return self.kube
        return Impersonating(self.kube, identity.user, identity.groups, identity.uid)

    async def _authorize(self, call: Call, verb: str, namespace: str, name: str = "",
                         resource: str | None = None) -> None:
        resource = resource or self.resource
        identity = call.identity
        if not await self.authenticator.authorize(identity, Access(verb, resource, namespace, name)):
            raise ApiProblem(403, "Forbidden",
                             f'user "{identity.user}" may not {verb} {resource} in namespace "{namespace}"')


def passed_on(error: ApiError, what: str, missing: str) -> NoReturn:
    """The API server's answer to a request as the API's own: a 404 (`notFound: missing`), a conflict or
    another refusal (the admission webhook's) with its message; anything else a 503 to retry."""
    if error.status == 404:
        not_found(missing, f"{what}: {error.message}")
    if error.status == 409:
        raise ApiProblem(409, "Conflict", f"{what}: {error.message}")
    if 400 <= error.status < 500:
        raise ApiProblem(error.status, "Refused", f"{what}: {error.message}")
    raise ApiProblem(503, "ServiceUnavailable", f"{what}: the Kubernetes API server answered {error.status}: "
                                                f"{error.message}; retry")


def load_extension(reference: str) -> ExtensionFactory:
    """The factory an import path `package.module:attribute` names (ValueError when it names none)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"API extension {reference!r}: expected package.module:factory")
    factory = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(factory):
        raise ValueError(f"API extension {reference!r}: {attribute} is not a factory of {module_name}")
    return factory  # type: ignore[no-any-return]
