"""Authenticators: TokenReview + SubjectAccessReview, Basic against a Secret, caching, no leaks."""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import pytest

from operators.runtime.api.auth import (
    Access,
    AuthUnavailable,
    BasicAuthenticator,
    ChainAuthenticator,
    Identity,
    TokenReviewAuthenticator,
    secret_loader,
)
from operators.runtime.kube.client import ApiError, core_path
from tests.unit.fakeapi import FakeApi, Request

ACCESS = Access("get", "configvalues", "ns")
API_BASIC = core_path("secrets", "stead", "api-basic")
SYSTEM_BASIC = core_path("secrets", "stead-system", "basic")


def token_review(request: Request) -> dict[str, Any]:
    """A TokenReview's answer: "valid-token" is a ServiceAccount's, any other token nobody's."""
    ok = request.body["spec"]["token"] == "valid-token"
    user = {"username": "system:serviceaccount:ns:sa", "uid": "u1", "groups": ["g1"], "extra": {"k": ["v"]}}
    return {**request.body, "status": {"authenticated": ok, "user": user if ok else {}}}


def access_review(request: Request) -> dict[str, Any]:
    """A SubjectAccessReview's answer: anyone may get, nobody may do anything else."""
    return {**request.body, "status": {"allowed": request.body["spec"]["resourceAttributes"]["verb"] == "get"}}


def api(fail: bool = False) -> FakeApi:
    """The API server with both reviews and the Secrets of Basic credentials admin:pw (every request
    refused with 403 when `fail`)."""
    kube = FakeApi()
    kube.answer("/tokenreviews", token_review)
    kube.answer("/subjectaccessreviews", access_review)
    for path in (API_BASIC, SYSTEM_BASIC):
        kube.add(path, {"data": {"username": base64.b64encode(b"admin").decode(),
                                 "password": base64.b64encode(b"pw").decode()}})
    if fail:
        kube.fail_with(ApiError(403, "tokenreviews is forbidden"))
    return kube


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_token_review_then_subject_access_review_with_the_users_attributes() -> None:
    kube = api()
    auth = TokenReviewAuthenticator(kube, audiences=["stead"])
    identity = run(auth.authenticate("Bearer valid-token"))
    assert identity == Identity(user="system:serviceaccount:ns:sa", scheme="Bearer", uid="u1", groups=("g1",),
                                extra=(("k", ("v",)),))
    assert kube.received[0][2]["spec"] == {"token": "valid-token", "audiences": ["stead"]}
    assert run(auth.authorize(identity, ACCESS)) is True
    sar = kube.received[1][2]["spec"]
    assert sar == {"user": "system:serviceaccount:ns:sa", "groups": ["g1"], "uid": "u1", "extra": {"k": ["v"]},
                   "resourceAttributes": {"group": "stead.dev", "version": "v1alpha1", "resource": "configvalues",
                                          "verb": "get", "namespace": "ns"}}
    assert run(auth.authorize(identity, Access("update", "configvalues", "ns"))) is False
    assert run(auth.authenticate("Bearer wrong")) is None
    assert run(auth.authenticate("Basic abc")) is None and run(auth.authenticate("")) is None


def test_reviews_are_cached_for_the_ttl_only() -> None:
    kube = api()
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
    auth = TokenReviewAuthenticator(api(fail=True))
    with caplog.at_level(logging.DEBUG), pytest.raises(AuthUnavailable) as error:
        run(auth.authenticate("Bearer super-secret-token"))
    assert "super-secret-token" not in caplog.text and "super-secret-token" not in str(error.value)


def basic(user: bytes, password: bytes) -> str:
    return "Basic " + base64.b64encode(user + b":" + password).decode()


def test_basic_against_a_secret_reread_after_the_ttl() -> None:
    kube = api()
    clock = Clock()
    auth = BasicAuthenticator(secret_loader(kube, "stead", "api-basic"), ttl=5, clock=clock)
    identity = run(auth.authenticate(basic(b"admin", b"pw")))
    assert identity is not None and identity.scheme == "Basic" and identity.user == "admin"
    assert run(auth.authorize(identity, ACCESS))
    assert run(auth.authenticate(basic(b"admin", b"nope"))) is None
    assert run(auth.authenticate(basic(b"admin", b""))) is None
    assert run(auth.authenticate("Basic " + base64.b64encode(b"no-colon").decode())) is None
    assert len([c for c in kube.calls if "/secrets/" in c[1]]) == 1
    del kube.objects[API_BASIC]  # deleted: nobody gets in once the cache expires
    clock.now = 6
    assert run(auth.authenticate(basic(b"admin", b"pw"))) is None
    assert not run(auth.authorize(Identity("x", "Bearer"), ACCESS))


