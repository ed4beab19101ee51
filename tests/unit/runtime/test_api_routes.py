"""Routes declared once (`operators.runtime.api.routes`): the matching, the root's list and the OpenAPI paths all
come from one `Route`, so what is matched is what is documented."""

from __future__ import annotations

import re

import pytest

from operators.runtime.api.calls import Call
from operators.runtime.api.routes import Operation, Route, RouteTable
from operators.runtime.serving.http import Response


class Api:
    async def one(self, call: Call) -> Response:
        return Response(200)

    async def run(self, call: Call) -> Response:
        return Response(202)

    async def other(self, call: Call) -> Response:
        return Response(200)


MODEL = {"name": "model", "in": "path", "required": True, "schema": {"type": "string", "enum": ["releases", "plugins"]}}
TABLE = RouteTable((
    Route("/v1/graphs/{name}/", {"GET": Operation(Api.one, "one graph", {"summary": "One."})}),
    Route("/v1/graphs/execute/", {"POST": Operation(Api.run, "run", {"summary": "Run."})}),
    Route("/v1/{model}/{owner}/graph", {"GET": Operation(Api.one, "an owner's graph")}, parameters=[MODEL]),
    Route("/v1/envs/{env}[/{level}/{value}...]/values", {"GET": Operation(Api.one, openapi={"summary": "Values."})},
          does="values at a level"),
), {"Graph": {"type": "object"}})


def route(table: RouteTable, path: str) -> tuple[str, dict[str, str]] | None:
    for pattern, methods in table.bind(Api()):
        match = re.match(pattern + "$", path)
        if match is not None:
            return next(iter(methods.values())).__name__, match.groupdict()
    return None


def test_a_template_says_what_is_matched() -> None:
    assert route(TABLE, "/v1/graphs/g") == ("one", {"name": "g"})  # a trailing slash in the template is optional
    assert route(TABLE, "/v1/graphs/g/") == ("one", {"name": "g"})
    assert route(TABLE, "/v1/graphs/g/x") is None  # a parameter is one segment
    assert route(TABLE, "/v1/plugins/p/graph") == ("one", {"model": "plugins", "owner": "p"})
    assert route(TABLE, "/v1/nodes/p/graph") is None  # a path parameter with an enum takes only its values
    assert route(TABLE, "/v1/envs/e/role/c/values") == ("one", {"env": "e", "tail": "role/c/values"})


def test_a_literal_segment_is_tried_before_a_parameter_declared_first() -> None:
    assert route(TABLE, "/v1/graphs/execute/") == ("run", {})


def test_the_list_and_the_document_come_from_the_same_declaration() -> None:
    assert TABLE.docs() == (("GET", "/v1/graphs/{name}/", "one graph"), ("POST", "/v1/graphs/execute/", "run"),
                            ("GET", "/v1/{model}/{owner}/graph", "an owner's graph"),
                            ("GET", "/v1/envs/{env}[/{level}/{value}...]/values", "values at a level"))
    assert TABLE.openapi_paths() == {
        "/v1/graphs/{name}/": {"get": {"summary": "One."}},
        "/v1/graphs/execute/": {"post": {"summary": "Run."}},
        "/v1/{model}/{owner}/graph": {"parameters": [MODEL]},  # listed, not documented: no operation
        "/v1/envs/{env}/{levels}/values": {"get": {"summary": "Values."}},  # OpenAPI has no repeated segments
    }


def test_two_handlers_for_one_method_of_one_pattern_are_refused() -> None:
    table = RouteTable((Route("/v1/a/{x}", {"GET": Operation(Api.one)}),
                        Route("/v1/a/{x}", {"GET": Operation(Api.other)})))
    with pytest.raises(ValueError, match="two handlers"):
        table.bind(Api())
