"""Stead's objects by kind: get, list, create, patch, patch status and delete, named by `Resource`.

Domains read and write each other's objects (an App creates ActionRuns, a ServiceInstance its App, a
GraphRun reads its Environment). Written as raw REST calls, each spelt its method, its path and, for a
patch, its content type again; here each is one typed call on a `Resource` the domain declared, so a
misspelt kind is a name that does not exist, and every call sends exactly the request it sent before (one
request each: the tests count them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.runtime.core.kinds import Resource
from operators.runtime.kube.api import ApiError, Requester, custom_path

MERGE_PATCH = "application/merge-patch+json"


class Objects:
    """Stead's custom objects through any `Requester` (`KubeClient`, or a test's fake API). Errors are the
    API's own: `ApiError` with the status (404, 409, ...), `ApiUnreachable` for an outage."""

    def __init__(self, api: Requester) -> None:
        self._api = api

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        """One object (ApiError 404 when there is none)."""
        return await self._api.request("GET", custom_path(resource.plural, namespace, name))

    async def find(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        """One object, or None when there is none (any other error is raised)."""
        try:
            return await self.get(resource, namespace, name)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def list(self, resource: Resource, namespace: str = "") -> list[dict[str, Any]]:
        """The objects of a namespace (every namespace with ""), in one unpaged LIST."""
        listed = await self._api.request("GET", custom_path(resource.plural, namespace))
        return list(listed.get("items") or [])

    async def create(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a new object (ApiError 409 when the name is taken)."""
        return await self._api.request("POST", custom_path(resource.plural, namespace), body)

    async def patch(self, resource: Resource, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the object (spec, metadata)."""
        return await self._api.request("PATCH", custom_path(resource.plural, namespace, name), patch,
                                       content_type=MERGE_PATCH)

    async def patch_status(self, resource: Resource, namespace: str, name: str, patch: Mapping[str, Any]
                           ) -> dict[str, Any]:
        """A JSON merge patch through the status subresource: `patch` is `{"status": ...}`, with
        `metadata.resourceVersion` to make it fail (409) if the object changed since it was read."""
        return await self._api.request("PATCH", custom_path(resource.plural, namespace, name) + "/status", patch,
                                       content_type=MERGE_PATCH)

    async def delete(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        """DELETE the object (ApiError 404 when it is gone already)."""
        return await self._api.request("DELETE", custom_path(resource.plural, namespace, name))
