"""The event loop every Stead process runs on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (a dependency on Linux), as Kopf's own CLI does: the operator's
    loop carries the watches, the webhooks and the configuration API, and uvloop's transports
    and TLS cost about a fifth less CPU per request than asyncio's (bench/config_lookup.py)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
