"""The console's HTTP server (aiohttp.web): its page and assets, sign-in, the views' routes and the stream.

aiohttp because the console streams (Server-Sent Events, `operators.console.stream`) and serves files, both
of which aiohttp does as a maintained library, and because it is already the operator's HTTP client; the
operator's JSON APIs stay on granian (`operators.runtime.serving.http`), which streams nothing.

Every response carries a strict Content-Security-Policy (scripts, styles and connections from the console
itself only; no inline script or style, no eval, no framing), and the page renders every value as text
(`static/js/dom.js`), so a task's output or an attribute value never becomes markup, let alone script.
Everything under `/console/api/` needs a session (`operators.console.session`) or a bearer token; writes made
with the session's cookie also need its CSRF token and an `Origin` of the console itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from operators.console.clients import Upstreams, bearer, upstreams
from operators.console.oidc import (
    CALLBACK_PATH,
    LOGIN_PATH,
    PROBLEM_COOKIE,
    STATE_COOKIE,
    STATE_LIFETIME,
    Issuer,
    OidcError,
    PendingSealer,
    check_callback,
    display_name,
    new_pending,
)
from operators.console.session import COOKIE, CSRF_HEADER, MAX_TOKEN, Sealer, Session
from operators.console.settings import ConsoleSettings
from operators.console.stream import parse_topics, serve_stream
from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute, TopicSource
from operators.runtime import ApiError, ClusterAccess, Requester

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "worker-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
MAX_SIGN_INS = 4
"""Sign-ins reviewed at once (each costs the API server a SelfSubjectReview); more wait, and past
`MAX_SIGN_INS_WAITING` they are refused (429) rather than queued without bound."""
MAX_SIGN_INS_WAITING = 64


async def who(kube: Requester) -> str:
    """Whose token `kube` carries (a SelfSubjectReview; any authenticated user may make one)."""
    answer = await kube.request("POST", REVIEW_PATH, {"apiVersion": "authentication.k8s.io/v1",
                                                      "kind": "SelfSubjectReview"})
    return str(((answer.get("status") or {}).get("userInfo") or {}).get("username") or "")


def error_json(status: int, message: str) -> web.Response:
    return web.json_response({"status": status, "message": message}, status=status,
                             headers={"Cache-Control": "no-store"})


def redirect(location: str) -> web.Response:
    """A 302 that carries the cookies set on it (aiohttp's HTTPFound is meant to be raised, not returned)."""
    return web.Response(status=302, headers={"Location": location, "Cache-Control": "no-store"})


def page(static: Path) -> bytes:
    """index.html with a stylesheet link for every file of static/css (each view brings its own)."""
    links = "\n".join(f'  <link rel="stylesheet" href="/console/static/css/{css.name}">'
                      for css in sorted((static / "css").glob("*.css")))
    return (static / "index.html").read_text().replace("  <!-- styles -->", links).encode()


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter("stead_console_requests", "Requests answered, by route and status.",
                                ["route", "status"], registry=self.registry)
        self.streams = Gauge("stead_console_streams_open", "Streams open now.", registry=self.registry)
        self.stream_ends = Counter("stead_console_stream_ends", "Streams ended, by why.", ["reason"],
                                   registry=self.registry)


class ConsoleServer:
    """The console: `start` serves it until `stop` (an addon of the operator process, or `stead console`)."""

    name = "console"

    def __init__(self, settings: ConsoleSettings, routes: Sequence[ConsoleRoute],
                 topics: Mapping[str, TopicSource], kube: ClusterAccess | None = None) -> None:
        self.settings = settings
        self.routes = routes
        self.topics = topics
        self.kube_access = kube
        self.sealer = Sealer.from_file(settings.session_key_file)
        self.pending = PendingSealer(self.sealer.key)
        if settings.oidc is not None:
            settings.oidc.client_secret()  # a missing or empty secret file stops the start, not a sign-in
        self.issuer: Issuer | None = None
        self.metrics = Metrics()
        self.page = page(STATIC)
        self.streams: dict[str, int] = {}
        self.sign_ins_waiting = 0
        self._sign_ins: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self.upstreams: Upstreams | None = None
        self.port = settings.port

    # --- lifecycle ---------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body)
        app.on_response_prepare.append(self._secure)
        router = app.router
        router.add_get("/", self._to_console)
        router.add_get("/console", self._to_console)
        router.add_get("/console/", self._index)
        router.add_get("/console/healthz", self._healthz)
        router.add_get("/console/metrics", self._metrics)
        router.add_static("/console/static/", STATIC, follow_symlinks=False, show_index=False)
        router.add_post("/console/api/session", self._sign_in)
        router.add_get("/console/api/session", self._session)
        router.add_delete("/console/api/session", self._sign_out)
        router.add_get("/console/api/stream", self._stream)
        router.add_get(LOGIN_PATH, self._oidc_login)
        router.add_get(CALLBACK_PATH, self._oidc_callback)
        for route in self.routes:
            router.add_route(route.method, route.path, self._endpoint(route))
        return app

    async def start(self, services: object = None) -> None:
        import asyncio

        self._sign_ins = asyncio.Semaphore(MAX_SIGN_INS)
        self._stack = contextlib.AsyncExitStack()
        self.upstreams = await self._stack.enter_async_context(upstreams(self.settings, self.kube_access))
        if self.settings.oidc is not None:
            http = await self._stack.enter_async_context(aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=Issuer.ssl_context(self.settings.oidc)),
                timeout=aiohttp.ClientTimeout(total=15), headers={"User-Agent": "stead-console"}))
            self.issuer = Issuer(self.settings.oidc, http)
        runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        context = None
        if self.settings.tls_dir is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.settings.tls_dir / "tls.crt", self.settings.tls_dir / "tls.key")
        site = web.TCPSite(runner, self.settings.listen, self.settings.port, ssl_context=context,
                           shutdown_timeout=2.0)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])
        log.info("console on %s://%s:%d/console/", "https" if context else "http", self.settings.listen, self.port)

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None

    # --- what every answer carries ---------------------------------------------------------------------------

    async def _secure(self, request: web.Request, response: web.StreamResponse) -> None:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.path.startswith("/console/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        route = request.match_info.route.resource
        self.metrics.requests.labels(route.canonical if route is not None else "other",
                                     str(response.status)).inc()

    # --- pages ----------------------------------------------------------------------------------------------

    async def _to_console(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/console/")

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=self.page, content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    async def _healthz(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain")

    # --- sessions ---------------------------------------------------------------------------------------------

    def _https(self, request: web.Request) -> bool:
        """Whether the browser reached the console over HTTPS: served with TLS here, or through an Ingress that
        ended TLS and says so (`X-Forwarded-Proto`; a client that lies about it only makes its own cookie
        stricter)."""
        return (self.settings.tls_dir is not None or request.secure
                or request.headers.get("X-Forwarded-Proto", "").lower() == "https")

    def _cookie(self, request: web.Request, response: web.StreamResponse, value: str, max_age: float,
                name: str = COOKIE, samesite: str = "Strict") -> None:
        """The session cookie (or another sealed one of the console's); `Secure` over HTTPS."""
        response.set_cookie(name, value, max_age=max(int(max_age), 0), path="/console", httponly=True,
                            samesite=samesite, secure=self._https(request))

    def _signed_out(self, message: str) -> web.Response:
        response = error_json(401, message)
        response.del_cookie(COOKIE, path="/console")
        return response

    def session_of(self, request: web.Request) -> Session:
        token = bearer(list(request.headers.items()))
        if token is not None:  # a script's own token: no cookie, so nothing for another site to ride on
            return Session(token, "", "", float("inf"))
        value = request.cookies.get(COOKIE)
        session = self.sealer.open(value) if value else None
        if session is None:
            raise ConsoleError(401, "not signed in (or the session expired): sign in with a Kubernetes token")
        return session

    def check_write(self, request: web.Request, session: Session) -> None:
        """A write comes from the console's own pages (or from a script, which a browser's headers would not
        claim); made with the cookie, it also carries the session's CSRF token.

        A bearer token needs no CSRF token when a script sends it, but an auth proxy in front of the console
        (oauth2-proxy) may add it to every request of the browser, where it is as ambient as a cookie: so the
        browser's own word on where a request comes from (`Origin`, `Sec-Fetch-Site`) is checked for both."""
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc != request.host:
            raise ConsoleError(403, f"Origin {origin[:100]!r} is not this console's")
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise ConsoleError(403, f"Sec-Fetch-Site {site[:40]!r}: writes come from the console's own pages")
        if session.nonce and not self.sealer.csrf_ok(session, request.headers.get(CSRF_HEADER)):
            raise ConsoleError(403, f"missing or wrong {CSRF_HEADER} header (reload the page)")

    def _about(self, session: Session) -> dict[str, Any]:
        return {"user": session.user, "namespace": session.namespace, "csrf": self.sealer.csrf(session),
                "expires": session.expires, "steadApi": self.settings.stead_api is not None, "name": session.name}

    async def _sign_in(self, request: web.Request) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > MAX_TOKEN + 1024:
            return error_json(413, f"a sign-in body is at most {MAX_TOKEN + 1024} bytes")
        try:
            given = await request.json()
        except ValueError:
            return error_json(400, "body: expected JSON {\"token\": \"...\"}")
        token = given.get("token") if isinstance(given, dict) else None
        if not isinstance(token, str) or not token.strip() or len(token) > MAX_TOKEN or not token.isascii():
            return error_json(400, f"token: a Kubernetes bearer token (ASCII, at most {MAX_TOKEN} characters)")
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc != request.host:
            return error_json(403, "sign-in from another origin")
        if self.sign_ins_waiting >= MAX_SIGN_INS_WAITING:
            return error_json(429, "too many sign-ins at once: retry")
        assert self.upstreams is not None
        kube, _ = self.upstreams.as_user(token.strip())
        self.sign_ins_waiting += 1
        try:
            async with self._sign_ins:
                user = await who(kube)
        except ApiError as error:
            if error.status in (401, 403):
                return self._signed_out("the API server did not accept this token")
            return error_json(502, f"the API server answered {error.status}: {error.message}")
        except OSError as error:
            return error_json(503, f"the API server is unreachable: {error}")
        finally:
            self.sign_ins_waiting -= 1
        value, session = self.sealer.seal(token.strip(), user)
        log.info("console: %s signed in", user)
        response = web.json_response(self._about(session))
        self._cookie(request, response, value, session.expires - time.time())
        return response

    async def _session(self, request: web.Request) -> web.StreamResponse:
        """The session; signed out, what the sign-in page offers (OIDC when configured) and why the last OIDC
        sign-in failed, once."""
        try:
            return web.json_response(self._about(self.session_of(request)))
        except ConsoleError as error:
            message = error.message
        response = self._signed_out(message)
        problem = self.pending.open_problem(request.cookies.get(PROBLEM_COOKIE))
        if self.settings.oidc is not None or problem is not None:
            body = {"status": 401, "message": message, "oidc": self.settings.oidc is not None,
                    "problem": problem}
            response.body = json.dumps(body).encode()
        if PROBLEM_COOKIE in request.cookies:
            response.del_cookie(PROBLEM_COOKIE, path="/console")
        return response

    # --- OIDC ------------------------------------------------------------------------------------------------

    def _redirect_uri(self, request: web.Request) -> str:
        assert self.settings.oidc is not None
        if self.settings.oidc.redirect_url:
            return self.settings.oidc.redirect_url
        return f"{'https' if self._https(request) else 'http'}://{request.host}{CALLBACK_PATH}"

    def _oidc_failed(self, request: web.Request, message: str) -> web.StreamResponse:
        """Back to the sign-in page, which shows `message` (sealed in a cookie: no message of anyone else's
        making can be put there through a link)."""
        log.info("console: an OIDC sign-in failed: %s", message)
        response = redirect("/console/#/signin")
        self._cookie(request, response, self.pending.seal_problem(message), STATE_LIFETIME, name=PROBLEM_COOKIE)
        response.del_cookie(STATE_COOKIE, path="/console")
        return response

    async def _oidc_login(self, request: web.Request) -> web.StreamResponse:
        if self.issuer is None:
            return error_json(404, "this console has no OIDC issuer configured (--oidc-issuer)")
        pending = new_pending(self._redirect_uri(request))
        try:
            target = await self.issuer.authorization_url(pending)
        except OidcError as error:
            return self._oidc_failed(request, error.message)
        response = redirect(target)
        # Lax: the issuer's redirect back is a navigation from its site, which a Strict cookie would not follow
        self._cookie(request, response, self.pending.seal(pending), STATE_LIFETIME, name=STATE_COOKIE,
                     samesite="Lax")
        return response

    async def _oidc_callback(self, request: web.Request) -> web.StreamResponse:
        if self.issuer is None:
            return error_json(404, "this console has no OIDC issuer configured (--oidc-issuer)")
        issuer = self.issuer
        pending = self.pending.open(request.cookies.get(STATE_COOKIE))
        try:
            code = check_callback(request.query, pending)
            assert pending is not None
            id_token = await issuer.exchange(code, pending)
            claims = await issuer.verify(id_token, pending.nonce)
        except OidcError as error:
            return self._oidc_failed(request, error.message)
        if self.upstreams is None:
            return error_json(503, "the console is starting")
        kube, _ = self.upstreams.as_user(id_token)
        try:
            async with self._sign_ins:
                user = await who(kube)
        except ApiError as error:
            if error.status in (401, 403):
                return self._oidc_failed(
                    request, f"the API server does not accept this issuer's id_token: its --authentication-config "
                             f"needs a JWT authenticator for issuer {issuer.settings.issuer} with audience "
                             f"{issuer.settings.client_id}")
            return self._oidc_failed(request, f"the API server answered {error.status}: {error.message}")
        except OSError as error:
            return self._oidc_failed(request, f"the API server is unreachable: {error}")
        value, session = self.sealer.seal(id_token, user, name=display_name(claims, issuer.settings.username_claim))
        log.info("console: %s signed in with OIDC", user)
        response = redirect("/console/")
        self._cookie(request, response, value, session.expires - time.time())
        response.del_cookie(STATE_COOKIE, path="/console")
        return response

    async def _sign_out(self, request: web.Request) -> web.StreamResponse:
        try:
            self.check_write(request, self.session_of(request))
        except ConsoleError as error:
            if error.status != 401:
                return error_json(error.status, error.message)
        return self._signed_out("signed out")

    # --- the views' routes ---------------------------------------------------------------------------------

    def call_of(self, request: web.Request, session: Session, body: Any = None) -> ConsoleCall:
        assert self.upstreams is not None
        kube, stead = self.upstreams.as_user(session.token)
        return ConsoleCall(kube, stead, session.user, dict(request.match_info), dict(request.query), body)

    def _endpoint(self, route: ConsoleRoute) -> Any:
        async def endpoint(request: web.Request) -> web.StreamResponse:
            try:
                session = self.session_of(request)
                if request.method not in SAFE_METHODS:
                    self.check_write(request, session)
                body = None
                if request.body_exists:
                    try:
                        body = await request.json()
                    except ValueError:
                        raise ConsoleError(400, "body: not JSON") from None
                data = await route.handler(self.call_of(request, session, body))
            except ConsoleError as error:
                return self._signed_out(error.message) if error.status == 401 else error_json(error.status,
                                                                                              error.message)
            except ApiError as error:
                if error.status == 401:
                    return self._signed_out("the API server no longer accepts this session's token: sign in again")
                return error_json(error.status if 400 <= error.status < 500 else 502, error.message)
            except OSError as error:  # the API server unreachable (ApiUnreachable)
                return error_json(503, str(error))
            return web.json_response(data, dumps=lambda value: json.dumps(value, separators=(",", ":")))
        return endpoint

    # --- the stream --------------------------------------------------------------------------------------

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        try:
            session = self.session_of(request)
            topics = parse_topics(request.query.get("topics"), self.topics, self.settings.max_topics)
        except ConsoleError as error:
            return self._signed_out(error.message) if error.status == 401 else error_json(error.status,
                                                                                          error.message)
        key = session.nonce or session.token[-16:]
        if self.streams.get(key, 0) >= self.settings.max_streams_per_session:
            return error_json(429, f"this session already holds {self.settings.max_streams_per_session} streams "
                                   "(one per browser is enough: close some tabs)")
        call = self.call_of(request, session)
        if session.nonce:  # a cookie's session: is its token still good?
            try:
                await who(call.kube)
            except ApiError as error:
                if error.status == 401:
                    return self._signed_out("the API server no longer accepts this session's token: sign in again")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        self.streams[key] = self.streams.get(key, 0) + 1
        self.metrics.streams.inc()
        reason = "closed"

        async def still_good() -> bool:
            try:
                await who(call.kube)
            except ApiError as error:
                return error.status != 401
            except OSError:
                return True  # the API server away is no reason to sign the user out
            return True

        try:
            reason = await serve_stream(call, topics, self.topics, response.write, still_good,
                                        self.settings.session_check_seconds, session.expires - time.time())
        except (ConnectionResetError, ConnectionError):
            reason = "closed"
        finally:
            self.streams[key] -= 1
            if not self.streams[key]:
                del self.streams[key]
            self.metrics.streams.dec()
            self.metrics.stream_ends.labels(reason).inc()
        return response
