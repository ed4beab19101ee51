"""Signing in with OIDC: the authorization-code flow with PKCE, ending in the same session a pasted token opens.

The console is an OIDC client of the issuer the cluster's API server trusts. `/console/oidc/login` sends the
browser to the issuer's authorization endpoint with a fresh `state`, `nonce` and PKCE challenge, and keeps
the three (and the redirect URI) sealed with the session key in a short-lived HttpOnly cookie, so nothing is
stored on the server and any replica can finish the sign-in. `/console/oidc/callback` checks the `state`,
exchanges the code for tokens at the token endpoint (with the PKCE verifier and the client's secret), and
verifies the id_token: its signature against the issuer's JWKS, then `iss`, `aud`, `exp`, `iat` and the
`nonce`. The id_token is then the user's bearer token exactly as a pasted one: the API server (its
`--authentication-config` JWT authenticator) says who it is, every request goes as the user, and the session
ends with the token's `exp`.

JOSE is PyJWT's (`jwt`): a maintained library with type hints whose only dependency, `cryptography`, the
console already has; it parses JWKS and checks signature, `iss`, `aud` and time claims in one call. The two
HTTP calls of the flow (discovery, JWKS, token) are aiohttp, the console's own client, so Authlib's OAuth
client (and its HTTP stack) would bring nothing the console needs.

Every failure is an `OidcError` whose message says what went wrong in words a user can act on, and never
holds a token, a code or the client's secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import jwt
from cryptography.fernet import Fernet, InvalidToken

LOGIN_PATH = "/console/oidc/login"
CALLBACK_PATH = "/console/oidc/callback"
STATE_COOKIE = "stead-console-oidc"
"""The sign-in in progress (state, nonce, PKCE verifier), sealed; SameSite=Lax, as the issuer's redirect back
is a navigation from another site, which a Strict cookie would not accompany."""
PROBLEM_COOKIE = "stead-console-oidc-problem"
"""Why the last OIDC sign-in failed, sealed, read once by the sign-in page."""
STATE_LIFETIME = 600.0
"""How long a user may take at the issuer's login page."""
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512")
"""The asymmetric algorithms a JWT authenticator of the API server accepts (never `none`, never HMAC: an
HMAC id_token would be signed with the client's secret, which the API server does not have)."""
LEEWAY = 30.0
"""Clock skew allowed between the issuer and the console on `exp`/`iat`."""


class OidcError(Exception):
    """A sign-in that cannot go on; `message` is shown on the sign-in page as it is."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    """The issuer URL, exactly as the id_tokens' `iss` says it and the API server is configured with."""
    client_id: str
    client_secret_file: Path | None = None
    """A file holding the client's secret (None: a public client, PKCE alone)."""
    ca_file: Path | None = None
    """The CA bundle the issuer's HTTPS is trusted by (None: the system's)."""
    scopes: tuple[str, ...] = ("openid", "profile", "email")
    username_claim: str = "preferred_username"
    """The claim shown as the user's name beside the API server's username. Display only: who the user is
    to the cluster is what the API server makes of the token."""
    redirect_url: str | None = None
    """The callback URL the issuer sends the browser back to (None: this console's own address, as the
    browser reached it)."""

    def __post_init__(self) -> None:
        if not self.issuer.startswith("https://"):
            raise ValueError(f"oidc issuer: {self.issuer!r} is not an https:// URL (the API server accepts no other)")
        if not self.client_id:
            raise ValueError("oidc client id: empty")
        if "openid" not in self.scopes:
            raise ValueError(f"oidc scopes: {' '.join(self.scopes)!r} lacks `openid` (without it, no id_token)")

    def client_secret(self) -> str | None:
        if self.client_secret_file is None:
            return None
        try:
            secret = self.client_secret_file.read_text().strip()
        except OSError as error:
            raise ValueError(f"oidc client secret file {self.client_secret_file}: {error.strerror}") from None
        if not secret:
            raise ValueError(f"oidc client secret file {self.client_secret_file}: empty")
        return secret


