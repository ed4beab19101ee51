"""Sessions sealed in the cookie: what opens, what does not, and when they end."""

from __future__ import annotations

import base64
import json

from cryptography.fernet import Fernet

from operators.console.session import DEFAULT_LIFETIME, Sealer, token_expiry


def jwt(claims: dict[str, object]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{body}.signature"


def test_a_sealed_session_opens_with_its_key_only() -> None:
    sealer = Sealer(Fernet.generate_key())
    value, session = sealer.seal("opaque-token", "alice", now=1000.0)
    opened = sealer.open(value, now=1001.0)
    assert opened == session and opened.token == "opaque-token" and opened.user == "alice"
    assert "opaque-token" not in value  # sealed, not encoded
    assert Sealer(Fernet.generate_key()).open(value, now=1001.0) is None
    tampered = value[:-4] + ("AAAA" if not value.endswith("AAAA") else "BBBB")
    assert sealer.open(tampered, now=1001.0) is None
    assert sealer.open("not a cookie", now=1001.0) is None


def test_a_session_ends_with_its_token() -> None:
    sealer = Sealer(Fernet.generate_key())
    value, session = sealer.seal(jwt({"exp": 1600}), "bob", now=1000.0)
    assert session.expires == 1600
    assert sealer.open(value, now=1599.0) is not None
    assert sealer.open(value, now=1600.0) is None
    _, opaque = sealer.seal("opaque", "bob", now=1000.0)
    assert opaque.expires == 1000.0 + DEFAULT_LIFETIME


def test_token_expiry_reads_jwts_only() -> None:
    assert token_expiry(jwt({"exp": 42})) == 42
    assert token_expiry(jwt({"exp": True})) is None
    assert token_expiry(jwt({"sub": "x"})) is None
    assert token_expiry("a.b") is None and token_expiry("a.!!!.c") is None


def test_the_csrf_token_is_the_sessions_own() -> None:
    sealer = Sealer(Fernet.generate_key())
    _, one = sealer.seal("t", "u")
    _, two = sealer.seal("t", "u")
    assert sealer.csrf_ok(one, sealer.csrf(one))
    assert not sealer.csrf_ok(one, sealer.csrf(two))
    assert not sealer.csrf_ok(one, None) and not sealer.csrf_ok(one, "")


def test_a_service_accounts_session_opens_in_its_namespace() -> None:
    sealer = Sealer(Fernet.generate_key())
    assert sealer.seal("t", "system:serviceaccount:team-a:ci")[1].namespace == "team-a"
    assert sealer.seal("t", "alice@example.com")[1].namespace is None
