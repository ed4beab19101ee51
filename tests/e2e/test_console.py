"""The console in a real browser, as users that are ServiceAccounts: sign-in, the namespace's objects (a page
opened before its object exists follows it), what a
user without rights sees, many tabs on one stream, a token revoked under an open stream, and the attacks on
the console itself (CSRF, CSP, a forged session)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Kubectl, env_manifest
from tests.e2e.console import ConsoleProcess, OpenConsole, console_user, screenshot
from tests.polling import wait_until

pytestmark = pytest.mark.e2e


def request(console: ConsoleProcess, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{console.port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def test_sign_in_lists_the_namespaces_objects_and_follows_an_object_live(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, namespace: str,
        tmp_path: Path) -> None:
    token = console_user(kubectl, namespace)
    page = console_page(token)
    assert namespace in page.get_by_test_id("user").inner_text()
    # a page opened on a name before its object exists (a form has just sent it, or the operator is about to
    # make it) says so, and follows the name until it is created
    page.goto(console.url + f"#/ns/{namespace}/environments/lab")
    problem = page.get_by_test_id("problem")
    wait_until(lambda: problem.count() and "waiting for environments/lab to be created" in problem.inner_text(),
               30, "the page saying it waits for the object")
    kubectl("apply", "-f", "-", input=env_manifest("lab", namespace))
    page.get_by_test_id("object-name").wait_for()
    assert page.get_by_test_id("object-name").inner_text() == "lab"
    assert problem.count() == 0

    page.goto(console.url + f"#/ns/{namespace}")
    page.get_by_test_id("row-environments-lab").wait_for()
    page.get_by_role("link", name="lab").click()
    page.get_by_test_id("object-name").wait_for()
    assert page.get_by_test_id("object-name").inner_text() == "lab"
    page.get_by_test_id("condition-Ready").wait_for()
    screenshot(page, "object", tmp_path)
    # a change made elsewhere shows without a reload: the label lands in the YAML through the stream
    kubectl("label", "environment", "lab", "-n", namespace, "console-test=seen")
    wait_until(lambda: "console-test: seen" in page.get_by_test_id("yaml").text_content(), 30,
               "the label in the page's YAML")


def test_a_user_without_rights_sees_nothing(console: ConsoleProcess, console_page: OpenConsole,
                                            kubectl: Kubectl, namespace: str) -> None:
    kubectl("apply", "-f", "-", input=env_manifest("secret-lab", namespace))
    kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    token = kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()
    page = console_page(token, f"#/ns/{namespace}")
    page.get_by_test_id("empty").wait_for()
    assert "secret-lab" not in page.content()
    assert "Environment" in page.get_by_test_id("refused").inner_text()
    page.goto(console.url + f"#/ns/{namespace}/environments/secret-lab")
    page.get_by_test_id("problem").wait_for()
    assert "403" in page.get_by_test_id("problem").inner_text()
    assert "release" not in page.content()  # nothing of the object's spec


def test_seven_tabs_share_one_stream(console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl,
                                     namespace: str, browser: Any) -> None:
    token = console_user(kubectl, namespace)
    kubectl("apply", "-f", "-", input=env_manifest("tabs", namespace))
    first = console_page(token, f"#/ns/{namespace}/environments/tabs")
    first.get_by_test_id("object-name").wait_for()
    pages = [first]
    for _ in range(6):
        page = first.context.new_page()
        page.goto(console.url + f"#/ns/{namespace}/environments/tabs")
        page.get_by_test_id("object-name").wait_for()
        pages.append(page)
    kubectl("label", "environment", "tabs", "-n", namespace, "tabs=seven")
    for page in pages:
        wait_until(lambda page=page: "tabs: seven" in page.get_by_test_id("yaml").text_content(), 30,
                   "every tab sees the change")
    assert console.metric("stead_console_streams_open") <= 2  # one stream (two while one reopens)


def test_a_hidden_tab_lets_its_stream_go_and_a_restarted_console_is_caught_up_with(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, namespace: str) -> None:
    token = console_user(kubectl, namespace)
    kubectl("apply", "-f", "-", input=env_manifest("resume", namespace))
    page = console_page(token, f"#/ns/{namespace}/environments/resume")
    page.get_by_test_id("object-name").wait_for()
    wait_until(lambda: console.metric("stead_console_streams_open") == 1, 30, "the page's stream open")
    visibility = ("(state) => { Object.defineProperty(document, 'visibilityState', {value: state, configurable: true});"
                  " document.dispatchEvent(new Event('visibilitychange')); }")
    page.evaluate(visibility, "hidden")
    wait_until(lambda: console.metric("stead_console_streams_open") == 0, 30, "the hidden tab's stream closed")
    page.evaluate(visibility, "visible")
    wait_until(lambda: console.metric("stead_console_streams_open") == 1, 30, "the stream open again")
    # the console goes away under the open stream; what changes meanwhile shows once it is back (same session
    # key: the page stays signed in; the stream reconnects with backoff and resumes from its resourceVersion)
    console.stop()
    kubectl("label", "environment", "resume", "-n", namespace, "while=away")
    console.start()
    wait_until(lambda: "while: away" in page.get_by_test_id("yaml").text_content(), 60,
               "the change made while the console was down")


def test_a_revoked_token_ends_the_stream_without_a_reconnect_flood(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, namespace: str) -> None:
    token = console_user(kubectl, namespace, account="short-lived")
    kubectl("apply", "-f", "-", input=env_manifest("expiry", namespace))
    page = console_page(token, f"#/ns/{namespace}/environments/expiry")
    page.get_by_test_id("object-name").wait_for()
    wait_until(lambda: console.metric("stead_console_streams_open") >= 1, 30, "the page's stream open")
    # the token stops being good while the stream is open: deleting its ServiceAccount revokes it at once
    kubectl("delete", "serviceaccount", "short-lived", "-n", namespace)
    page.get_by_test_id("signin").wait_for(timeout=30_000)
    assert "Signed out" in page.get_by_test_id("signin-problem").inner_text()
    before = console.metric("stead_console_requests", route="/console/api/stream")
    page.wait_for_timeout(5_000)  # a window in which a reconnect loop would show: it must stay quiet
    after = console.metric("stead_console_requests", route="/console/api/stream")
    assert after - before == 0


def test_the_console_refuses_cross_site_writes_forged_sessions_and_inline_script(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, namespace: str) -> None:
    token = console_user(kubectl, namespace)
    # every answer carries the policy: scripts from the console only, no inline script, no framing
    status, headers, body = request(console, "GET", "/console/")
    assert status == 200
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert "<script>" not in body and not re.search(r"<script(?![^>]*\bsrc=)", body)
    # a forged or altered cookie opens no session
    status, _, _ = request(console, "GET", "/console/api/kinds", headers={"Cookie": "stead-console=gAAAAforged"})
    assert status == 401
    # a signed-in page's cookie without the CSRF token, or from another origin, changes nothing
    page = console_page(token)
    cookie = next(c for c in page.context.cookies() if c["name"] == "stead-console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    jar = {"Cookie": f"stead-console={cookie['value']}"}
    status, _, body = request(console, "DELETE", "/console/api/session", headers=jar)
    assert status == 403 and "CSRF" in body
    status, _, body = request(console, "DELETE", "/console/api/session",
                              headers={**jar, "Origin": "https://evil.example"})
    assert status == 403 and "Origin" in body
    # a bearer token an auth proxy would add to every request of the browser is no licence for another site
    status, _, body = request(console, "DELETE", "/console/api/session",
                              headers={"Authorization": f"Bearer {token}", "Sec-Fetch-Site": "cross-site"})
    assert status == 403 and "Sec-Fetch-Site" in body
    # reached over HTTPS through an Ingress that says so, the cookie is Secure; over plain HTTP it cannot be
    _, headers, _ = request(console, "POST", "/console/api/session", {"token": token},
                            headers={"X-Forwarded-Proto": "https"})
    assert "Secure" in headers["Set-Cookie"] and "HttpOnly" in headers["Set-Cookie"]
    _, headers, _ = request(console, "POST", "/console/api/session", {"token": token})
    assert "Secure" not in headers["Set-Cookie"]
    # the page's own script cannot read the token
    assert page.evaluate("document.cookie") == ""


def test_a_misbehaving_client_is_held_to_the_consoles_bounds(console: ConsoleProcess, kubectl: Kubectl,
                                                              namespace: str) -> None:
    import http.client

    token = console_user(kubectl, namespace, account="greedy")
    bearer = {"Authorization": f"Bearer {token}"}
    topics = json.dumps([{"id": "a", "kind": "list", "plural": "environments", "namespace": namespace}])
    held: list[http.client.HTTPConnection] = []
    try:
        statuses = []
        for _ in range(9):  # a session holds at most 8 streams: the ninth is refused, the others stay open
            connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
            connection.request("GET", f"/console/api/stream?topics={urllib.parse.quote(topics)}", headers=bearer)
            answer = connection.getresponse()
            statuses.append(answer.status)
            held.append(connection)
        assert statuses == [200] * 8 + [429]
    finally:
        for connection in held:
            connection.close()
    many = json.dumps([{"id": f"t{i}", "kind": "list", "plural": "environments", "namespace": namespace}
                       for i in range(33)])
    status, _, body = request(console, "GET", f"/console/api/stream?topics={urllib.parse.quote(many)}", headers=bearer)
    assert status == 400 and "at most 32" in body
    alien = json.dumps([{"id": "s", "kind": "list", "plural": "secrets", "namespace": namespace}])
    status, _, body = request(console, "GET", f"/console/api/stream?topics={urllib.parse.quote(alien)}", headers=bearer)
    assert status == 200 and "event: error" in body and "plural" in body  # Stead's kinds only, never a Secret
    assert body.rstrip().endswith('"reason":"every topic of this stream has ended"}')  # and then it closes
    status, _, body = request(console, "POST", "/console/api/session", {"token": "x" * 20_000})
    assert status in (400, 413)
    status, _, _ = request(console, "POST", f"/console/api/forms/preview/{namespace}", {"pad": "x" * (2 << 20)},
                           headers=bearer)
    assert status == 413  # a body over 1 MiB is refused, not read
    for path in (f"/console/api/objects/{namespace}/environments/..", "/console/api/objects/..%2Fkube-system",
                 f"/console/api/objects/{namespace}/secrets/x"):
        status, _, body = request(console, "GET", path, headers=bearer)
        assert status in (400, 404), (path, status, body)
        assert "kube-system" not in body or status == 400


def test_users_following_lists_leave_room_for_the_next_users_sign_in(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, namespace: str) -> None:
    """A list page follows every kind (a WATCH each, held upstream for as long as it is open): three of them
    once took every connection of the console's client of the API server, and a fourth user's sign-in waited."""
    token = console_user(kubectl, namespace)
    before = console.metric("stead_console_streams_open")
    for _ in range(3):
        page = console_page(token, f"#/ns/{namespace}")
        page.get_by_test_id("empty").wait_for()
    wait_until(lambda: console.metric("stead_console_streams_open") >= before + 3, 30, "three list pages' streams")
    fourth = console_page(token)  # signs in: waits for the user's name on the page (30 s at most)
    assert namespace in fourth.get_by_test_id("user").inner_text()
