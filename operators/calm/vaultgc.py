"""Collecting the vault entries of blueprints that no object refers to any more.

An inline secret is stored when the blueprint that carries it sealed is reconciled (admission
writes nothing), and an update that replaces a value leaves the old entry behind, as does a
blueprint replaced between its reconcile and its deletion. Such entries belong to a blueprint
name in a namespace (`vault.Entry.owner`) but nothing refers to them.

An entry is garbage when no Blueprint of its namespace names it in its spec, no App names it in
its launch snapshot (apps keep running the blueprint they were launched from, old secrets
included), and it is older than `grace`: the list of objects read here may be older than the
entry, which a reconcile of an object not yet in that list stored.

Cheap when there is nothing to do: the vault lists owners and ages without decrypting, and
the API server is asked (one list of blueprints and one of apps in the namespace) only when a
namespace has a candidate it has not already seen in use, or every `recheck` seconds (an App
deleted since may have been the last user of a replaced secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from operators.calm.blueprint import vault_refs
from operators.calm.models import APP, BLUEPRINT
from operators.runtime import ApiError, Entry, Objects, ProcessServices, VaultError

log = logging.getLogger(__name__)

OWNER_PREFIX = "Blueprint/"


def candidates(entries: Sequence[Entry], now: float, grace: float) -> list[Entry]:
    """Blueprint-owned entries old enough that no admission request can still be storing them."""
    return [e for e in entries if e.owner.startswith(OWNER_PREFIX) and e.created <= now - grace]


def garbage(entries: Sequence[Entry], referenced: Collection[str], now: float, grace: float) -> list[Entry]:
    """The candidates no object refers to."""
    return [e for e in candidates(entries, now, grace) if e.uuid not in referenced]


async def referenced(services: ProcessServices, namespace: str) -> set[str]:
    """Every vault uuid that a Blueprint's spec or an App's launch snapshot of `namespace` names."""
    objects = Objects(services.kube)
    blueprints = await objects.list(BLUEPRINT, namespace)
    apps = await objects.list(APP, namespace)
    found = {ref for b in blueprints for _, ref in vault_refs(b.get("spec") or {})}
    found |= {ref for a in apps
              for _, ref in vault_refs(((a.get("status") or {}).get("snapshot") or {}).get("spec") or {})}
    return found


async def collect(services: ProcessServices, namespace: str, grace: float, now: float) -> tuple[int, set[str]]:
    """Delete one namespace's garbage entries: how many went, and the uuids found in use."""
    used = await referenced(services, namespace)
    # Listed after the API server answered: an entry stored meanwhile is younger than grace.
    dropped = 0
    for entry in garbage(services.vault.entries(namespace), used, now, grace):
        if await services.vault.delete(namespace, entry.uuid, owner=entry.owner):
            dropped += 1
    if dropped:
        log.info("vault: removed %d secrets of namespace %s that no object refers to", dropped, namespace)
    return dropped, used


@dataclass
class VaultCollector:
    """An addon that runs `collect` over every namespace with secrets, every `interval` seconds."""

    grace: float = 120.0
    interval: float = 60.0
    recheck: float = 600.0
    clock: Callable[[], float] = time.time
    name: str = "vault-collector"

    def __post_init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[str, tuple[float, set[str]]] = {}  # namespace: (when checked, uuids in use then)

    async def start(self, services: ProcessServices) -> None:
        self._task = asyncio.create_task(self._loop(services), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sweep(self, services: ProcessServices) -> int:
        """One pass over every namespace; a namespace that fails is retried on the next pass."""
        dropped = 0
        for namespace in services.vault.projects():
            now = self.clock()
            checked, used = self._seen.get(namespace, (float("-inf"), set()))
            fresh = {e.uuid for e in candidates(services.vault.entries(namespace), now, self.grace)} - used
            if not fresh and now - checked < self.recheck:
                continue
            try:
                count, used = await collect(services, namespace, self.grace, now)
            except (ApiError, VaultError, OSError) as error:
                log.warning("vault: collecting namespace %s: %s", namespace, error)
                continue
            dropped += count
            self._seen[namespace] = (now, used)
        return dropped

    async def _loop(self, services: ProcessServices) -> None:
        while True:
            await self.sweep(services)
            await asyncio.sleep(self.interval)