def test_concurrent_requests_with_one_token_cost_one_review_each() -> None:
    async def scenario() -> FakeApi:
        kube = api()
        auth = TokenReviewAuthenticator(kube)
        identities = await asyncio.gather(*(auth.authenticate("Bearer valid-token") for _ in range(50)))
        assert identities[0] is not None and all(i == identities[0] for i in identities)
        assert all(await asyncio.gather(*(auth.authorize(identities[0], ACCESS) for _ in range(50))))
        return kube

    kube = run(scenario())
    assert [path.rsplit("/", 1)[-1] for _, path, _ in kube.received] == ["tokenreviews", "subjectaccessreviews"]


def test_the_chain_asks_the_authenticator_of_the_headers_scheme() -> None:
    kube = api()
    chain = ChainAuthenticator(TokenReviewAuthenticator(kube),
                               BasicAuthenticator(secret_loader(kube, "stead", "api-basic")))
    basic_identity = run(chain.authenticate(basic(b"admin", b"pw")))
    assert basic_identity is not None and basic_identity.scheme == "Basic"
    assert not any(path.endswith("/tokenreviews") for _, path, _ in kube.received)  # Basic never costs a review
    bearer = run(chain.authenticate("bearer valid-token"))  # schemes are case-insensitive
    assert bearer is not None and bearer.scheme == "Bearer" and run(chain.authorize(bearer, ACCESS))
    assert run(chain.authenticate("Digest abc")) is None


# --- bounds: junk tokens, namespaces of Basic, object names --------------------------------------


def test_a_flood_of_junk_tokens_costs_a_bounded_number_of_reviews_and_keeps_good_entries() -> None:
    from operators.runtime.api.auth import PeerBudget, TooManyAttempts

    kube, clock = api(), Clock()
    auth = TokenReviewAuthenticator(kube, clock=clock, budget=PeerBudget(rate=5, burst=20, clock=clock))

    def reviews() -> int:
        return kube.count(path_suffix="/tokenreviews")

    async def scenario() -> tuple[int, int]:
        good = await auth.authenticate("Bearer valid-token", "10.0.0.9")
        assert good is not None and reviews() == 1
        refused = limited = 0
        for i in range(10_001):  # one client, 10,001 different junk tokens, as fast as it can
            try:
                refused += await auth.authenticate(f"Bearer junk-{i}", "10.0.0.66") is None
            except TooManyAttempts:
                limited += 1
        return refused, limited

    refused, limited = run(scenario())
    assert reviews() <= 1 + 20 and refused + limited == 10_001 and limited >= 10_001 - 20
    # The good token is still cached (no new review) and its owner is not limited.
    calls = reviews()
    assert run(auth.authenticate("Bearer valid-token", "10.0.0.9")) is not None
    assert reviews() == calls
    # The same junk token again within the ttl is refused from memory.
    clock.now += 1
    assert run(auth.authenticate("Bearer junk-0", "10.0.0.66")) is None and reviews() == calls
    # Budgets refill: a second later the peer may have a few reviews again.
    clock.now += 1
    assert run(auth.authenticate("Bearer another-junk", "10.0.0.66")) is None and reviews() == calls + 1


def test_the_negative_cache_is_bounded() -> None:
    from operators.runtime.api.auth import PeerBudget

    kube, clock = api(), Clock()
    unlimited = PeerBudget(rate=1e9, burst=1e9, clock=clock, total_rate=1e9, total_burst=1e9)
    auth = TokenReviewAuthenticator(kube, clock=clock, budget=unlimited,
                                    max_rejected=100)
    for i in range(1000):
        assert run(auth.authenticate(f"Bearer junk-{i}", f"10.0.{i // 250}.{i % 250}")) is None
    assert len(auth._rejected) == 100


def test_subject_access_reviews_carry_the_object_name() -> None:
    kube = api()
    auth = TokenReviewAuthenticator(kube)
    identity = run(auth.authenticate("Bearer valid-token"))
    assert identity is not None
    run(auth.authorize(identity, Access("get", "environments", "ns", "env-1")))
    run(auth.authorize(identity, Access("list", "environments", "ns")))
    attributes = [body["spec"]["resourceAttributes"] for _, path, body in kube.received
                  if path.endswith("/subjectaccessreviews")]
    assert attributes[0]["name"] == "env-1" and "name" not in attributes[1]


