"""What every client of the API server shares: its errors, the paths of Stead's objects, the one method
most code needs (`Requester`), paged listing, and where the server is and how to authenticate to it
(`ClusterAccess`).

Standard library only: the CLI's client (`operators.runtime.kube.light`) and the operator's
(`operators.runtime.kube.client`, over aiohttp) both build on it, so that a `stead` command that talks to
the cluster imports neither aiohttp nor the `kubernetes` package.
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from operators import GROUP, VERSION

USER_AGENT = "stead-operator"


class ApiError(Exception):
    """A non-2xx answer, with the status code and the API server's message (never a body dump)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class ApiUnreachable(ApiError):
    """No answer from the API server (connection refused or reset, TLS failure, timeout): an
    outage, never the fault of the object being worked on. Status 0: no HTTP answer at all."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


OUTAGE_STATUSES = frozenset({429, 502, 503, 504})
"""Answers that mean the API server (or etcd behind it) cannot serve now, whatever was asked."""


def is_outage(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from or while handling, says the API server is
    unreachable or overloaded (a step often wraps an ApiError in an error of its own)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ApiUnreachable) or (
                isinstance(current, ApiError) and current.status in OUTAGE_STATUSES):
            return True
        current = current.__cause__ or current.__context__
    return False


@dataclass(frozen=True)
class ClusterAccess:
    """Where the API server is and how to authenticate to it."""

    server: str
    ssl_context: ssl.SSLContext
    headers: dict[str, str] = field(default_factory=dict)


def segment(name: str) -> str:
    """A name as one URL path segment, percent-escaped.

    Names reach API-server paths from URLs and specs: unescaped, `?` (or `%3F` decoded on the
    way in) would add query parameters and `/` or `..` path segments (another namespace's
    Secret). No Kubernetes name is empty, `.` or `..`: those are refused outright.
    """
    if name in ("", ".", ".."):
        raise ValueError(f"{name!r} is not a Kubernetes object name")
    return urllib.parse.quote(name, safe="")


def custom_path(plural: str, namespace: str | None = None, name: str | None = None) -> str:
    """The path of Stead's custom resources, of one namespace, or one object."""
    path = f"/apis/{GROUP}/{VERSION}"
    if namespace:
        path += f"/namespaces/{segment(namespace)}"
    path += f"/{plural}"
    if name:
        path += f"/{segment(name)}"
    return path


def core_path(plural: str, namespace: str, name: str | None = None) -> str:
    """The path of a core (v1) namespaced resource, or one object of it; names escaped."""
    path = f"/api/v1/namespaces/{segment(namespace)}/{plural}"
    return path if name is None else f"{path}/{segment(name)}"


class Requester(Protocol):
    """The one method of `KubeClient` most code needs: a test puts a fake API in its place."""

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]: ...


class HeaderRequester(Protocol):
    """A `Requester` that also sends headers of the caller's choosing (`KubeClient`, the tests' fake)."""

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None, headers: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]: ...


async def list_all(api: Requester, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
                   ) -> tuple[list[dict[str, Any]], str]:
    """Every item a LIST of `path` answers, read `page_size` at a time (`limit`/`continue`), and the
    listing's resourceVersion (what a watch resumes from)."""
    query = {**(params or {}), "limit": str(page_size)}
    items: list[dict[str, Any]] = []
    while True:
        page = await api.request("GET", path, params=query)
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        if not meta.get("continue"):
            return items, str(meta.get("resourceVersion") or "")
        query = {**query, "continue": str(meta["continue"])}


def error_message(text: str) -> str:
    """What an API server's error answer says: its Status `message`, else the body's start (bounded: it goes
    into an exception, then into logs and conditions). Both clients, the operator's and the CLI's, use it."""
    try:
        return str(json.loads(text).get("message") or text[:200])
    except (ValueError, AttributeError):
        return text[:200]
