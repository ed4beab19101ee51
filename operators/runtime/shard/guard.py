"""The write side of fencing: what the engine writes for a project goes through here.

`WriteGuard.check(project)` raises `NotOwned` unless this replica holds the project's claim
under its open incarnation and its own lease deadline leaves more than `needed` seconds (the
write's timeout: a write that could land after our lease ran out is not sent). `FencedKube` is
the API client handed to the engine's services with `--sharding leases`: every request that
writes (anything but GET/HEAD) to a namespaced path is checked against the namespace's
projects; cluster-scoped writes and those to the operator's own namespace only against the
fence. Reads are never refused.

Refusals are `ApiError`s with status 403 (a write we may not make), so every caller's existing
error path handles them: a status write becomes a retry (`WriteFailed`), which finds the project
gone; a run's progress write is skipped and shown at the next one, by the new owner.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from operators.runtime.kube.client import ApiError, KubeClient
from operators.runtime.shard.fence import Fence

_NAMESPACED = re.compile(r"^/(?:api/v1|apis/[^/]+/[^/]+)/namespaces/([^/?]+)/[^/?]+")
READS = frozenset({"GET", "HEAD"})


class NotOwned(ApiError):
    """A write refused before it was sent: the project is not ours (now), or our lease may be over."""

    def __init__(self, message: str) -> None:
        super().__init__(403, message)


class WriteGuard:
    """Answers "may I write for this project now?" from `owns(project)` and our fence."""

    def __init__(self, owns: Callable[[str], bool], fence: Fence, needed: float = 0.0) -> None:
        self._owns = owns
        self.fence = fence
        self.needed = needed
        self.refused = 0

    def owns(self, project: str) -> bool:
        return self._owns(project)

    def check(self, project: str | None) -> None:
        """Raise `NotOwned` unless we may write for `project` now (None: only the fence)."""
        if not self.fence.valid(self.needed):
            self.refused += 1
            raise NotOwned(f"not written: this replica's membership lease ends in {self.fence.remaining():.2f}s, "
                           f"{self.needed:g}s needed")
        if project is not None and not self._owns(project):
            self.refused += 1
            raise NotOwned(f"not written: project {project} is not this replica's (its claim is not held)")

    def check_any(self, projects: Iterable[str]) -> None:
        """Raise `NotOwned` unless we hold at least one of `projects` (and our fence is open)."""
        candidates = list(projects)
        for project in candidates[:-1]:
            if self._owns(project):
                return self.check(project)
        return self.check(candidates[-1] if candidates else None)


def namespace_of(path: str) -> str | None:
    """The namespace a request path is in (None: cluster-scoped)."""
    match = _NAMESPACED.match(path)
    return match.group(1) if match else None


class FencedKube(KubeClient):
    """A `KubeClient` whose writes are checked by a `WriteGuard` first (see the module's docstring).

    It shares the wrapped client's connections; `projects_in(namespace)` names the projects whose
    objects live in a namespace (the namespace itself, and `stead.dev/project` labels seen there).
    """

    def __init__(self, inner: KubeClient, guard: WriteGuard, projects_in: Callable[[str], Iterable[str]],
                 exempt: Iterable[str] = ()) -> None:
        super().__init__(inner._access, inner._concurrency, inner._timeout)
        self._inner = inner
        self.guard = guard
        self._projects_in = projects_in
        self._exempt = frozenset(exempt)
        self.requests = inner.requests

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None, headers: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        if method not in READS:
            namespace = namespace_of(path)
            if namespace is None or namespace in self._exempt:
                self.guard.check(None)
            else:
                self.guard.check_any(self._projects_in(namespace))
        if headers:  # impersonation (the API extensions' writes)
            return await self._inner.request(method, path, body, content_type, params, headers=headers)
        return await self._inner.request(method, path, body, content_type, params)

    async def __aenter__(self) -> FencedKube:
        return self  # the wrapped client's session is the one in use

    async def __aexit__(self, *exc: object) -> None:
        return None
