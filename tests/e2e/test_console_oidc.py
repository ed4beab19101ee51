"""Signing in to the console with OIDC, end to end: a real OpenID Provider on loopback (zitadel/oidc's example
OP, tests/e2e/oidc.py), the test run's kube-apiserver told to trust it (`LocalControlPlane.set_jwt_issuers`,
its AuthenticationConfiguration, reloaded without a restart), and Chromium filling the issuer's own login page.
The id_token is then the user's token: RBAC bound to `oidc:<user>` decides what the page shows."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from operators.cluster import ClusterInfo, JwtIssuer, LocalControlPlane
from tests.e2e.conftest import Kubectl, OperatorProcess, env_manifest, free_port
from tests.e2e.console import ConsoleProcess
from tests.e2e.oidc import Client, IssuerProcess, http_sign_in, start_issuer
from tests.e2e.tenant_accounts import STEAD_KINDS_ROLE
from tests.polling import wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.e2e

CLIENT_ID = "stead-console"
OTHER_CLIENT = "other-app"
"""A client of the same issuer whose id_tokens the API server is not told to accept (another audience)."""
USERS = {"alice": "alice-pw-1", "bob": "bob-pw-2"}
PORTS = {CLIENT_ID: free_port(), OTHER_CLIENT: free_port()}


def callback(client: str) -> str:
    return f"http://127.0.0.1:{PORTS[client]}/console/oidc/callback"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IssuerProcess]:
    work = tmp_path_factory.mktemp("oidc-issuer")
    process = start_issuer(work, [Client(CLIENT_ID, "console-secret", callback(CLIENT_ID)),
                                  Client(OTHER_CLIENT, "other-secret", callback(OTHER_CLIENT))], USERS)
    try:
        yield process
    finally:
        process.stop()


def oidc_console(client: str, secret: str, cluster: ClusterInfo, operator: OperatorProcess, issuer: IssuerProcess,
                 work: Path) -> ConsoleProcess:
    (work / "client-secret").write_text(secret)
    console = ConsoleProcess(cluster, operator, work / "console.log", port=PORTS[client], extra_args=(
        "--oidc-issuer", issuer.url, "--oidc-client-id", client, "--oidc-client-secret-file",
        str(work / "client-secret"), "--oidc-ca-file", str(issuer.ca_file)))
    console.start()
    return console


@pytest.fixture(scope="module")
def trusted_issuer(control_plane: LocalControlPlane, issuer: IssuerProcess) -> Iterator[IssuerProcess]:
    """The API server accepts the issuer's id_tokens for CLIENT_ID, as `oidc:<sub>`; and no longer after."""
    control_plane.set_jwt_issuers([JwtIssuer(issuer.url, (CLIENT_ID,), issuer.ca_file.read_text())])
    try:
        yield issuer
    finally:
        control_plane.set_jwt_issuers([])


@pytest.fixture(scope="module")
def console(cluster: ClusterInfo, operator: OperatorProcess, trusted_issuer: IssuerProcess,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    console = oidc_console(CLIENT_ID, "console-secret", cluster, operator, trusted_issuer,
                           tmp_path_factory.mktemp("oidc-console"))
    try:
        # the API server reloads its AuthenticationConfiguration and fetches the issuer's keys in its own time
        wait_until(lambda: http_sign_in(console.port, trusted_issuer, "bob", USERS["bob"])[0] == 200, 120,
                   "the API server to accept the issuer's id_tokens")
        yield console
    finally:
        console.stop()


def bind(kubectl: Kubectl, namespace: str, user: str) -> None:
    """`user` may edit the namespace and Stead's kinds in it (what the chart aggregates into `edit`)."""
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": STEAD_KINDS_ROLE, "namespace": namespace},
        "rules": [{"apiGroups": ["stead.dev"], "resources": ["*"], "verbs": ["*"]}]}))
    kubectl("create", "rolebinding", "oidc-stead", "-n", namespace, f"--role={STEAD_KINDS_ROLE}", f"--user={user}")
    kubectl("create", "rolebinding", "oidc-edit", "-n", namespace, "--clusterrole=edit", f"--user={user}")


