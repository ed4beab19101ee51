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
authenticator caches the same way. The caches (`operators.config.reviewcache`) fetch a review
once for all concurrent requests and renew it before it expires, so a busy client never waits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol

import aiohttp

from operators import GROUP, VERSION
from operators.config.reviewcache import ReviewCache
from operators.runtime.kube import ApiError

log = logging.getLogger(__name__)


class Identity(NamedTuple):
    """An authenticated caller. `scheme` says which authenticator vouched for it.

    A named tuple, not a dataclass: identities (with `Access`) key the authorization cache on
    every request, and a tuple hashes and compares in C.
    """

    user: str
    scheme: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Access(NamedTuple):
    """What a request wants to do, in RBAC's terms."""

    verb: str
    resource: str
    namespace: str


class AuthUnavailable(Exception):
    """Credentials could not be checked (the API server is unreachable): HTTP 503, not 401."""


class Authenticator(Protocol):
    """Checks the `Authorization` header of a request, then what the identity may do."""

    scheme: str
    """The HTTP authentication scheme it checks (`Bearer`, `Basic`)."""

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


class TokenReviewAuthenticator:
    """Bearer tokens checked with TokenReview, access with SubjectAccessReview.

    The operator's ServiceAccount needs `create` on `tokenreviews` and `subjectaccessreviews`
    (the built-in ClusterRole `system:auth-delegator`).
    """

    scheme = "Bearer"

    def __init__(self, kube: Requester, audiences: Sequence[str] = (), ttl: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._kube = kube
        self._audiences = list(audiences)
        self._tokens: ReviewCache[Identity | None] = ReviewCache(ttl, clock=clock)
        self._reviews: ReviewCache[bool] = ReviewCache(ttl, clock=clock)

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
        return await self._tokens.get(_digest(token), lambda: self._review_token(token))

    async def _review_token(self, token: str) -> Identity | None:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        review = await self._post("/apis/authentication.k8s.io/v1/tokenreviews",
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
        status = review.get("status") or {}
        if status.get("authenticated") is not True:
            return None
        user = status.get("user") or {}
        return Identity(
            user=str(user.get("username") or ""), scheme="Bearer", uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(x) for x in v)) for k, v in (user.get("extra") or {}).items())),
        )

    async def authorize(self, identity: Identity, access: Access) -> bool:
        if identity.scheme != "Bearer":
            return False
        return await self._reviews.get((identity, access), lambda: self._review_access(identity, access))

    async def _review_access(self, identity: Identity, access: Access) -> bool:
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
        return (review.get("status") or {}).get("allowed") is True


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

    scheme = "Basic"

    def __init__(self, load: CredentialsLoader, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 user: str = "basic-admin") -> None:
        self._load = load
        self._cache: ReviewCache[tuple[bytes, bytes] | None] = ReviewCache(ttl, clock=clock)
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
        expected = await self._cache.get("credentials", self._load)
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
    """One authenticator per scheme: the header's scheme picks who checks the credentials, and
    authorization goes back to the authenticator that vouched for the identity."""

    scheme = "*"  # whichever its members check

    def __init__(self, *authenticators: Authenticator) -> None:
        self._by_scheme = {authenticator.scheme.lower(): authenticator for authenticator in authenticators}

    async def authenticate(self, authorization: str) -> Identity | None:
        authenticator = self._by_scheme.get(authorization.lstrip().partition(" ")[0].lower())
        return None if authenticator is None else await authenticator.authenticate(authorization)

    async def authorize(self, identity: Identity, access: Access) -> bool:
        authenticator = self._by_scheme.get(identity.scheme.lower())
        return authenticator is not None and await authenticator.authorize(identity, access)
