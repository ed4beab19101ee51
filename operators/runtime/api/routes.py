"""Routes declared once: a `Route` is a path template with its operations (method, handler, the line
the API's root lists, the OpenAPI operation), and the matching (a regular expression), the root's list of
routes and the OpenAPI paths are all derived from it, so that they cannot disagree.

Templates are OpenAPI's, with three additions:

- a parameter whose path-level OpenAPI parameter has an `enum` matches only those values
  (`{model}` with `releases|clusters|plugins`); any other matches one segment;
- a template ending in `/` matches with or without the slash;
- `[/{level}/{value}...]`, zero or more pairs of segments, starts the tail of a path its handler parses
  itself (`call.params["tail"]`: every segment after it); OpenAPI, which has no repeated segments, shows
  the group as one parameter named after its first one's plural (`/{levels}`).

Handlers are declared unbound (`GraphsApi.get`) and bound to the extension that serves them
(`RouteTable.bind`), so the declaration is a module's constant: what the root lists is known without
an instance.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.runtime.api.calls import Call
from operators.runtime.serving.http import Response

Handler = Callable[[Call], Awaitable[Response]]
UnboundHandler = Callable[[Any, Call], Awaitable[Response]]
RouteDoc = tuple[str, str, str]
"""(method, path template, what it does), as the root lists it."""
Table = list[tuple[str, dict[str, Handler]]]
"""Path patterns (regular expressions on the decoded path, anchored at the end by the API) and their
handlers by method."""

_PARAMETER = re.compile(r"\{(\w+)\}")
_REPEATED = re.compile(r"\[/\{(\w+)\}.*\]")


@dataclass(frozen=True)
class Operation:
    """One method of a route: its handler, the line the root lists for it ("" for none: a route's `does`
    may say it for all its methods) and its OpenAPI operation (None: not in the document)."""

    handler: UnboundHandler
    does: str = ""
    openapi: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Route:
    """A path template and its operations by method. `does`: one line of the root for all its methods
    (`GET|PUT`); `parameters` and `description`: the OpenAPI path item's; `also`: literal paths served the
    same, neither listed nor documented (`/` for `/api/v1`); `hot`: tried before every other route, for the
    route nearly every request takes (a Hiera backend's lookups), when no other can match its paths."""

    path: str
    methods: Mapping[str, Operation]
    does: str = ""
    parameters: Sequence[Mapping[str, Any]] = ()
    description: str = ""
    also: tuple[str, ...] = ()
    hot: bool = False

    def pattern(self) -> str:
        """The regular expression the route matches (unanchored at the end)."""
        enums = {p["name"]: p["schema"]["enum"] for p in self.parameters
                 if p.get("in") == "path" and "enum" in p.get("schema", {})}
        patterns = [_template_pattern(self.path, enums), *(re.escape(path) for path in self.also)]
        return patterns[0] if len(patterns) == 1 else f"(?:{'|'.join(patterns)})"

    def openapi_path(self) -> str:
        return _REPEATED.sub(lambda m: "/{" + m.group(1) + "s}", self.path)

    def docs(self) -> list[RouteDoc]:
        lines = [("|".join(self.methods), self.path, self.does)] if self.does else []
        return lines + [(method, self.path, operation.does) for method, operation in self.methods.items()
                        if operation.does]

    def openapi_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {"parameters": list(self.parameters)} if self.parameters else {}
        item.update({method.lower(): dict(operation.openapi) for method, operation in self.methods.items()
                     if operation.openapi is not None})
        if self.description:
            item["description"] = self.description
        return item

    def specificity(self) -> tuple[int, ...]:
        """Hot routes first, then literal segments before parameters, position by position:
        `/graphs/execute/` is tried before `/graphs/{name}/`, whatever the order of declaration (which is
        the order of the root's list)."""
        return (int(not self.hot), *(int("{" in segment or "[" in segment) for segment in self.path.split("/")))


def _template_pattern(template: str, enums: Mapping[str, Sequence[str]]) -> str:
    head, bracket, _ = template.partition("[")
    optional_slash = not bracket and head.endswith("/")
    if optional_slash:
        head = head[:-1]
    parts: list[str] = []
    position = 0
    for match in _PARAMETER.finditer(head):
        parts.append(re.escape(head[position:match.start()]))
        name = match.group(1)
        choices = enums.get(name)
        parts.append(f"(?P<{name}>{'|'.join(re.escape(c) for c in choices) if choices else '[^/]+'})")
        position = match.end()
    parts.append(re.escape(head[position:]))
    if bracket:
        parts.append("/(?P<tail>.+)")
    elif optional_slash:
        parts.append("/?")
    return "".join(parts)


@dataclass(frozen=True)
class RouteTable:
    """An API's routes, in the order the root lists them, and the OpenAPI schemas their operations name."""

    routes: tuple[Route, ...]
    schemas: Mapping[str, Any] = field(default_factory=dict)

    def docs(self) -> tuple[RouteDoc, ...]:
        return tuple(line for route in self.routes for line in route.docs())

    def openapi_paths(self) -> dict[str, Any]:
        return {route.openapi_path(): route.openapi_item() for route in self.routes}

    def bind(self, owner: object) -> Table:
        """The matching table, the handlers bound to `owner` (the extension that serves them)."""
        return bind((route, owner) for route in self.routes)


def bind(served: Iterable[tuple[Route, object]]) -> Table:
    """The matching table of routes and the extensions that serve them, in the order patterns are tried
    (`Route.specificity`); routes whose patterns are the same (a path its handler parses, such as values
    and overrides) are one entry."""
    table: dict[str, dict[str, Handler]] = {}
    for route, owner in sorted(served, key=lambda pair: pair[0].specificity()):
        methods = table.setdefault(route.pattern(), {})
        for method, operation in route.methods.items():
            handler: Handler = operation.handler.__get__(owner, type(owner))
            if method in methods and methods[method] != handler:
                raise ValueError(f"{method} {route.path}: two handlers for one pattern")
            methods[method] = handler
    return list(table.items())
