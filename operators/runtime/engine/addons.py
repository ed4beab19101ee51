"""Parts of the operator process beside the reconcilers, such as a domain's HTTP API.

A domain supplies an `Addon`; the runtime starts it once the process's services exist (API
access, store, vault) and stops it before they go, so an addon needs no globals and no
start-up code of its own in the runtime.
"""

from __future__ import annotations

from typing import Protocol

from operators.runtime.engine.services import Services


class Addon(Protocol):
    name: str

    async def start(self, services: Services) -> None: ...

    async def stop(self) -> None: ...
