"""`ApiHost`: the handler of the API server (`operators.runtime.serving.http.HttpServer`) for every
extension's routes: authentication first, then routing, errors as JSON, and what the API says about
itself, its root's list of routes (`GET /api/v1`) and its OpenAPI 3.0 document
(`GET /api/v1/config/openapi.json`, where the configuration API, the first, put it).

Authentication comes first, for every route: without valid credentials the answer is 401 with the same
body whatever the path, so an anonymous client learns nothing (not even whether a route exists). A verified
client certificate (`Request.certificate`) is the identity when there is one; a refused one is 401 with the
reason. An authenticated caller lacking RBAC permission gets 403 (from the handlers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from typing import Any

from operators.runtime.api.auth import Authenticator, AuthUnavailable, Identity, TooManyAttempts, certificate_identity
from operators.runtime.api.calls import UNAUTHORIZED_HEADERS, ApiProblem, Call, json_response, not_found
from operators.runtime.api.extension import ApiExtension
from operators.runtime.api.routes import Handler, Operation, Route, RouteDoc, RouteTable, bind
from operators.runtime.serving.http import Request, Response

ROOT = "/api/v1"
DOCUMENT = "/api/v1/config/openapi.json"


def _ok(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {}}}}


BASE_DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Stead configuration store (ConfigDB)", "version": "v1",
             "description": "Hierarchical configuration values of Stead environments. Data lives in ConfigValues "
                            "objects; every change is a version. Paths under /environments/{env} accept any number "
                            "of <level>/<value> segments, and resource names may contain '/'."},
    "security": [{"bearer": []}, {"basic": []}],
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "A Kubernetes token (TokenReview + RBAC). "
                       "A client certificate of the cluster's client CA (TLS; user = Subject CN, groups = Subject O, "
                       "then RBAC) works as well where the server asks for one (`stead operator "
                       "--config-api-client-ca`)."},
            "basic": {"type": "http", "scheme": "basic", "description": "Credentials from the configured Secret."},
        },
        "schemas": {},
    },
    "paths": {},
}
"""The document without paths and schemas, which the routes give (its title is still the first API's, the
configuration store's, as clients have read it)."""

NOTES = {"head": "HEAD is answered wherever GET is, without the body",
         "namespace": "every route takes ?namespace=NS (default: the server's)",
         "authentication": "a Kubernetes bearer token, a client certificate of the cluster's client CA, "
                           "or HTTP Basic when the server has credentials for it"}


def route_list(routes: Iterable[RouteDoc]) -> bytes:
    """The root's answer: JSON with one route per line, for a person reading `curl` output too."""
    lines = ",\n".join(json.dumps({"method": m, "path": p, "does": d}, ensure_ascii=False) for m, p, d in routes)
    return (f'{{"routes": [\n{lines}\n],\n"notes": {json.dumps(NOTES, ensure_ascii=False)}}}\n').encode()


def openapi_document(tables: Sequence[RouteTable]) -> dict[str, Any]:
    """The OpenAPI document of the routes of `tables`."""
    document = {**BASE_DOCUMENT, "components": {**BASE_DOCUMENT["components"], "schemas": {}}, "paths": {}}
    for table in tables:
        document["paths"].update(table.openapi_paths())
        document["components"]["schemas"].update(table.schemas)
    return document


class ApiHost:
    """Authentication, routing and errors for `extensions`, and the routes of the API itself."""

    def __init__(self, authenticator: Authenticator, default_namespace: str = "default",
                 extensions: Sequence[ApiExtension] = ()) -> None:
        self.authenticator = authenticator
        self.default_namespace = default_namespace
        self.served = tuple(extensions)
        self._table = self._routes()
        self._index = route_list(self.route_docs())
        self._openapi = openapi_document([HOST_ROUTES, *(e.declared() for e in self.served)])

    def route_docs(self) -> tuple[RouteDoc, ...]:
        """Every route, as the root lists them."""
        return (*HOST_ROUTES.docs(), *(doc for extension in self.served for doc in extension.declared().docs()))

    def _routes(self) -> list[tuple[re.Pattern[str], dict[str, Handler]]]:
        """The matching table of every route (HEAD added wherever GET is)."""
        table = bind([*((route, self) for route in HOST_ROUTES.routes),
                      *((route, extension) for extension in self.served for route in extension.declared().routes)])
        return [(re.compile(pattern + "$"), {**methods, **({"HEAD": methods["GET"]} if "GET" in methods else {})})
                for pattern, methods in table]

    def _route(self, request: Request) -> tuple[Handler, dict[str, str]]:
        for pattern, methods in self._table:
            match = pattern.match(request.path)
            if match is not None:
                handler = methods.get(request.method)
                if handler is None:
                    raise ApiProblem(405, "MethodNotAllowed", f"{request.method} is not allowed on {request.path}")
                return handler, match.groupdict()
        not_found("route", f"no such route: {request.method} {request.path}")

    async def _identify(self, request: Request) -> Identity | Response:
        """Who sends the request, or the answer refusing it (401, 429, 503).

        A client certificate comes first, as in Kubernetes: a verified one is the identity (any
        `Authorization` header is then not looked at), a refused one (expired, say) is 401 with the
        reason whatever else the request carries."""
        certificate = request.certificate
        if certificate is not None:
            if certificate.problem:
                return ApiProblem(401, "Unauthorized", f"client certificate refused: {certificate.problem}"
                                  ).response(UNAUTHORIZED_HEADERS)
            return certificate_identity(certificate.user, certificate.groups)
        try:
            identity = await self.authenticator.authenticate(request.headers.get("authorization", ""), request.peer)
        except AuthUnavailable:
            return ApiProblem(503, "ServiceUnavailable", "credentials cannot be checked now; retry").response()
        except TooManyAttempts as error:
            return ApiProblem(429, "TooManyRequests", str(error)).response({"Retry-After": "1"})
        if identity is None:
            return ApiProblem(401, "Unauthorized", "valid credentials are required").response(UNAUTHORIZED_HEADERS)
        return identity

    async def gate(self, request: Request) -> Response | None:
        """The HTTP server's gate (`HttpServer.gate`): a request with a body is authenticated on its head,
        before the body is read. The handler authenticates it again, from the review cache."""
        found = await self._identify(request)
        return found if isinstance(found, Response) else None

    async def __call__(self, request: Request) -> Response:
        """Authenticate every request before routing can tell anything, then map errors to JSON."""
        found = await self._identify(request)
        if isinstance(found, Response):
            return found
        try:
            handler, params = self._route(request)
            return await handler(Call(request, params, found))
        except ApiProblem as problem:
            return problem.response()
        except AuthUnavailable:
            return ApiProblem(503, "ServiceUnavailable", "permissions cannot be checked now; retry").response()
        except Exception as error:
            for extension in self.served:
                answer = extension.problem_of(error)
                if answer is not None:
                    return answer.response()
            raise

    @staticmethod
    def problem(status: int, message: str) -> Response:
        """The answer to a request the HTTP server refuses itself (malformed, too large, too slow):
        the API's error body."""
        error = "InternalError" if status == 500 else HTTPStatus(status).phrase.replace(" ", "").replace("-", "")
        return ApiProblem(status, error, message).response()

    async def openapi(self, call: Call) -> Response:
        return json_response(self._openapi)

    async def index(self, call: Call) -> Response:
        """The routes, one per line (any authenticated caller: it is what the documentation says)."""
        return Response(200, self._index)


HOST_ROUTES = RouteTable((
    Route(ROOT, {"GET": Operation(ApiHost.index, "this list (also at / and /api/v1/config)", {
        "summary": "The routes, one per line (also at / and /api/v1/config).",
        "responses": {"200": _ok("{routes: [{method, path, does}], notes}")}})},
          also=("/", ROOT + "/", DOCUMENT.removesuffix("/openapi.json"), DOCUMENT.removesuffix("openapi.json"))),
    Route(DOCUMENT, {"GET": Operation(ApiHost.openapi, "the OpenAPI 3.0 document of the API", {
        "summary": "This document.", "responses": {"200": _ok("OpenAPI 3.0.")}})}),
))
"""The API's own routes: what it says about itself."""
