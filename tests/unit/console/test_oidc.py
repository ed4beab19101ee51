"""The pure parts of the OIDC sign-in (operators/console/oidc.py): PKCE, the sealed sign-in in progress, the
callback's checks, and the id_token's verification by signature, iss, aud, exp, iat and nonce."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.asymmetric import rsa

from operators.cli.console import add_console_arguments, settings_of
from operators.console.oidc import (
    OidcError,
    OidcSettings,
    Pending,
    PendingSealer,
    authorization_url,
    check_callback,
    new_pending,
    pkce_challenge,
    verify_id_token,
)
from operators.console.session import Sealer

ISSUER = "https://issuer.example.test"
SETTINGS = OidcSettings(issuer=ISSUER, client_id="stead-console")
NOW = 1_800_000_000.0


def test_the_pkce_challenge_is_rfc_7636s_s256() -> None:
    verifier, challenge = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    assert pkce_challenge(verifier) == challenge  # RFC 7636, appendix B
    pending = new_pending("http://console/cb", now=NOW)
    assert len(pending.verifier) >= 43 and pending.state != pending.nonce != pending.verifier


def test_the_authorization_url_carries_state_nonce_and_the_challenge_not_the_verifier() -> None:
    pending = new_pending("http://127.0.0.1:8090/console/oidc/callback", now=NOW)
    url = authorization_url("https://issuer.example.test/auth", SETTINGS, pending)
    query = {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}
    assert query == {"response_type": "code", "client_id": "stead-console", "scope": "openid profile email",
                     "redirect_uri": pending.redirect_uri, "state": pending.state, "nonce": pending.nonce,
                     "code_challenge": pending.challenge, "code_challenge_method": "S256"}
    assert pending.verifier not in url


def test_a_pending_sign_in_opens_with_its_key_within_its_lifetime_and_for_its_purpose_only() -> None:
    key = Fernet.generate_key()
    sealer = PendingSealer(key)
    pending = new_pending("http://console/cb", now=NOW)
    value = sealer.seal(pending)
    assert pending.verifier not in value and pending.nonce not in value  # sealed, not encoded
    assert sealer.open(value, now=NOW + 1) == pending
    assert sealer.open(value, now=pending.expires) is None  # too late
    assert PendingSealer(Fernet.generate_key()).open(value, now=NOW + 1) is None
    assert sealer.open(value[:-4] + ("AAAA" if not value.endswith("AAAA") else "BBBB"), now=NOW + 1) is None
    assert sealer.open(None) is None and sealer.open("garbage") is None
    # a session cookie sealed with the same key is no pending sign-in, nor is a problem
    session_cookie, _ = Sealer(key).seal("token", "alice")
    assert sealer.open(session_cookie) is None
    assert sealer.open(sealer.seal_problem("nope")) is None
    assert sealer.open_problem(sealer.seal_problem("the id_token has expired")) == "the id_token has expired"
    assert sealer.open_problem(value) is None and sealer.open_problem(session_cookie) is None


def test_the_callback_needs_this_browsers_sign_in_and_its_state() -> None:
    pending = Pending("the-state", "the-nonce", "v" * 43, "http://console/cb", NOW + 600)
    assert check_callback({"state": "the-state", "code": "c0de"}, pending) == "c0de"
    with pytest.raises(OidcError, match="expired or was started in another browser"):
        check_callback({"state": "the-state", "code": "c0de"}, None)
    with pytest.raises(OidcError, match="state mismatch"):
        check_callback({"state": "forged", "code": "c0de"}, pending)
    with pytest.raises(OidcError, match="state mismatch"):
        check_callback({"code": "c0de"}, pending)
    with pytest.raises(OidcError, match="refused the sign-in: access_denied \\(user said no\\)"):
        check_callback({"state": "the-state", "error": "access_denied", "error_description": "user said no"}, pending)
    with pytest.raises(OidcError, match="no authorization code"):
        check_callback({"state": "the-state"}, pending)


# --- the id_token ------------------------------------------------------------------------------------


def keypair(kid: str) -> tuple[Any, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return key, {**public, "kid": kid, "use": "sig", "alg": "RS256"}


@pytest.fixture(scope="module")
def issuer_key() -> tuple[Any, dict[str, Any]]:
    return keypair("k1")


@pytest.fixture(scope="module")
def other_key() -> Any:
    """Another key with the issuer's kid: a forger's."""
    return keypair("k1")[0]


def claims(**changes: Any) -> dict[str, Any]:
    base = {"iss": ISSUER, "aud": "stead-console", "sub": "alice", "exp": NOW + 300, "iat": NOW - 5,
            "nonce": "the-nonce", "preferred_username": "alice"}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def sign(key: Any, body: dict[str, Any], kid: str = "k1", algorithm: str = "RS256") -> str:
    return jwt.encode(body, key, algorithm=algorithm, headers={"kid": kid})


def test_a_good_id_token_verifies_and_gives_its_claims(issuer_key: tuple[Any, dict[str, Any]]) -> None:
    key, jwk = issuer_key
    got = verify_id_token(sign(key, claims()), {"keys": [jwk]}, SETTINGS, "the-nonce", now=NOW)
    assert got["sub"] == "alice"
    # several audiences: only when this console is the authorized party
    many = claims(aud=["stead-console", "other"], azp="stead-console")
    assert verify_id_token(sign(key, many), {"keys": [jwk]}, SETTINGS, "the-nonce", now=NOW)["azp"] == "stead-console"


@pytest.mark.parametrize(("forge", "message"), [
    ("other key", "signature is not by the issuer's keys"),
    ("unknown kid", "key the issuer does not publish"),
    ("audience", "not for this console"),
    ("issuer", "not issued by https://issuer.example.test"),
    ("expired", "has expired"),
    ("future", "issued in the future"),
    ("nonce", "nonce is not this sign-in's"),
    ("no nonce", "nonce is not this sign-in's"),
    ("no sub", "no 'sub' claim"),
    ("hmac", "not an asymmetric algorithm"),
    ("none", "not an asymmetric algorithm"),
    ("azp", "several audiences"),
    ("garbage", "not a JWT"),
])
def test_a_forged_or_misdirected_id_token_is_refused_with_a_reason(
        issuer_key: tuple[Any, dict[str, Any]], other_key: Any, forge: str, message: str) -> None:
    key, jwk = issuer_key
    other = other_key
    token = {
        "other key": lambda: sign(other, claims()),
        "unknown kid": lambda: sign(key, claims(), kid="k9"),
        "audience": lambda: sign(key, claims(aud="kubectl")),
        "issuer": lambda: sign(key, claims(iss="https://evil.example.test")),
        "expired": lambda: sign(key, claims(exp=NOW - 120)),
        "future": lambda: sign(key, claims(iat=NOW + 600)),
        "nonce": lambda: sign(key, claims(nonce="another-sign-in")),
        "no nonce": lambda: sign(key, claims(nonce=None)),
        "no sub": lambda: sign(key, claims(sub=None)),
        "hmac": lambda: jwt.encode(claims(), "client-secret-of-32-bytes-or-more!!", algorithm="HS256"),
        "none": lambda: jwt.encode(claims(), None, algorithm="none"),
        "azp": lambda: sign(key, claims(aud=["stead-console", "other"], azp="other")),
        "garbage": lambda: "not.a.jwt",
    }[forge]()
    with pytest.raises(OidcError, match=message) as refused:
        verify_id_token(token, {"keys": [jwk]}, SETTINGS, "the-nonce", now=NOW)
    assert token not in refused.value.message


def test_oidc_settings_refuse_what_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an https:// URL"):
        OidcSettings(issuer="http://issuer", client_id="c")
    with pytest.raises(ValueError, match="lacks `openid`"):
        OidcSettings(issuer=ISSUER, client_id="c", scopes=("profile",))
    empty = tmp_path / "secret"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        OidcSettings(issuer=ISSUER, client_id="c", client_secret_file=empty).client_secret()
    empty.write_text("s3cret\n")
    assert OidcSettings(issuer=ISSUER, client_id="c", client_secret_file=empty).client_secret() == "s3cret"


def test_stead_console_takes_oidc_from_flags_and_the_secret_only_from_a_file(tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_console_arguments(parser)
    assert settings_of(parser.parse_args([])).oidc is None
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    settings = settings_of(parser.parse_args([
        "--oidc-issuer", ISSUER, "--oidc-client-id", "stead-console", "--oidc-client-secret-file", str(secret),
        "--oidc-scopes", "openid,groups", "--oidc-username-claim", "email"])).oidc
    assert settings is not None and settings.scopes == ("openid", "groups") and settings.username_claim == "email"
    assert not any("secret" in action.dest and not action.dest.endswith("_file") for action in parser._actions)
    with pytest.raises(ValueError, match="--oidc-issuer needs --oidc-client-id"):
        settings_of(parser.parse_args(["--oidc-issuer", ISSUER]))
    with pytest.raises(ValueError, match="--oidc-client-id needs --oidc-issuer"):
        settings_of(parser.parse_args(["--oidc-client-id", "c"]))


def test_pending_lifetime_is_minutes_not_hours() -> None:
    pending = new_pending("http://console/cb")
    assert 60 <= pending.expires - time.time() <= 900
