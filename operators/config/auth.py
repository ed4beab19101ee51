"""Who may use the configuration API: Kubernetes bearer tokens and HTTP Basic against a Secret.

The seed asks for the platform's own authentication plus Basic. On Kubernetes the platform's
is a bearer token: `TokenReview` says who it belongs to and `SubjectAccessReview` whether that
user may `get`/`update` `configvalues.stead.dev` (or `configcomponents`, `environments`) in the
namespace, so the API is governed by the same RBAC as `kubectl`. Basic credentials come from
one Secret (`username`, `password`) for clients that cannot carry a token (a Hiera backend);
whoever holds them is an administrator of the API, by design.

Secrets never leak: tokens and passwords are never logged, never put in an error, and the
caches key on their SHA-256 so the process keeps no plain copy beyond the request. Reviews are
cached for a few seconds because a lookup-heavy client (Puppet asks once per key) would
otherwise cost the API server two reviews per lookup; the kube-apiserver's own webhook token
authenticator caches the same way.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from operators import GROUP, VERSION
from operators.runtime.kube import ApiError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """An authenticated caller. `scheme` says which authenticator vouched for it."""

    user: str
    scheme: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Access:
    """What a request wants to do, in RBAC's terms."""

    verb: str
    resource: str
    namespace: str


class AuthUnavailable(Exception):
    """Credentials could not be checked (the API server is unreachable): HTTP 503, not 401."""


class Authenticator(Protocol):
    """Checks the `Authorization` header of a request, then what the identity may do."""

    async def authenticate(self, authorization: str) -> Identity | None:
        """The identity behind the header; None when the credentials are absent, wrong or not this scheme."""
        ...

    async def authorize(self, identity: Identity, access: Access) -> bool:
        """Whether `identity` may perform `access`."""
        ...


class Requester(Protocol):
    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]: ...


def _split(authorization: str, scheme: str) -> str | None:
    kind, _, credentials = authorization.strip().partition(" ")
    if kind.lower() != scheme.lower() or not credentials.strip():
        return None
    return credentials.strip()


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class _TtlCache:
    """A small time-bounded cache; entries past `ttl` seconds are ignored and replaced."""

    ttl: float
    max_entries: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _entries: dict[Any, tuple[float, Any]] = field(default_factory=dict)

    def get(self, key: Any) -> tuple[bool, Any]:
        hit = self._entries.get(key)
        if hit is None or self.clock() - hit[0] > self.ttl:
            return False, None
        return True, hit[1]

    def put(self, key: Any, value: Any) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.clear()  # crude, but bounded: a flood of bad tokens cannot grow memory
        self._entries[key] = (self.clock(), value)


