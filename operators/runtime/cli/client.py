"""The client half of the API server, shared by the commands that talk to it (`stead config`, `stead graph
logs`, `stead graph history`): where the server is (`api_arguments`), whom to authenticate as (`credentials`:
a token, Basic, or the kubeconfig user's token or client certificate), TLS, and one request (`call`) whose
errors say, in the user's terms, what went wrong.

Start-up is kept short: the standard library's light modules at the top; ssl and urllib.request where they
are needed, and the kubeconfig read without the Kubernetes client library (`operators.runtime.kube.kubeconfig`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import urllib.parse
from base64 import b64encode
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators import stead_home
from operators.runtime.kube.kubeconfig import KubeconfigError, current_user, kubeconfig_paths, load_cert_chain
from operators.runtime.settings import ConfigApiSettings

if TYPE_CHECKING:
    import ssl

DEFAULT_SERVER = f"https://{ConfigApiSettings.listen}:{ConfigApiSettings.port}"
"""Where `stead operator` serves its API by default (`--config-api-listen`, `--config-api-port`)."""


class UsageError(Exception):
    """A command line the argument rules refuse."""


class RequestFailed(Exception):
    """The API answered with an error (status 0: it could not be reached); `message` is its
    explanation, `not_found` what a 404 says is missing."""

    def __init__(self, status: int, message: str, not_found: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.not_found = not_found



def api_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the operator's API is and how to reach it (what `call` reads): for `stead config` and the other
    commands that talk to the API rather than to the Kubernetes API server (`stead graph logs`)."""
    parser.add_argument("--server", "--url", dest="server", default=default_server(),
                        help=f"the API's base URL (default $STEAD_CONFIG_URL, else {DEFAULT_SERVER})")
    parser.add_argument("--cacert", default=os.environ.get("STEAD_CONFIG_CACERT"),
                        help="CA certificate of the API (default $STEAD_CONFIG_CACERT, else the system's CAs and "
                        "$STEAD_HOME/config-api/ca.crt, which `stead operator` writes)")
    parser.add_argument("--insecure", action="store_true", help="do not verify the API's certificate")
    parser.add_argument("--kubeconfig", type=Path,
                        help="kubeconfig whose user's credentials to use (default $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--token", help="bearer token (default $STEAD_CONFIG_TOKEN, else the kubeconfig's)")
    parser.add_argument("--user", help="HTTP Basic user; the password comes from $STEAD_CONFIG_PASSWORD or a prompt")


def default_server() -> str:
    """$STEAD_CONFIG_URL, else $STEAD_CONFIG_SERVER (its earlier name), else the local default."""
    return os.environ.get("STEAD_CONFIG_URL") or os.environ.get("STEAD_CONFIG_SERVER") or DEFAULT_SERVER


@dataclass
class Credentials:
    """What the CLI authenticates with: an `Authorization` header, or a client certificate and its
    key (files, or the PEM itself). `source` says where they came from, for messages; never the secret."""

    source: str
    authorization: str | None = None
    certificate: Path | bytes | None = None
    key: Path | bytes | None = None


@dataclass
class Connection:
    """Everything the requests of one command share: read once."""

    namespace: str
    credentials: Credentials
    context: ssl.SSLContext | None = field(default=None, repr=False)


def kubeconfig_user(args: argparse.Namespace) -> tuple[Any, str]:
    """The kubeconfig's current user (None when there is none), and what was looked at, for messages."""
    paths = kubeconfig_paths(args.kubeconfig)
    looked = ", ".join(str(p) for p in paths)
    try:
        user = current_user(paths)
        if user is None and args.kubeconfig is None and not os.environ.get("KUBECONFIG"):
            local = stead_home() / "kubeconfig"  # the local control plane's (`stead cluster kubeconfig`)
            looked += f", {local}"
            user = current_user([local])
    except KubeconfigError as error:
        return None, f"the kubeconfig ({error})"
    if user is None:
        return None, f"a kubeconfig (none at {looked})"
    return user, user.describe()