# --- the sign-in in progress -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """What the callback needs of the sign-in it finishes."""

    state: str
    nonce: str
    verifier: str
    redirect_uri: str
    expires: float

    @property
    def challenge(self) -> str:
        return pkce_challenge(self.verifier)


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 S256: base64url(sha256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


def new_pending(redirect_uri: str, now: float | None = None) -> Pending:
    now = time.time() if now is None else now
    # 32 random bytes each: a verifier of 43 characters, the least RFC 7636 allows, and unguessable state/nonce
    return Pending(secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(32), redirect_uri,
                   now + STATE_LIFETIME)


class PendingSealer:
    """Seals a `Pending` (and a sign-in's problem) into cookie values with the session key, for another purpose
    than sessions: a session cookie never opens as a pending sign-in, nor the reverse."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    def seal(self, pending: Pending) -> str:
        body = {"p": "oidc-pending", "s": pending.state, "n": pending.nonce, "v": pending.verifier,
                "r": pending.redirect_uri, "e": pending.expires}
        return self._fernet.encrypt(json.dumps(body, separators=(",", ":")).encode()).decode()

    def open(self, value: str | None, now: float | None = None) -> Pending | None:
        """The sign-in in `value`; None when absent, not sealed here, altered, of another purpose, or expired."""
        if not value:
            return None
        try:
            data = json.loads(self._fernet.decrypt(value.encode()))
            if data.get("p") != "oidc-pending":
                return None
            pending = Pending(str(data["s"]), str(data["n"]), str(data["v"]), str(data["r"]), float(data["e"]))
        except (InvalidToken, ValueError, KeyError, TypeError, AttributeError):
            return None
        return pending if pending.expires > (time.time() if now is None else now) else None

    def seal_problem(self, message: str) -> str:
        body = {"p": "oidc-problem", "m": message[:500]}
        return self._fernet.encrypt(json.dumps(body, separators=(",", ":")).encode()).decode()

    def open_problem(self, value: str | None) -> str | None:
        """A problem sealed here within the sign-in's lifetime (anyone else's is ignored, not shown)."""
        if not value:
            return None
        try:
            data = json.loads(self._fernet.decrypt(value.encode(), ttl=int(STATE_LIFETIME)))
        except (InvalidToken, ValueError, TypeError):
            return None
        return str(data["m"]) if isinstance(data, dict) and data.get("p") == "oidc-problem" else None


def authorization_url(endpoint: str, settings: OidcSettings, pending: Pending) -> str:
    params = {"response_type": "code", "client_id": settings.client_id, "redirect_uri": pending.redirect_uri,
              "scope": " ".join(settings.scopes), "state": pending.state, "nonce": pending.nonce,
              "code_challenge": pending.challenge, "code_challenge_method": "S256"}
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"


def check_callback(query: Mapping[str, str], pending: Pending | None) -> str:
    """The authorization code of the issuer's redirect back, once it is known to answer this browser's sign-in."""
    if pending is None:
        raise OidcError("the OIDC sign-in expired or was started in another browser: sign in again")
    if not secrets.compare_digest(query.get("state", ""), pending.state):
        raise OidcError("the issuer's answer does not belong to this sign-in (state mismatch): sign in again")
    if "error" in query:
        described = query.get("error_description", "")[:200]
        raise OidcError(f"the issuer refused the sign-in: {query['error'][:60]}"
                        + (f" ({described})" if described else ""))
    code = query.get("code", "")
    if not code:
        raise OidcError("the issuer's answer has no authorization code")
    return code


# --- the id_token ------------------------------------------------------------------------------------------


def verify_id_token(id_token: str, jwks: Mapping[str, Any], settings: OidcSettings, nonce: str,
                    now: float | None = None) -> dict[str, Any]:
    """The id_token's claims once its signature (by a key of the issuer's JWKS), `iss`, `aud` (and `azp` when
    it names several audiences), `exp`, `iat` and `nonce` are checked."""
    try:
        header = jwt.get_unverified_header(id_token)
    except jwt.PyJWTError:
        raise OidcError("the issuer's id_token is not a JWT") from None
    algorithm = header.get("alg")
    if algorithm not in ALGORITHMS:
        raise OidcError(f"the id_token is signed with {str(algorithm)[:20]!r}, not an asymmetric algorithm the "
                        "API server accepts")
    key = signing_key(jwks, header.get("kid"), str(algorithm))
    try:
        claims = _decode_at(id_token, key, str(algorithm), settings, time.time() if now is None else now)
    except jwt.InvalidSignatureError:
        raise OidcError("the id_token's signature is not by the issuer's keys") from None
    except jwt.InvalidAudienceError:
        raise OidcError(f"the id_token is not for this console (its audience is not {settings.client_id!r})") from None
    except jwt.InvalidIssuerError:
        raise OidcError(f"the id_token is not issued by {settings.issuer}") from None
    except jwt.ExpiredSignatureError:
        raise OidcError("the id_token has expired (is the console's clock right?)") from None
    except jwt.ImmatureSignatureError:
        raise OidcError("the id_token is issued in the future (is the console's clock right?)") from None
    except jwt.MissingRequiredClaimError as error:
        raise OidcError(f"the id_token has no {error.claim!r} claim") from None
    except jwt.PyJWTError as error:
        raise OidcError(f"the id_token does not verify: {type(error).__name__}") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != settings.client_id:
        raise OidcError("the id_token names several audiences but was not issued to this console (azp)")
    if not isinstance(claims.get("nonce"), str) or not secrets.compare_digest(claims["nonce"], nonce):
        raise OidcError("the id_token's nonce is not this sign-in's (a replayed or injected token)")
    return claims


def _decode_at(id_token: str, key: Any, algorithm: str, settings: OidcSettings, now: float) -> dict[str, Any]:
    """`jwt.decode` (signature, `iss`, `aud`, required claims), and the time checks at `now`, made here rather
    than by PyJWT, which reads the clock itself, so that they are testable."""
    claims: dict[str, Any] = jwt.decode(
        id_token, key, algorithms=[algorithm], audience=settings.client_id, issuer=settings.issuer,
        options={"require": ["iss", "aud", "exp", "iat", "sub"], "verify_exp": False, "verify_iat": False,
                 "verify_nbf": False})
    if float(claims["exp"]) <= now - LEEWAY:
        raise jwt.ExpiredSignatureError("expired")
    if float(claims["iat"]) > now + LEEWAY:
        raise jwt.ImmatureSignatureError("iat in the future")
    return claims


def signing_key(jwks: Mapping[str, Any], kid: object, algorithm: str) -> Any:
    """The key of `jwks` that signed a token: by `kid`, or the only signing key when the token names none."""
    try:
        keys = jwt.PyJWKSet.from_dict(dict(jwks)).keys
    except jwt.PyJWTError:
        raise OidcError("the issuer's JWKS holds no usable key") from None
    usable = [key for key in keys if getattr(key, "public_key_use", None) in (None, "sig")]
    if kid is not None:
        usable = [key for key in usable if key.key_id == kid]
    elif len(usable) != 1:
        usable = []
    if not usable:
        raise OidcError("the id_token is signed by a key the issuer does not publish (its JWKS has no such kid)")
    return usable[0].key


def display_name(claims: Mapping[str, Any], claim: str) -> str:
    value = claims.get(claim)
    return value[:200] if isinstance(value, str) else ""


# --- talking to the issuer -------------------------------------------------------------------------------


class Issuer:
    """The issuer as the console reaches it: discovery and JWKS (cached), the token endpoint."""

    def __init__(self, settings: OidcSettings, http: aiohttp.ClientSession) -> None:
        self.settings = settings
        self._http = http
        self._secret = settings.client_secret()
        self._metadata: dict[str, Any] | None = None
        self._jwks: dict[str, Any] | None = None

    @staticmethod
    def ssl_context(settings: OidcSettings) -> ssl.SSLContext:
        if settings.ca_file is None:
            return ssl.create_default_context()
        return ssl.create_default_context(cafile=str(settings.ca_file))

    async def _get(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with self._http.get(url, headers={"Accept": "application/json"}) as response:
                if response.status != 200:
                    raise OidcError(f"the OIDC issuer answered {response.status} for its {what}")
                data = await response.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise OidcError(f"the OIDC issuer is unreachable ({what}): {_reason(error)}") from None
        except ValueError:
            raise OidcError(f"the OIDC issuer's {what} is not JSON") from None
        if not isinstance(data, dict):
            raise OidcError(f"the OIDC issuer's {what} is not a JSON object")
        return data

    async def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
            data = await self._get(url, "discovery document")
            if data.get("issuer") != self.settings.issuer:
                raise OidcError(f"the discovery document names issuer {str(data.get('issuer'))[:100]!r}, not "
                                f"{self.settings.issuer!r}")
            for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(data.get(field), str) or not data[field].startswith("https://"):
                    raise OidcError(f"the discovery document's {field} is not an https:// URL")
            self._metadata = data
        return self._metadata

    async def jwks(self, refresh: bool = False) -> dict[str, Any]:
        if self._jwks is None or refresh:
            self._jwks = await self._get(str((await self.metadata())["jwks_uri"]), "JWKS")
        return self._jwks

    async def authorization_url(self, pending: Pending) -> str:
        return authorization_url(str((await self.metadata())["authorization_endpoint"]), self.settings, pending)

    async def exchange(self, code: str, pending: Pending) -> str:
        """The id_token the token endpoint gives for `code` (client_secret_basic, or a public client's id)."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": pending.redirect_uri,
                "code_verifier": pending.verifier}
        auth = None
        if self._secret is None:
            form["client_id"] = self.settings.client_id
        else:
            auth = aiohttp.BasicAuth(self.settings.client_id, self._secret)
        endpoint = str((await self.metadata())["token_endpoint"])
        try:
            async with self._http.post(endpoint, data=form, auth=auth,
                                       headers={"Accept": "application/json"}) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise OidcError(f"the OIDC issuer is unreachable (token endpoint): {_reason(error)}") from None
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if status != 200 or not isinstance(answer, dict):
            said = answer.get("error") if isinstance(answer, dict) else None
            raise OidcError(f"the issuer's token endpoint refused the code ({status}"
                            + (f", {str(said)[:60]}" if said else "") + ")")
        id_token = answer.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise OidcError("the issuer's token endpoint gave no id_token (is the `openid` scope allowed?)")
        return id_token

    async def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """`verify_id_token` against the JWKS, fetched again once when the token names a key it lacks (the
        issuer rotated its keys)."""
        try:
            return verify_id_token(id_token, await self.jwks(), self.settings, nonce)
        except OidcError as error:
            if "kid" not in error.message:
                raise
        return verify_id_token(id_token, await self.jwks(refresh=True), self.settings, nonce)


def _reason(error: BaseException) -> str:
    """A connection error's words without anything of the request (no URL query, no header)."""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return "its certificate is not trusted (--oidc-ca-file)"
    if isinstance(error, aiohttp.ClientConnectorError):
        return f"cannot connect to {error.host}:{error.port}"
    if isinstance(error, TimeoutError):
        return "timed out"
    return type(error).__name__


def scopes_of(text: str | Sequence[str]) -> tuple[str, ...]:
    """`openid profile email` (or `openid,profile`) as a tuple."""
    words = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    return tuple(dict.fromkeys(words))