class TokenReviewAuthenticator:
    """Bearer tokens checked with TokenReview, access with SubjectAccessReview.

    The operator's ServiceAccount needs `create` on `tokenreviews` and `subjectaccessreviews`
    (the built-in ClusterRole `system:auth-delegator`).
    """

    def __init__(self, kube: Requester, audiences: Sequence[str] = (), ttl: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._audiences = list(audiences)
        self._tokens = _TtlCache(ttl, clock=clock)
        self._reviews = _TtlCache(ttl, clock=clock)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._kube.request("POST", path, body)
        except ApiError as error:
            log.warning("%s failed: %s %s", path.rsplit("/", 1)[-1], error.status, error.message)
            raise AuthUnavailable("credentials cannot be checked now") from error
        except (TimeoutError, OSError, aiohttp.ClientError) as error:
            log.warning("%s failed: %s", path.rsplit("/", 1)[-1], type(error).__name__)
            raise AuthUnavailable("credentials cannot be checked now") from error

    async def authenticate(self, authorization: str) -> Identity | None:
        token = _split(authorization, "Bearer")
        if token is None:
            return None
        key = _digest(token)
        hit, cached = self._tokens.get(key)
        if hit:
            return cached if isinstance(cached, Identity) else None
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        review = await self._post("/apis/authentication.k8s.io/v1/tokenreviews",
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
        status = review.get("status") or {}
        identity: Identity | None = None
        if status.get("authenticated") is True:
            user = status.get("user") or {}
            identity = Identity(
                user=str(user.get("username") or ""), scheme="Bearer", uid=str(user.get("uid") or ""),
                groups=tuple(str(g) for g in user.get("groups") or ()),
                extra=tuple(sorted((str(k), tuple(str(x) for x in v)) for k, v in (user.get("extra") or {}).items())),
            )
        self._tokens.put(key, identity)
        return identity

    async def authorize(self, identity: Identity, access: Access) -> bool:
        if identity.scheme != "Bearer":
            return False
        key = (identity, access)
        hit, cached = self._reviews.get(key)
        if hit:
            return bool(cached)
        spec: dict[str, Any] = {
            "user": identity.user, "groups": list(identity.groups),
            "resourceAttributes": {"group": GROUP, "version": VERSION, "resource": access.resource,
                                   "verb": access.verb, "namespace": access.namespace},
        }
        if identity.uid:
            spec["uid"] = identity.uid
        if identity.extra:
            spec["extra"] = {k: list(v) for k, v in identity.extra}
        review = await self._post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        allowed = (review.get("status") or {}).get("allowed") is True
        self._reviews.put(key, allowed)
        return allowed


CredentialsLoader = Callable[[], Awaitable[tuple[bytes, bytes] | None]]


def secret_loader(kube: Requester, namespace: str, name: str) -> CredentialsLoader:
    """Reads `username` and `password` from a Secret; None when it or a key is missing."""

    async def load() -> tuple[bytes, bytes] | None:
        try:
            secret = await kube.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise AuthUnavailable("credentials cannot be checked now") from error
        data = secret.get("data") or {}
        try:
            username = base64.b64decode(data["username"], validate=True)
            password = base64.b64decode(data["password"], validate=True)
        except (KeyError, binascii.Error, TypeError):
            log.warning("Secret %s/%s lacks a valid username or password key", namespace, name)
            return None
        return username, password

    return load


def static_credentials(username: str, password: str) -> CredentialsLoader:
    """Fixed credentials (tests, a single-user local mode)."""

    async def load() -> tuple[bytes, bytes]:
        return username.encode(), password.encode()

    return load


class BasicAuthenticator:
    """HTTP Basic against one set of credentials, compared in constant time.

    The credentials are re-read at most every `ttl` seconds, so rotating the Secret takes
    effect without a restart and a lookup does not cost a GET.
    """

    def __init__(self, load: CredentialsLoader, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 user: str = "basic-admin") -> None:
        self._load = load
        self._cache = _TtlCache(ttl, clock=clock)
        self._user = user

    async def authenticate(self, authorization: str) -> Identity | None:
        encoded = _split(authorization, "Basic")
        if encoded is None:
            return None
        try:
            username, sep, password = base64.b64decode(encoded, validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return None
        if not sep:
            return None
        hit, expected = self._cache.get("credentials")
        if not hit:
            expected = await self._load()
            self._cache.put("credentials", expected)
        if expected is None:
            return None
        want_user, want_password = expected
        # both comparisons always run, so timing does not tell which part was wrong
        user_ok = hmac.compare_digest(hashlib.sha256(username).digest(), hashlib.sha256(want_user).digest())
        password_ok = hmac.compare_digest(hashlib.sha256(password).digest(), hashlib.sha256(want_password).digest())
        if not (user_ok and password_ok):
            return None
        return Identity(user=username.decode(errors="replace"), scheme="Basic")

    async def authorize(self, identity: Identity, access: Access) -> bool:
        return identity.scheme == "Basic"


class ChainAuthenticator:
    """The first authenticator that recognises the credentials decides; authorization goes back
    to the authenticator that vouched for the identity."""

    def __init__(self, *authenticators: Authenticator) -> None:
        self._chain = authenticators

    async def authenticate(self, authorization: str) -> Identity | None:
        for authenticator in self._chain:
            identity = await authenticator.authenticate(authorization)
            if identity is not None:
                return identity
        return None

    async def authorize(self, identity: Identity, access: Access) -> bool:
        for authenticator in self._chain:
            if await authenticator.authorize(identity, access):
                return True
        return False
