"""What a view of the console declares and what its handlers see: plain values, no aiohttp types.

A view is a module (or package) under `operators.console.views` with `ROUTES` (and `TOPICS` for what it
streams). A handler gets a `ConsoleCall`, whose clients act as the signed-in user, and returns JSON-able
data; it refuses with `ConsoleError`. An `ApiError` of the API server raised through a handler is answered
with the API server's own status and message (401 signs the page out, 403 says what RBAC refused).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from operators.runtime import Requester


class Streamer(Requester, Protocol):
    """A requester that can also WATCH (`operators.console.clients.AsUser`)."""

    def lines(self, path: str, params: dict[str, str], read_timeout: float) -> AsyncIterator[bytes]: ...


@dataclass(frozen=True)
class ConsoleCall:
    kube: Streamer
    """The Kubernetes API server, as the user."""
    stead: Requester | None
    """The operator's API server (configuration, graphs, services, run outputs), as the user; None: the console
    was not told where it is."""
    user: str
    params: Mapping[str, str] = field(default_factory=dict)
    """The path's parameters."""
    query: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    """The request's JSON body (None: none)."""

    def needs_stead(self) -> Requester:
        """The operator's API server, or a 503 that says the console was not told where it is."""
        if self.stead is None:
            raise ConsoleError(503, "this console was started without --stead-api: the operator's API server "
                                    "(configuration, graphs, run outputs) is not reachable from it")
        return self.stead


class ConsoleError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Handler = Callable[[ConsoleCall], Awaitable[Any]]


@dataclass(frozen=True)
class ConsoleRoute:
    method: str
    path: str
    """An aiohttp template under /console/api/ (`/console/api/lifecycle/{namespace}/{name}`)."""
    handler: Handler


TopicSource = Callable[[ConsoleCall, Mapping[str, Any], "str | None"], AsyncIterator[tuple[str, Any]]]
"""What a stream's topic of one kind yields: (position, data), from `position` on (None: from the start).
The stream sends each with its position, and a page that reconnects asks again from the last it saw."""