def browser_sign_in(browser: Browser, console: ConsoleProcess, user: str) -> Page:
    """Sign in as a user does: the console's "Sign in with OIDC", the issuer's login page, back signed in.
    The browser is told to accept the issuer's test certificate (the console checks it: --oidc-ca-file)."""
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(console.url)
    page.get_by_test_id("signin-oidc").click()
    page.locator("#username").fill(user)
    page.locator("#password").fill(USERS[user])
    page.get_by_role("button", name="Login").click()
    page.get_by_test_id("user").wait_for()
    return page


def test_an_oidc_user_signs_in_at_the_issuer_and_sees_what_rbac_binds_to_them(
        browser: Browser, console: ConsoleProcess, kubectl: Kubectl, namespace: str) -> None:
    bind(kubectl, namespace, "oidc:alice")
    kubectl("apply", "-f", "-", input=env_manifest("oidc-lab", namespace))
    page = browser_sign_in(browser, console, "alice")
    try:
        assert "oidc:alice" in page.get_by_test_id("user").inner_text()  # the API server's name for the user
        page.goto(console.url + f"#/ns/{namespace}")
        page.get_by_test_id("row-environments-oidc-lab").wait_for()
        cookie = next(c for c in page.context.cookies() if c["name"] == "stead-console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert page.evaluate("document.cookie") == ""  # the id_token stays out of the page's reach
    finally:
        page.context.close()


def test_an_oidc_user_without_a_binding_sees_nothing(browser: Browser, console: ConsoleProcess, kubectl: Kubectl,
                                                     namespace: str) -> None:
    kubectl("apply", "-f", "-", input=env_manifest("hidden-lab", namespace))
    page = browser_sign_in(browser, console, "bob")
    try:
        assert "oidc:bob" in page.get_by_test_id("user").inner_text()
        page.goto(console.url + f"#/ns/{namespace}")
        page.get_by_test_id("empty").wait_for()
        assert "hidden-lab" not in page.content()
        page.goto(console.url + f"#/ns/{namespace}/environments/hidden-lab")
        page.get_by_test_id("problem").wait_for()
        assert "403" in page.get_by_test_id("problem").inner_text()
    finally:
        page.context.close()


def test_a_tampered_state_a_forged_id_token_and_another_audience_are_refused_with_a_message(
        browser: Browser, console: ConsoleProcess, trusted_issuer: IssuerProcess, cluster: ClusterInfo,
        operator: OperatorProcess, tmp_path: Path) -> None:
    # the issuer's answer with another state than this browser's sign-in: back on the sign-in page, told why
    context = browser.new_context(ignore_https_errors=True)
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{console.port}/console/oidc/login")
        page.locator("#username").wait_for()  # at the issuer, the sign-in's state in the console's cookie
        page.goto(f"http://127.0.0.1:{console.port}/console/oidc/callback?code=stolen&state=forged")
        page.get_by_test_id("signin").wait_for()
        assert "state mismatch" in page.get_by_test_id("signin-problem").inner_text()
        assert page.get_by_test_id("signin-oidc").is_visible()
    finally:
        context.close()
    # the same through a real sign-in whose redirect back is altered
    status, answer = http_sign_in(console.port, trusted_issuer, "alice", USERS["alice"],
                                  tamper=lambda url: url.replace("state=", "state=x"))
    assert status == 401 and "state mismatch" in answer["problem"]

    # an id_token of the issuer's claims signed by anyone else: the API server refuses it as a pasted token
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode({"iss": trusted_issuer.url, "aud": CLIENT_ID, "sub": "alice", "iat": int(time.time()),
                         "exp": int(time.time()) + 300}, forger, algorithm="RS256", headers={"kid": "id1"})
    request = urllib.request.Request(f"http://127.0.0.1:{console.port}/console/api/session", method="POST",
                                     data=json.dumps({"token": forged}).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401 and "did not accept" in refused.value.read().decode()

    # a console that is another client of the issuer: its users' id_tokens are for an audience the API server
    # was not told of, and the sign-in ends on the sign-in page saying so
    other = oidc_console(OTHER_CLIENT, "other-secret", cluster, operator, trusted_issuer, tmp_path)
    try:
        status, answer = http_sign_in(other.port, trusted_issuer, "alice", USERS["alice"])
        assert status == 401 and "does not accept this issuer's id_token" in answer["problem"]
        assert OTHER_CLIENT in answer["problem"]
        log = (tmp_path / "console.log").read_text()
        assert "other-secret" not in log and "eyJ" not in log  # no secret, no token in what it logged
    finally:
        other.stop()
