"""A real OpenID Provider on loopback for the console's OIDC tests: zitadel/oidc's example OP (v3.52.0, from
the Go module proxy), its login page, storage and provider unchanged, behind a 30-line main of ours (oidc_op/,
a module of its own) that only serves it over HTTPS at an issuer URL we choose (the example's own main serves
plain HTTP at http://localhost:PORT/, which no kube-apiserver accepts as an issuer). Built and cached like
the control plane's binaries (`operators.cluster.build.GoComponent` from a local module, as tools/kstatus).

Also `http_sign_in`: the browser's part of the flow done with urllib (follow the redirects, fill the issuer's
login form), for the fixture's wait until the API server has loaded the issuer and for the refusals that need
no page.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.cluster.build import GoComponent, ensure_component
from operators.runtime.serving.certs import make_ca, make_leaf
from tests.e2e.conftest import free_port, stop_process
from tests.polling import wait_until

ZITADEL_OP = GoComponent(
    name="zitadel-oidc-op", module="github.com/zitadel/oidc/v3", version="v3.52.0",
    outputs=(("stead.dev/tests/oidc-op", "oidc-op"),), source=Path(__file__).parent / "oidc_op",
)


@dataclass(frozen=True)
class Client:
    id: str
    secret: str
    redirect_uri: str


@dataclass
class IssuerProcess:
    url: str
    ca_file: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        stop_process(self.process, grace=10)


def start_issuer(work: Path, clients: Sequence[Client], users: Mapping[str, str]) -> IssuerProcess:
    """The OP at https://127.0.0.1:PORT, its certificate by a CA of its own (in `work`/ca.crt), knowing `users`
    (name: password; a user's `sub` is its name) and `clients`."""
    binary = ensure_component(ZITADEL_OP) / "oidc-op"
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    ca = make_ca("stead-test-oidc-ca")
    leaf = make_leaf(ca, "127.0.0.1", hosts=["127.0.0.1"])
    (work / "ca.crt").write_bytes(ca.cert_pem)
    (work / "tls.crt").write_bytes(leaf.cert_pem)
    (work / "tls.key").write_bytes(leaf.key_pem)
    (work / "users.json").write_text(json.dumps({
        name: {"ID": name, "Username": name, "Password": password, "Email": f"{name}@example.test",
               "EmailVerified": True, "PreferredLanguage": "en"} for name, password in users.items()}))
    env = {**os.environ, "OIDC_ISSUER": url, "OIDC_LISTEN": f"127.0.0.1:{port}",
           "OIDC_TLS_CERT": str(work / "tls.crt"), "OIDC_TLS_KEY": str(work / "tls.key"),
           "OIDC_USERS_FILE": str(work / "users.json"),
           "OIDC_CLIENTS": "\n".join(f"{c.id} {c.secret} {c.redirect_uri}" for c in clients)}
    log_path = work / "op.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen([str(binary)], env=env, stdout=log, stderr=subprocess.STDOUT)
    issuer = IssuerProcess(url, work / "ca.crt", process, log_path)
    context = ssl.create_default_context(cafile=str(issuer.ca_file))

    def serving() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the OIDC issuer exited {process.returncode}:\n{log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/.well-known/openid-configuration", context=context, timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    wait_until(serving, 30, "the OIDC issuer's discovery document")
    return issuer


class _Stay(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def http_sign_in(console_port: int, issuer: IssuerProcess, user: str, password: str,
                 tamper: Callable[[str], str] = lambda url: url) -> tuple[int, dict[str, Any]]:
    """A browser's OIDC sign-in at the console, without a browser: the console's /console/api/session answer
    at the end (200 and the session, or 401 and the sign-in page's `problem`). `tamper` may change the issuer's
    redirect back to the console before it is followed."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(jar),
        urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(issuer.ca_file))), _Stay())

    def get(url: str, data: bytes | None = None) -> tuple[int, str, str]:
        try:
            with opener.open(url, data=data, timeout=30) as resp:
                return resp.status, resp.headers.get("Location", ""), resp.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Location", ""), error.read().decode()

    console = f"http://127.0.0.1:{console_port}"
    url = f"{console}/console/oidc/login"
    status, location, body = get(url)
    while status in (302, 303) and not url.startswith(f"{issuer.url}/login/"):
        url = urllib.parse.urljoin(url, location)
        status, location, body = get(url)
    found = re.search(r'name="id" value="([^"]+)"', body)
    if found is not None:  # the issuer's login form (not shown when the console sent the browser back at once)
        form = urllib.parse.urlencode({"id": found.group(1), "username": user, "password": password}).encode()
        status, location, body = get(f"{issuer.url}/login/username", form)
        while status in (302, 303):
            url = urllib.parse.urljoin(url, location)
            if url.startswith(console):
                url = tamper(url)
                get(url)  # the console's callback: a session cookie, or a problem for the sign-in page
                break
            status, location, body = get(url)
    status, _, body = get(f"{console}/console/api/session")
    return status, json.loads(body)

