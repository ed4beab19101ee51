"""What serves routes on the API server (same port, TLS and authentication): an `ApiExtension` declares its
routes once (`operators.runtime.api.routes`), from which the server's matching, its root's route list and its
OpenAPI document are made.

Each domain's routes are an extension (`operators.config.api`, `operators.lsm.api`, `operators.graphs.api`),
given to the server as factories (`operators.catalog.API_EXTENSIONS`), never imported by it. A factory is
called with the API server's client, the authenticator, the default namespace and the process's
`ExtensionSettings` (what an extension needs of the process beyond the API server, such as where the runs
keep their files: passed in, never read from a global, so that a worker process and a test give each
extension exactly what it serves from).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol

from operators.runtime.api.auth import CERTIFICATE_SCHEME, Access, Authenticator
from operators.runtime.api.calls import NAMESPACE_PATTERN, ApiProblem, Call, bad_request, not_found
from operators.runtime.api.routes import Handler, RouteDoc, RouteTable
from operators.runtime.kube.client import ApiError, Impersonating, Requester
from operators.runtime.kube.watch import Watch

IMPERSONATED_SCHEMES = frozenset({"Bearer", CERTIFICATE_SCHEME})
"""The identities that are Kubernetes users (a token's, a client certificate's): writes impersonate them."""


class ApiExtension(Protocol):
    """What an extension gives the API."""

    def declared(self) -> RouteTable:
        """Its routes (handlers unbound: the server binds them to this extension)."""
        ...

    async def start(self, stack: contextlib.AsyncExitStack) -> None:
        """Make ready what it serves from (a cache, say) for as long as `stack` is open."""
        ...

    def problem_of(self, error: Exception) -> ApiProblem | None:
        """The answer to an error of its own that its handlers raise (None: not one of its own)."""
        ...


@dataclass(frozen=True)
class ExtensionSettings:
    """What the operator's process tells its API extensions about itself (`stead operator`'s flags)."""

    runs_state_dir: Path | None = None
    """Where the operator's workflow runs keep their files (`RunSettings.state_dir`): the whole output of each
    task instance is there. None: this server has no runs' files to serve (their routes answer 503)."""
    kubeconfig: Path | None = None
    """The credentials of the extensions' own watches (None: `load_access`'s: `$KUBECONFIG` or in-cluster)."""
    watches: Mapping[str, Watch] | None = None
    """The operator's watches by plural, for the caches that can follow them (none in a worker process)."""
    cache: bool = True
    """Whether reads may be served from watch-fed caches (False: every read goes to the API server)."""


ExtensionFactory = Callable[[Requester, Authenticator, str, ExtensionSettings], ApiExtension]


class HandlersBase:
    """What every extension's handlers share: the authenticator that checks each caller, the namespace a call
    names (`?namespace=`, else the server's default) and the caller's permission on `resource` there (a
    SubjectAccessReview per request); and what an extension does not need to do (start, own errors)."""

    resource = ""
    """The plural the caller's permissions are checked on, unless a call names another."""

    def __init__(self, authenticator: Authenticator, default_namespace: str = "default",
                 settings: ExtensionSettings | None = None) -> None:
        self.authenticator = authenticator
        self.default_namespace = default_namespace
        self.settings = settings or ExtensionSettings()

    def declared(self) -> RouteTable:
        raise NotImplementedError

    async def start(self, stack: contextlib.AsyncExitStack) -> None:
        """Nothing to make ready."""

    def problem_of(self, error: Exception) -> ApiProblem | None:
        return None

    def routes(self) -> Sequence[tuple[str, Mapping[str, Handler]]]:
        """The matching table of this extension alone (the server's joins every extension's)."""
        return self.declared().bind(self)

    def route_docs(self) -> Sequence[RouteDoc]:
        return self.declared().docs()

    def namespace(self, call: Call) -> str:
        """The namespace the call names (`?namespace=`), else the server's default (400 for a bad name)."""
        namespace = call.query.get("namespace", self.default_namespace)
        if not NAMESPACE_PATTERN.match(namespace) or len(namespace) > 63:
            bad_request(f"query parameter namespace: {namespace!r} is not a valid namespace name")
        return namespace

    async def authorize(self, call: Call, verb: str, namespace: str, name: str = "",
                        resource: str | None = None) -> None:
        resource = resource or self.resource
        identity = call.identity
        if not await self.authenticator.authorize(identity, Access(verb, resource, namespace, name)):
            raise ApiProblem(403, "Forbidden",
                             f'user "{identity.user}" may not {verb} {resource} in namespace "{namespace}"')


class ExtensionBase(HandlersBase):
    """The handlers of an extension over the API server's client (the operator's credentials)."""

    def __init__(self, kube: Requester, authenticator: Authenticator, default_namespace: str = "default",
                 settings: ExtensionSettings | None = None) -> None:
        super().__init__(authenticator, default_namespace, settings)
        self.kube = kube

    def caller(self, call: Call) -> Requester:
        """The API server's client for the writes `call` makes: impersonating its caller, so that the API
        server's own authorization, admission (webhooks, ValidatingAdmissionPolicies) and audit see the real
        user rather than the operator. A Basic identity is no Kubernetes user: its writes stay the operator's."""
        identity = call.identity
        if identity.scheme not in IMPERSONATED_SCHEMES:
            return self.kube
        return Impersonating(self.kube, identity.user, identity.groups, identity.uid)


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
