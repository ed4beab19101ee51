"""Sessions without a user database: the user's own token, sealed in a cookie.

Signing in is pasting a Kubernetes bearer token (`kubectl create token`, an OIDC id-token the cluster
accepts), or signing in at the cluster's OIDC issuer (`operators.console.oidc`), which ends with its id_token
in the same kind of session. The API server says whose it is (a SelfSubjectReview, which any authenticated
user may make) and the console seals `{token, user, nonce}` with Fernet (AES-CBC + HMAC, `cryptography`)
into an HttpOnly, SameSite=Strict cookie: the page's script never sees the token, another site can neither
read the cookie nor have the browser send it, and a tampered cookie does not open. Nothing is stored on the
server, so the console's replicas share sessions through their key alone, and signing out is forgetting the
cookie.

Actions also need the session's CSRF token (`X-CSRF-Token`, an HMAC of the session's nonce, handed to the
page by `GET /console/api/session`), and an `Origin`, when the browser sends one, of the console itself:
SameSite already keeps other sites' requests cookie-less, these two hold where it does not (an old
browser, a sibling subdomain).

A session lasts as long as its token: until the token's own expiry when it is a JWT that says (read, not
verified: it only ever ends a session sooner), and in any case only while the API server accepts it, which
every request and every open stream's periodic check (`ConsoleSettings.session_check_seconds`) asks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

COOKIE = "stead-console"
CSRF_HEADER = "X-CSRF-Token"
DEFAULT_LIFETIME = 12 * 3600.0
"""How long a session of a token that does not say when it expires lasts (an opaque token's)."""
MAX_TOKEN = 16 * 1024
"""The longest token accepted at sign-in (an OIDC id-token with many groups is a few KiB)."""


@dataclass(frozen=True)
class Session:
    token: str
    user: str
    nonce: str
    expires: float
    name: str = ""
    """The user's name as the OIDC issuer's username claim says it (display only; empty for a pasted token)."""

    @property
    def namespace(self) -> str | None:
        """A ServiceAccount's own namespace (`system:serviceaccount:NS:NAME`): where its console opens."""
        parts = self.user.split(":")
        return parts[2] if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else None


def token_expiry(token: str) -> float | None:
    """The `exp` of a JWT (unverified), None for any other token."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class Sealer:
    """Seals sessions into cookie values and opens them; derives each session's CSRF token."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        """Also seals a pending OIDC sign-in (`operators.console.oidc.PendingSealer`), for another purpose."""
        self._fernet = Fernet(key)
        self._mac_key = hashlib.sha256(b"stead-console-csrf:" + key).digest()

    @classmethod
    def from_file(cls, path: Path | None) -> Sealer:
        """The key in `path` (shared by replicas), else a new one for this process."""
        if path is None:
            return cls(Fernet.generate_key())
        key = path.read_bytes().strip()
        try:
            return cls(key)
        except ValueError:
            raise ValueError(f"{path}: not a Fernet key (32 url-safe base64-encoded bytes, 44 characters)") from None

    def seal(self, token: str, user: str, now: float | None = None, name: str = "") -> tuple[str, Session]:
        now = time.time() if now is None else now
        expiry = token_expiry(token)
        expires = min(expiry, now + DEFAULT_LIFETIME) if expiry else now + DEFAULT_LIFETIME
        session = Session(token, user, secrets.token_urlsafe(16), expires, name)
        body = json.dumps({"t": token, "u": user, "n": session.nonce, "e": expires, "d": name},
                          separators=(",", ":"))
        return self._fernet.encrypt(body.encode()).decode(), session

    def open(self, value: str, now: float | None = None) -> Session | None:
        """The session in a cookie value; None when it was not sealed here, was altered, or has expired."""
        try:
            data = json.loads(self._fernet.decrypt(value.encode()))
            session = Session(str(data["t"]), str(data["u"]), str(data["n"]), float(data["e"]), str(data.get("d", "")))
        except (InvalidToken, ValueError, KeyError, TypeError):
            return None
        return session if session.expires > (time.time() if now is None else now) else None

    def csrf(self, session: Session) -> str:
        return hmac.new(self._mac_key, session.nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(self.csrf(session), given)
