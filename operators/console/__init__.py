"""Stead's web console: every kind in a browser, read and changed only with the signed-in user's rights.

The front door: `ConsoleServer` (the HTTP server), `ConsoleSettings`, `console_server` (the server with the
catalog's views, as `stead console` and the operator process start it), and what a view declares
(`ConsoleCall`, `ConsoleRoute`, `ConsoleError`, `TopicSource`). docs/console.md is the user's page.
"""

from __future__ import annotations

from collections.abc import Sequence

from operators.console.server import ConsoleServer
from operators.console.settings import ConsoleSettings
from operators.console.views import all_routes, all_topics
from operators.console.web import ConsoleCall, ConsoleError, ConsoleRoute, TopicSource
from operators.runtime import ClusterAccess, Kind


def console_server(settings: ConsoleSettings, kinds: Sequence[Kind], kube: ClusterAccess | None = None
                   ) -> ConsoleServer:
    """The console over `kinds` (the catalog's), with every view's routes and topics."""
    return ConsoleServer(settings, all_routes(kinds), all_topics(kinds), kube)


__all__ = ["ConsoleCall", "ConsoleError", "ConsoleRoute", "ConsoleServer", "ConsoleSettings", "TopicSource",
           "console_server"]