def credentials(args: argparse.Namespace, user: Any = None, looked: str = "a kubeconfig (not read)") -> Credentials:
    """The first credentials there are, in this order: --token, $STEAD_CONFIG_TOKEN, --user (Basic),
    the kubeconfig user's token, token file, client certificate; `UsageError` naming what was tried."""
    if args.token:
        return Credentials("--token", f"Bearer {args.token}")
    token = os.environ.get("STEAD_CONFIG_TOKEN", "").strip()
    if token:
        return Credentials("$STEAD_CONFIG_TOKEN", f"Bearer {token}")
    if args.user:
        password = os.environ.get("STEAD_CONFIG_PASSWORD")
        if password is None:
            import getpass

            password = getpass.getpass(f"password for {args.user}: ")
        return Credentials(f"--user {args.user}", "Basic " + b64encode(f"{args.user}:{password}".encode()).decode())
    tried = ["--token (not given)", "$STEAD_CONFIG_TOKEN (not set)", "--user (not given)"]
    if user is None:
        tried.append(looked)
    else:
        if user.token:
            return Credentials(f"the token of {looked}", f"Bearer {user.token}")
        if user.token_file is not None:
            try:
                from_file = user.token_file.read_text().strip()
            except OSError as error:
                tried.append(f"the token file of {looked} ({user.token_file}: {error.strerror})")
            else:
                if from_file:
                    return Credentials(f"the token file of {looked}", f"Bearer {from_file}")
                tried.append(f"the token file of {looked} ({user.token_file} is empty)")
        if user.client_certificate is not None and user.client_key is not None:
            return Credentials(f"the client certificate of {looked}", certificate=user.client_certificate,
                               key=user.client_key)
        if user.client_certificate is not None:
            tried.append(f"the client certificate of {looked} (no client-key beside it)")
        elif user.plugin is not None:
            tried.append(f"{looked}, whose credentials come from an {user.plugin} plugin, which stead config "
                         "does not run")
        elif user.token_file is None:
            tried.append(f"{looked} (no token, token file or client certificate)")
    raise UsageError("no credentials: tried " + "; ".join(tried) + '. Pass --token (e.g. --token "$(kubectl '
                     'create token NAME)"), set $STEAD_CONFIG_TOKEN, or use a kubeconfig with a token or a client '
                     "certificate")


def connect(args: argparse.Namespace) -> Connection:
    """The namespace, credentials and TLS settings of this command (made on its first request)."""
    made = getattr(args, "_connection", None)
    if isinstance(made, Connection):
        return made
    user, looked = None, "a kubeconfig (not read)"
    needs_user = not (args.namespace and (args.token or os.environ.get("STEAD_CONFIG_TOKEN", "").strip()
                                          or args.user))
    if needs_user:
        user, looked = kubeconfig_user(args)
    namespace = str(args.namespace or (user.namespace if user is not None else None) or "default")
    found = credentials(args, user, looked)
    connection = Connection(namespace, found)
    if str(args.server).startswith("https:"):
        connection.context = _ssl_context(args, found)
    args._connection = connection
    return connection


def _ssl_context(args: argparse.Namespace, found: Credentials) -> ssl.SSLContext:
    """Trust --cacert alone, or else the system's CAs and the one `stead operator` writes; present the
    client certificate, if that is what the credentials are."""
    import ssl

    if args.cacert:
        context = ssl.create_default_context(cafile=args.cacert)
    else:
        context = ssl.create_default_context()
        local = stead_home() / "config-api" / "ca.crt"
        if local.is_file():
            with contextlib.suppress(OSError):  # a stale or partial file: the system's CAs still apply
                context.load_verify_locations(cafile=str(local))
    if args.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if found.certificate is not None and found.key is not None:
        _load_client_certificate(context, found)
    return context