def test_basic_credentials_can_be_limited_to_namespaces() -> None:
    kube = api()
    assert SYSTEM_BASIC in kube.objects
    kube.objects[SYSTEM_BASIC]["data"]["namespaces"] = base64.b64encode(b"team-a, team-b").decode()
    auth = BasicAuthenticator(secret_loader(kube, "stead-system", "basic"))
    identity = run(auth.authenticate("Basic " + base64.b64encode(b"admin:pw").decode()))
    assert identity is not None
    assert run(auth.authorize(identity, Access("get", "configvalues", "team-a")))
    assert run(auth.authorize(identity, Access("update", "configvalues", "team-b")))
    assert not run(auth.authorize(identity, Access("get", "configvalues", "team-c")))
    del kube.objects[SYSTEM_BASIC]["data"]["namespaces"]  # no list: every namespace (as before)
    unlimited = BasicAuthenticator(secret_loader(kube, "stead-system", "basic"))
    assert run(unlimited.authorize(identity, Access("get", "configvalues", "team-c")))


def test_certificate_users_are_authorized_by_subject_access_review_with_their_groups() -> None:
    from operators.runtime.api.auth import CertificateAuthenticator, certificate_identity

    kube = api()
    tokens = TokenReviewAuthenticator(kube)
    chain = ChainAuthenticator(tokens, CertificateAuthenticator(tokens))
    alice = certificate_identity("alice", ("dev", "system:authenticated"))
    assert run(chain.authorize(alice, ACCESS)) is True
    assert kube.received[-1][2]["spec"] == {
        "user": "alice", "groups": ["dev", "system:authenticated"],
        "resourceAttributes": {"group": "stead.dev", "version": "v1alpha1", "resource": "configvalues",
                               "verb": "get", "namespace": "ns"}}
    assert run(chain.authorize(alice, Access("update", "configvalues", "ns"))) is False  # RBAC says no
    # no header makes a certificate identity, and a token identity is not authorized as a certificate's
    assert run(chain.authenticate("x509 alice")) is None
    assert run(CertificateAuthenticator(tokens).authorize(Identity("alice", "Bearer"), ACCESS)) is False
    assert not any(path.endswith("/tokenreviews") for _, path, _ in kube.received)  # nothing to review


def test_junk_tokens_from_many_loopback_addresses_cost_at_most_the_shared_budget_of_reviews() -> None:
    """An attacker with many addresses (here 127.0.0.2-61, each a connection of its own) gets a budget
    per address; the shared bucket caps the TokenReviews all of them together cost."""
    import socket

    from operators.config.api import ConfigApi
    from operators.runtime.api.auth import PeerBudget
    from operators.runtime.serving.http import HttpServer
    from tests.unit.config.test_config_api import make_repo

    kube, clock = api(), Clock()  # a frozen clock: no bucket refills during the attack
    budget = PeerBudget(rate=5, burst=20, clock=clock, total_rate=100, total_burst=50)
    authenticator = TokenReviewAuthenticator(kube, clock=clock, budget=budget)

    def attack(port: int) -> list[int]:
        statuses = []
        for address in range(2, 62):  # 60 addresses x 25 junk tokens, one keep-alive connection each
            with socket.create_connection(("127.0.0.1", port), timeout=10,
                                          source_address=(f"127.0.0.{address}", 0)) as sock:
                stream = sock.makefile("rb")
                for i in range(25):
                    sock.sendall(f"GET /api/v1/config/environments HTTP/1.1\r\nHost: t\r\n"
                                 f"Authorization: Bearer junk-{address}-{i}\r\n\r\n".encode())
                    status = int(stream.readline().split()[1])
                    length = 0
                    while (line := stream.readline()) not in (b"\r\n", b""):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    stream.read(length)
                    statuses.append(status)
        return statuses

    async def main() -> list[int]:
        config = ConfigApi(make_repo(), authenticator)
        server = HttpServer(config, errors=config.problem)
        await server.start("127.0.0.1", 0)
        try:
            return await asyncio.to_thread(attack, server.port)
        finally:
            await server.stop()

    statuses = asyncio.run(main())
    assert set(statuses) <= {401, 429} and len(statuses) == 60 * 25
    assert kube.count(path_suffix="/tokenreviews") <= 50  # 60 x 20 = 1200 with a budget per address only
    assert statuses.count(401) <= 50
