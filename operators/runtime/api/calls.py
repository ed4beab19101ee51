"""What a handler of the API works with: the parsed call (path parameters, query, body, identity), its
query parameters and JSON body, and errors as JSON answers (`ApiProblem`). Public: every domain's routes use
them (`operators.config.api`, `operators.lsm.api`, `operators.graphs.api`)."""

from __future__ import annotations

import functools
import json
import re
import types
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from operators.runtime.api.auth import Identity
from operators.runtime.serving.http import Request, Response

NAMESPACE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ApiProblem(Exception):
    """An error answer: status, a one-word error, a message, and for 404s what was not found."""

    def __init__(self, status: int, error: str, message: str, not_found: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.not_found = not_found

    def response(self, headers: Mapping[str, str] | None = None) -> Response:
        body: dict[str, Any] = {"code": self.status, "error": self.error, "message": self.message}
        if self.not_found is not None:
            body["notFound"] = self.not_found
        return json_response(body, status=self.status, headers=headers)


def not_found(what: str, message: str) -> NoReturn:
    raise ApiProblem(404, "NotFound", message, not_found=what)


def bad_request(message: str) -> NoReturn:
    raise ApiProblem(400, "BadRequest", message)


def dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, dumps(body), headers=headers)


UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Basic realm="stead", Bearer realm="stead"'}


@dataclass(slots=True)
class Call:
    """A request as the handlers see it: what was asked, the path's parameters, and who asks."""

    request: Request
    params: Mapping[str, str]
    identity: Identity

    @property
    def query(self) -> Mapping[str, str]:
        return parse_query(self.request.query)


_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def object_name_ok(name: str) -> bool:
    """Whether `name` (percent-decoded from a URL) can be a Kubernetes object's name at all."""
    return len(name) <= 253 and _OBJECT_NAME.fullmatch(name) is not None


@functools.lru_cache(maxsize=4096)
def parse_query(raw: str) -> Mapping[str, str]:
    """Query parameters, decoded once per distinct query string: a Hiera backend sends the same
    few thousand queries again and again. The first of repeated names counts."""
    params: dict[str, str] = {}
    for name, value in urllib.parse.parse_qsl(raw, keep_blank_values=True):
        params.setdefault(name, value)
    return types.MappingProxyType(params)


def flag(call: Call, *names: str) -> bool:
    """A query flag: present (`?effective`), or set to a true-ish value."""
    params = call.query
    for name in names:
        if name in params:
            return params[name].lower() not in ("0", "false", "no", "off")
    return False


def int_param(call: Call, name: str) -> int | None:
    raw = call.query.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        bad_request(f"query parameter {name}: expected a positive integer, got {raw!r}")
    return int(raw)


def if_match(call: Call) -> str | None:
    raw = call.request.headers.get("if-match")
    if raw is None:
        return None
    value = raw.strip().removeprefix("W/").strip('"')
    if not value or value == "*":
        return None
    return value


def json_body(call: Call) -> Any:
    try:
        text = call.request.body.decode()
    except UnicodeDecodeError:
        bad_request("body: not valid UTF-8")
    if not text.strip():
        bad_request("body: expected a JSON document, got an empty body")
    try:
        return json.loads(text)
    except ValueError as error:
        bad_request(f"body: not valid JSON: {error}")