def _load_client_certificate(context: ssl.SSLContext, found: Credentials) -> None:
    """Load the certificate and key into `context` (`load_cert_chain`: PEM given inline passes through a private
    directory, removed at once), or say which credentials could not be loaded."""
    import ssl

    assert found.certificate is not None and found.key is not None
    try:
        load_cert_chain(context, found.certificate, found.key)
    except (OSError, ssl.SSLError) as error:
        raise UsageError(f"the client certificate of {found.source.removeprefix('the client certificate of ')} "
                         f"cannot be loaded: {getattr(error, 'strerror', None) or error}") from None


def _check_transport(url: str) -> None:
    import ipaddress

    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "https":
        return
    host = parsed.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parsed.scheme != "http" or not loopback:
        raise UsageError(f"refusing to send credentials to {parsed.scheme}://{host}: use https")


NO_BODY = object()


def call(args: argparse.Namespace, method: str, url: str, query: dict[str, str] | None = None,
         body: Any = NO_BODY, expect_body: bool = True, answer: dict[str, str] | None = None) -> Any:
    """One API request; errors become `RequestFailed` with the server's message. `answer`, when
    given, receives the response's headers (names in lower case)."""
    import urllib.error
    import urllib.request

    _check_transport(url)
    connection = connect(args)
    params = {"namespace": connection.namespace, **(query or {})}
    full = url + "?" + "&".join(f"{k}={urllib.parse.quote(v, safe='')}" if v else k for k, v in params.items())
    data = None if body is NO_BODY else json.dumps(body).encode()  # JSON null is a body too
    headers = {"Accept": "application/json", **({"Content-Type": "application/json"} if data is not None else {})}
    if connection.credentials.authorization is not None:
        headers["Authorization"] = connection.credentials.authorization
    request = urllib.request.Request(full, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, context=connection.context, timeout=30) as response:
            text = response.read().decode()
            if answer is not None:
                answer.update((name.lower(), value) for name, value in response.headers.items())
    except urllib.error.HTTPError as error:
        raw = error.read().decode(errors="replace")
        try:
            problem = json.loads(raw)
            message, missing = str(problem.get("message") or raw), problem.get("notFound")
        except (ValueError, AttributeError):
            message, missing = raw[:300] or error.reason, None
        if error.code == 401 and connection.credentials.certificate is not None and "certificate" not in message:
            message += (f" (sent {connection.credentials.source}: the API takes client certificates when "
                        "`stead operator --config-api-client-ca` is auto or a CA bundle, and signed by that CA)")
        raise RequestFailed(error.code, message, missing) from None
    except urllib.error.URLError as error:
        raise RequestFailed(0, _unreachable(args, connection, error.reason)) from None
    except OSError as error:  # TLS 1.3: a refused client certificate shows when the answer is read
        raise RequestFailed(0, _unreachable(args, connection, error)) from None
    if not expect_body or not text:
        return None
    return json.loads(text)


def _unreachable(args: argparse.Namespace, connection: Connection, reason: Any) -> str:
    """Why a request got no answer, in the user's terms."""
    text = str(getattr(reason, "reason", None) or reason)
    if "CERTIFICATE_VERIFY_FAILED" in str(reason):
        return (f"cannot verify the certificate of {args.server}: {getattr(reason, 'verify_message', text)}; "
                "pass --cacert (`stead operator` writes its CA to $STEAD_HOME/config-api/ca.crt) or set "
                "$STEAD_CONFIG_CACERT")
    if "ALERT" in text.upper() and connection.credentials.certificate is not None:
        alert = text.split("ALERT_", 1)[-1].split("]")[0].replace("_", " ").lower() if "ALERT_" in text else text
        return (f"{args.server} refused {connection.credentials.source} (TLS alert: {alert}): the API trusts "
                "another CA for client certificates; pass --token instead")
    return f"cannot reach {args.server}: {text}"


