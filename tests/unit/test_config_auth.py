"""Authenticators: TokenReview + SubjectAccessReview, Basic against a Secret, caching, no leaks."""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import pytest

from operators.config.auth import (
    Access,
    AuthUnavailable,
    BasicAuthenticator,
    ChainAuthenticator,
    Identity,
    TokenReviewAuthenticator,
    secret_loader,
)
from operators.runtime.kube import ApiError

ACCESS = Access("get", "configvalues", "ns")


class FakeKube:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail = fail
        self.secret: dict[str, Any] | None = {"data": {"username": base64.b64encode(b"admin").decode(),
                                                       "password": base64.b64encode(b"pw").decode()}}

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> dict[str, Any]:
        self.calls.append((method, path, body))
        if self.fail:
            raise ApiError(403, "tokenreviews is forbidden")
        if path.endswith("/tokenreviews"):
            ok = body["spec"]["token"] == "valid-token"
            user = {"username": "system:serviceaccount:ns:sa", "uid": "u1", "groups": ["g1"],
                    "extra": {"k": ["v"]}}
            return {"status": {"authenticated": ok, "user": user if ok else {}}}
        if path.endswith("/subjectaccessreviews"):
            return {"status": {"allowed": body["spec"]["resourceAttributes"]["verb"] == "get"}}
        if "/secrets/" in path:
            if self.secret is None:
                raise ApiError(404, "not found")
            return self.secret
        raise AssertionError(path)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_token_review_then_subject_access_review_with_the_users_attributes() -> None:
    kube = FakeKube()
    auth = TokenReviewAuthenticator(kube, audiences=["stead"])
    identity = run(auth.authenticate("Bearer valid-token"))
    assert identity == Identity(user="system:serviceaccount:ns:sa", scheme="Bearer", uid="u1", groups=("g1",),
                                extra=(("k", ("v",)),))
    assert kube.calls[0][2]["spec"] == {"token": "valid-token", "audiences": ["stead"]}
    assert run(auth.authorize(identity, ACCESS)) is True
    sar = kube.calls[1][2]["spec"]
    assert sar == {"user": "system:serviceaccount:ns:sa", "groups": ["g1"], "uid": "u1", "extra": {"k": ["v"]},
                   "resourceAttributes": {"group": "stead.dev", "version": "v1alpha1", "resource": "configvalues",
                                          "verb": "get", "namespace": "ns"}}
    assert run(auth.authorize(identity, Access("update", "configvalues", "ns"))) is False
    assert run(auth.authenticate("Bearer wrong")) is None
    assert run(auth.authenticate("Basic abc")) is None and run(auth.authenticate("")) is None


def test_reviews_are_cached_for_the_ttl_only() -> None:
    kube = FakeKube()
    clock = Clock()
    auth = TokenReviewAuthenticator(kube, ttl=10, clock=clock)
    for _ in range(3):
        identity = run(auth.authenticate("Bearer valid-token"))
        assert identity is not None and run(auth.authorize(identity, ACCESS))
        assert run(auth.authenticate("Bearer wrong")) is None
    assert len(kube.calls) == 3  # one review each: valid token, SAR, wrong token
    clock.now = 11
    run(auth.authenticate("Bearer valid-token"))
    assert len(kube.calls) == 4


def test_an_unreachable_reviewer_is_unavailable_and_the_token_is_not_logged(caplog: pytest.LogCaptureFixture
                                                                              ) -> None:
    auth = TokenReviewAuthenticator(FakeKube(fail=True))
    with caplog.at_level(logging.DEBUG), pytest.raises(AuthUnavailable) as error:
        run(auth.authenticate("Bearer super-secret-token"))
    assert "super-secret-token" not in caplog.text and "super-secret-token" not in str(error.value)


def basic(user: bytes, password: bytes) -> str:
    return "Basic " + base64.b64encode(user + b":" + password).decode()


def test_basic_against_a_secret_reread_after_the_ttl() -> None:
    kube = FakeKube()
    clock = Clock()
    auth = BasicAuthenticator(secret_loader(kube, "stead", "api-basic"), ttl=5, clock=clock)
    identity = run(auth.authenticate(basic(b"admin", b"pw")))
    assert identity is not None and identity.scheme == "Basic" and identity.user == "admin"
    assert run(auth.authorize(identity, ACCESS))
    assert run(auth.authenticate(basic(b"admin", b"nope"))) is None
    assert run(auth.authenticate(basic(b"admin", b""))) is None
    assert run(auth.authenticate("Basic " + base64.b64encode(b"no-colon").decode())) is None
    assert len([c for c in kube.calls if "/secrets/" in c[1]]) == 1
    kube.secret = None  # deleted: nobody gets in once the cache expires
    clock.now = 6
    assert run(auth.authenticate(basic(b"admin", b"pw"))) is None
    assert not run(auth.authorize(Identity("x", "Bearer"), ACCESS))


def test_concurrent_requests_with_one_token_cost_one_review_each() -> None:
    async def scenario() -> FakeKube:
        kube = FakeKube()
        auth = TokenReviewAuthenticator(kube)
        identities = await asyncio.gather(*(auth.authenticate("Bearer valid-token") for _ in range(50)))
        assert identities[0] is not None and all(i == identities[0] for i in identities)
        assert all(await asyncio.gather(*(auth.authorize(identities[0], ACCESS) for _ in range(50))))
        return kube

    kube = run(scenario())
    assert [path.rsplit("/", 1)[-1] for _, path, _ in kube.calls] == ["tokenreviews", "subjectaccessreviews"]


def test_the_chain_asks_the_authenticator_of_the_headers_scheme() -> None:
    kube = FakeKube()
    chain = ChainAuthenticator(TokenReviewAuthenticator(kube),
                               BasicAuthenticator(secret_loader(kube, "stead", "api-basic")))
    basic_identity = run(chain.authenticate(basic(b"admin", b"pw")))
    assert basic_identity is not None and basic_identity.scheme == "Basic"
    assert not any(path.endswith("/tokenreviews") for _, path, _ in kube.calls)  # Basic never costs a review
    bearer = run(chain.authenticate("bearer valid-token"))  # schemes are case-insensitive
    assert bearer is not None and bearer.scheme == "Bearer" and run(chain.authorize(bearer, ACCESS))
    assert run(chain.authenticate("Digest abc")) is None
