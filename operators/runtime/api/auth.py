"""Who may use the API server (every domain's routes, the configuration store's first): Kubernetes bearer
tokens, client certificates, and HTTP Basic against a Secret.

The API takes the platform's own authentication plus Basic. On Kubernetes the platform's
is a bearer token or a client certificate. For a token, `TokenReview` says who it belongs to;
for a certificate (verified against the cluster's client CA by the TLS layer,
`operators.runtime.serving.relay`), its Subject does, by Kubernetes' x509 rule (user = CN,
groups = O). Then `SubjectAccessReview` says whether that user may `get`/`update`
`configvalues.stead.dev` (or `configcomponents`, `environments`) in the namespace, so the API is
governed by the same RBAC as `kubectl`. Basic credentials come from
one Secret (`username`, `password`, optionally `namespaces`) for clients that cannot carry a
token (a Hiera backend); whoever holds them may do anything through the API, in the namespaces
the Secret lists (comma-separated), or in every namespace when it lists none.

Secrets never leak: tokens and passwords are never logged, never put in an error, and the
caches key on their SHA-256 so the process keeps no plain copy beyond the request. Reviews are
cached for a few seconds because a lookup-heavy client (Puppet asks once per key) would
otherwise cost the API server two reviews per lookup; the kube-apiserver's own webhook token
authenticator caches the same way. The caches (`operators.runtime.api.reviewcache`) fetch a review
once for all concurrent requests and renew it before it expires, so a busy client never waits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol

import aiohttp

from operators import GROUP, VERSION
from operators.runtime.api.reviewcache import ReviewCache
from operators.runtime.kube.client import ApiError, Requester, core_path

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
    """What a request wants to do, in RBAC's terms; `name` when it is about one object, so that a
    Role limited by `resourceNames` is honoured."""

    verb: str
    resource: str
    namespace: str
    name: str = ""


class AuthUnavailable(Exception):
    """Credentials could not be checked (the API server is unreachable): HTTP 503, not 401."""


class TooManyAttempts(Exception):
    """A peer (or all peers together) presented more unknown credentials than may be reviewed: HTTP 429."""


class PeerBudget:
    """Token buckets for reviews of credentials not seen before: one per peer address, and one for
    all peers together.

    A client that sends junk tokens would otherwise make the operator send a TokenReview per
    token under its own identity. Known tokens (cached) never spend the budget, so a flood from
    one peer neither slows others nor evicts their cache entries. At most `max_peers` buckets
    are kept (the least recently used go first).

    The bucket per peer alone is no bound: a client with many addresses (an IPv6 prefix, 127/8 on
    the node, or enough addresses to push its own buckets out of the `max_peers` kept, which come
    back full) gets a budget per address. The shared bucket (`total_rate`, `total_burst`) caps the
    reviews of unknown credentials the process sends whatever the number of addresses; a review
    is spent from both, and only when both allow it.
    """

    def __init__(self, rate: float = 5.0, burst: float = 20.0, max_peers: int = 10_000,
                 clock: Callable[[], float] = time.monotonic, total_rate: float = 100.0,
                 total_burst: float = 500.0) -> None:
        self.rate, self.burst, self.max_peers = rate, burst, max_peers
        self.total_rate, self.total_burst = total_rate, total_burst
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._total = (total_burst, clock())

    def take(self, peer: str) -> bool:
        now = self._clock()
        tokens, last = self._buckets.pop(peer, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        total, total_last = self._total
        total = min(self.total_burst, total + (now - total_last) * self.total_rate)
        allowed = tokens >= 1.0 and total >= 1.0
        self._buckets[peer] = (tokens - 1.0 if allowed else tokens, now)
        self._total = (total - 1.0 if allowed else total, now)
        while len(self._buckets) > self.max_peers:
            self._buckets.popitem(last=False)
        return allowed


class _Rejected(Exception):
    """A TokenReview said no: raised out of the review cache so that nothing is kept there."""


class Authenticator(Protocol):
    """Checks the `Authorization` header of a request, then what the identity may do."""

    scheme: str
    """The HTTP authentication scheme it checks (`Bearer`, `Basic`)."""

    async def authenticate(self, authorization: str, peer: str = "") -> Identity | None:
        """The identity behind the header; None when the credentials are absent, wrong or not this scheme.
        `peer` is the client's address, for limits per client."""
        ...

    async def authorize(self, identity: Identity, access: Access) -> bool:
        """Whether `identity` may perform `access`."""
        ...


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
                 clock: Callable[[], float] = time.monotonic, budget: PeerBudget | None = None,
                 max_rejected: int = 4096) -> None:
        self._kube = kube
        self._audiences = list(audiences)
        self._ttl = ttl
        self._clock = clock
        self._tokens: ReviewCache[Identity] = ReviewCache(ttl, clock=clock)  # good tokens only
        self._rejected: OrderedDict[str, float] = OrderedDict()  # digest -> when refused; bounded, LRU
        self._max_rejected = max_rejected
        self._budget = budget or PeerBudget(clock=clock)
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

    async def authenticate(self, authorization: str, peer: str = "") -> Identity | None:
        token = _split(authorization, "Bearer")
        if token is None:
            return None
        digest = _digest(token)
        refused = self._rejected.get(digest)
        if refused is not None and self._clock() - refused <= self._ttl:
            return None  # refused a moment ago: not worth another review
        if not self._tokens.holds(digest) and not self._budget.take(peer):
            raise TooManyAttempts("too many unknown credentials from this client or from all clients together; "
                                  "retry later")
        try:
            return await self._tokens.get(digest, lambda: self._review_token(token))
        except _Rejected:
            self._rejected.pop(digest, None)
            self._rejected[digest] = self._clock()
            while len(self._rejected) > self._max_rejected:
                self._rejected.popitem(last=False)
            return None

    async def _review_token(self, token: str) -> Identity:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        review = await self._post("/apis/authentication.k8s.io/v1/tokenreviews",
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
        status = review.get("status") or {}
        if status.get("authenticated") is not True:
            raise _Rejected
        user = status.get("user") or {}
        return Identity(
            user=str(user.get("username") or ""), scheme="Bearer", uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(x) for x in v)) for k, v in (user.get("extra") or {}).items())),
        )

    async def authorize(self, identity: Identity, access: Access) -> bool:
        if identity.scheme != "Bearer":
            return False
        return await self.review(identity, access)

    async def review(self, identity: Identity, access: Access) -> bool:
        """A SubjectAccessReview of any authenticated identity (cached for `ttl`)."""
        return await self._reviews.get((identity, access), lambda: self._review_access(identity, access))

    async def _review_access(self, identity: Identity, access: Access) -> bool:
        spec: dict[str, Any] = {
            "user": identity.user, "groups": list(identity.groups),
            "resourceAttributes": {"group": GROUP, "version": VERSION, "resource": access.resource,
                                   "verb": access.verb, "namespace": access.namespace,
                                   **({"name": access.name} if access.name else {})},
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


CERTIFICATE_SCHEME = "x509"


class CertificateAuthenticator:
    """Users of client certificates, authorized by SubjectAccessReview as token users are.

    The certificate is verified, and its Subject mapped to a user and groups, before a request
    is read (`operators.runtime.serving.relay`); the API makes the identity from that
    (`certificate_identity`). This authenticator only authorizes: no header carries a certificate.
    """

    scheme = CERTIFICATE_SCHEME

    def __init__(self, reviewer: TokenReviewAuthenticator) -> None:
        self._reviewer = reviewer

    async def authenticate(self, authorization: str, peer: str = "") -> Identity | None:
        return None

    async def authorize(self, identity: Identity, access: Access) -> bool:
        return identity.scheme == CERTIFICATE_SCHEME and await self._reviewer.review(identity, access)


def certificate_identity(user: str, groups: Sequence[str]) -> Identity:
    """The identity of a verified client certificate's user and groups."""
    return Identity(user=user, scheme=CERTIFICATE_SCHEME, groups=tuple(groups))


class BasicCredentials(NamedTuple):
    """The one set of Basic credentials, and the namespaces they are good for (None: all)."""

    username: bytes
    password: bytes
    namespaces: frozenset[str] | None = None


CredentialsLoader = Callable[[], Awaitable[BasicCredentials | None]]


def _namespaces(raw: bytes | None) -> frozenset[str] | None:
    if raw is None:
        return None
    return frozenset(n.strip() for n in raw.decode(errors="replace").split(",") if n.strip())


def secret_loader(kube: Requester, namespace: str, name: str) -> CredentialsLoader:
    """Reads `username`, `password` and `namespaces` from a Secret; None when it or a key is missing."""

    async def load() -> BasicCredentials | None:
        try:
            secret = await kube.request("GET", core_path("secrets", namespace, name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise AuthUnavailable("credentials cannot be checked now") from error
        data = secret.get("data") or {}
        try:
            username = base64.b64decode(data["username"], validate=True)
            password = base64.b64decode(data["password"], validate=True)
            limit = base64.b64decode(data["namespaces"], validate=True) if "namespaces" in data else None
        except (KeyError, binascii.Error, TypeError):
            log.warning("Secret %s/%s lacks a valid username or password key", namespace, name)
            return None
        return BasicCredentials(username, password, _namespaces(limit))

    return load


def static_credentials(username: str, password: str, namespaces: Sequence[str] | None = None) -> CredentialsLoader:
    """Fixed credentials (tests, a single-user local mode)."""

    async def load() -> BasicCredentials:
        return BasicCredentials(username.encode(), password.encode(),
                                None if namespaces is None else frozenset(namespaces))

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
        self._cache: ReviewCache[BasicCredentials | None] = ReviewCache(ttl, clock=clock)
        self._user = user

    async def authenticate(self, authorization: str, peer: str = "") -> Identity | None:
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
        want_user, want_password, _ = expected
        # both comparisons always run, so timing does not tell which part was wrong
        user_ok = hmac.compare_digest(hashlib.sha256(username).digest(), hashlib.sha256(want_user).digest())
        password_ok = hmac.compare_digest(hashlib.sha256(password).digest(), hashlib.sha256(want_password).digest())
        if not (user_ok and password_ok):
            return None
        return Identity(user=username.decode(errors="replace"), scheme="Basic")

    async def authorize(self, identity: Identity, access: Access) -> bool:
        """Anything, in the namespaces the credentials are limited to (read again: a narrowed Secret
        takes effect within `ttl`)."""
        if identity.scheme != "Basic":
            return False
        current = await self._cache.get("credentials", self._load)
        return current is not None and (current.namespaces is None or access.namespace in current.namespaces)


class ChainAuthenticator:
    """One authenticator per scheme: the header's scheme picks who checks the credentials, and
    authorization goes back to the authenticator that vouched for the identity."""

    scheme = "*"  # whichever its members check

    def __init__(self, *authenticators: Authenticator) -> None:
        self._by_scheme = {authenticator.scheme.lower(): authenticator for authenticator in authenticators}

    async def authenticate(self, authorization: str, peer: str = "") -> Identity | None:
        authenticator = self._by_scheme.get(authorization.lstrip().partition(" ")[0].lower())
        return None if authenticator is None else await authenticator.authenticate(authorization, peer)

    async def authorize(self, identity: Identity, access: Access) -> bool:
        authenticator = self._by_scheme.get(identity.scheme.lower())
        return authenticator is not None and await authenticator.authorize(identity, access)
