"""`stead console`: the web console as a process of its own (the chart's Deployment), and the console the
operator's process serves beside its reconcilers (`--console-port`, which `make run` sets)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from operators.console import ConsoleServer, ConsoleSettings, console_server
from operators.console.oidc import OidcSettings, scopes_of
from operators.runtime.settings import OperatorSettings

DEFAULT_PORT = 8090


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="127.0.0.1", help="the address to serve on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT})")
    parser.add_argument("--kubeconfig", type=Path, help="where the API server is and its CA (only those: the "
                        "console uses its users' tokens, never this file's credentials); default $KUBECONFIG, "
                        "~/.kube/config or in-cluster")
    parser.add_argument("--stead-api", metavar="URL", help="the operator's API server (configuration, graphs, "
                        "run outputs), reached with the users' tokens too")
    parser.add_argument("--stead-api-ca", type=Path, metavar="PATH", help="the CA bundle of --stead-api")
    parser.add_argument("--session-key-file", type=Path, metavar="PATH", help="a Fernet key shared by the "
                        "console's replicas (default: one made at start-up; sessions end on restart)")
    parser.add_argument("--tls-dir", type=Path, metavar="DIR", help="tls.crt and tls.key: serve HTTPS (default: "
                        "plain HTTP, for loopback or behind an Ingress that terminates TLS)")
    parser.add_argument("--session-check-seconds", type=float, default=30.0, metavar="S",
                        help="how often an open stream asks whether its token is still good (default 30)")
    oidc = parser.add_argument_group("OIDC sign-in", "offer \"Sign in with OIDC\" at the issuer the cluster's API "
                                     "server trusts; its id_token is then the user's token")
    oidc.add_argument("--oidc-issuer", metavar="URL", help="the issuer URL (https://), as the API server's "
                      "--authentication-config names it")
    oidc.add_argument("--oidc-client-id", metavar="ID", help="the console's client id at the issuer (the "
                      "audience the API server expects)")
    oidc.add_argument("--oidc-client-secret-file", type=Path, metavar="PATH", help="a file holding the client's "
                      "secret (never given on the command line; none: a public client, PKCE alone)")
    oidc.add_argument("--oidc-ca-file", type=Path, metavar="PATH", help="the CA bundle of the issuer's HTTPS "
                      "(default: the system's)")
    oidc.add_argument("--oidc-scopes", default="openid profile email", metavar="SCOPES",
                      help="the scopes asked for (default 'openid profile email')")
    oidc.add_argument("--oidc-username-claim", default="preferred_username", metavar="CLAIM",
                      help="the claim shown as the user's name (display only: the API server decides who the "
                           "user is; default preferred_username)")
    oidc.add_argument("--oidc-redirect-url", metavar="URL", help="the callback URL registered at the issuer "
                      "(default: this console's address as the browser reaches it, + /console/oidc/callback)")
    parser.set_defaults(func=cmd_console)


def oidc_of(args: argparse.Namespace) -> OidcSettings | None:
    """The OIDC settings of the flags; a clear error naming the flag when they do not go together."""
    given = [flag for flag in ("oidc_client_id", "oidc_client_secret_file", "oidc_ca_file", "oidc_redirect_url")
             if getattr(args, flag, None)]
    if not getattr(args, "oidc_issuer", None):
        if given:
            raise ValueError(f"--{given[0].replace('_', '-')} needs --oidc-issuer")
        return None
    if not args.oidc_client_id:
        raise ValueError("--oidc-issuer needs --oidc-client-id")
    return OidcSettings(issuer=args.oidc_issuer, client_id=args.oidc_client_id,
                        client_secret_file=args.oidc_client_secret_file, ca_file=args.oidc_ca_file,
                        scopes=scopes_of(args.oidc_scopes), username_claim=args.oidc_username_claim,
                        redirect_url=args.oidc_redirect_url)


def settings_of(args: argparse.Namespace) -> ConsoleSettings:
    return ConsoleSettings(listen=args.listen, port=args.port, kubeconfig=args.kubeconfig, stead_api=args.stead_api,
                           stead_api_ca=args.stead_api_ca, session_key_file=args.session_key_file,
                           tls_dir=args.tls_dir, session_check_seconds=args.session_check_seconds,
                           oidc=oidc_of(args))


def cmd_console(args: argparse.Namespace) -> int:
    from operators.catalog import KINDS

    try:
        server = console_server(settings_of(args), KINDS)
    except (OSError, ValueError) as error:
        print(f"stead console: {error}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(server))
    except KeyboardInterrupt:
        return 130
    except OSError as error:
        print(f"stead console: {error}", file=sys.stderr)
        return 1
    return 0


async def serve(server: ConsoleServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    print(f"stead console: http{'s' if server.settings.tls_dir else ''}://{server.settings.listen}:{server.port}"
          "/console/", flush=True)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await server.stop()


def operator_console(settings: OperatorSettings, home: Path, kubeconfig: Path | None) -> list[ConsoleServer]:
    """The console the operator's process serves (`--console-port`): it reaches that process's own API server,
    trusting the CA the API server wrote or was given."""
    from operators.catalog import KINDS

    if not settings.console.port:
        return []
    api = settings.config_api
    stead_api = stead_ca = None
    if api.port:
        host = "127.0.0.1" if api.listen in ("0.0.0.0", "::", "") else api.listen
        stead_api = f"https://{host}:{api.port}"
        stead_ca = (api.cert_dir or home / "config-api") / "ca.crt"
    return [console_server(ConsoleSettings(listen=settings.console.listen, port=settings.console.port,
                                           kubeconfig=kubeconfig, stead_api=stead_api, stead_api_ca=stead_ca), KINDS)]
