"""Cluster copies of the vault: every write goes to one first, so a lost volume loses nothing."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Protocol

from operators.runtime.core.ring import PROJECT_LABEL
from operators.runtime.kube.client import ApiError, Requester
from operators.runtime.secrets.keys import (
    ATTEMPTS,
    DNS_SUBDOMAIN,
    KEY_SECRET,
    PART_OF,
    SECRET_PREFIX,
    TRANSPORT_ERRORS,
    VAULT_LABEL,
    ClusterCopyError,
    b64,
    backoff,
    is_uuid,
    unb64,
)


class ClusterCopy(Protocol):
    """Where the vault's ciphertexts survive the operator's volume: written before LMDB, read to recover."""

    async def save(self, project: str, uuid: str, blob: bytes) -> None: ...

    async def save_many(self, project: str, blobs: Mapping[str, bytes]) -> None: ...

    async def remove(self, project: str, uuid: str) -> None: ...

    async def load(self, project: str) -> dict[str, bytes]: ...


class MemoryClusterCopy:
    """A ClusterCopy in a dict: for unit tests of the vault and of the kinds that use it."""

    def __init__(self) -> None:
        self.projects: dict[str, dict[str, bytes]] = {}

    async def save(self, project: str, uuid: str, blob: bytes) -> None:
        await self.save_many(project, {uuid: blob})

    async def save_many(self, project: str, blobs: Mapping[str, bytes]) -> None:
        self.projects.setdefault(project, {}).update(blobs)

    async def remove(self, project: str, uuid: str) -> None:
        self.projects.get(project, {}).pop(uuid, None)

    async def load(self, project: str) -> dict[str, bytes]:
        return dict(self.projects.get(project, {}))


def vault_secret_name(project: str) -> str:
    """`stead-vault-<project>`; a project that is no valid Secret name (upper case, `_`) gets a hash suffix,
    and so does a project named `key`, whose plain name would be the master key Secret's."""
    if DNS_SUBDOMAIN.fullmatch(project) and SECRET_PREFIX + project != KEY_SECRET:
        return SECRET_PREFIX + project
    slug = re.sub(r"[^a-z0-9.-]+", "-", project.lower()).strip("-.")[:40]
    digest = hashlib.sha256(project.encode()).hexdigest()[:10]
    return f"{SECRET_PREFIX}{slug}-{digest}" if slug else f"{SECRET_PREFIX}{digest}"


class SecretClusterCopy:
    """One Secret per project in the operator's namespace, `data` = {uuid: blob}. Ciphertexts only.

    Writes are JSON merge patches of `data`: they add or remove single uuids without reading
    the Secret and never conflict with each other. Server-side apply is not used on purpose:
    an apply that lists one uuid would, for the same field manager, remove every uuid it listed
    before. A missing Secret (404) is created; a create that loses a race (409) patches instead.

    Size: a Secret holds at most 1 MiB. An entry costs its uuid (36 bytes) plus the base64 of
    the blob (about 4/3 of 45 bytes + the value), so a project fits some 8,000 passwords.
    """

    def __init__(self, kube: Requester, namespace: str) -> None:
        self._kube = kube
        self.namespace = namespace

    def _path(self, project: str | None = None) -> str:
        path = f"/api/v1/namespaces/{self.namespace}/secrets"
        return path if project is None else f"{path}/{vault_secret_name(project)}"

    def _labels(self, project: str) -> dict[str, str]:
        return {**PART_OF, VAULT_LABEL: "true", PROJECT_LABEL: project}

    def _failed(self, project: str, action: str, error: Exception) -> ClusterCopyError:
        detail = f"{error.status} {error.message}" if isinstance(error, ApiError) else type(error).__name__
        return ClusterCopyError(
            f"vault copy of project {project} (Secret {self.namespace}/{vault_secret_name(project)}): "
            f"{action} failed: {detail}")

    async def save(self, project: str, uuid: str, blob: bytes) -> None:
        await self.save_many(project, {uuid: blob})

    async def save_many(self, project: str, blobs: Mapping[str, bytes]) -> None:
        if not blobs:
            return
        data = {uuid: b64(blob) for uuid, blob in blobs.items()}
        patch = {"metadata": {"labels": self._labels(project)}, "data": data}
        for attempt in range(ATTEMPTS):
            try:
                await self._kube.request("PATCH", self._path(project), patch,
                                         content_type="application/merge-patch+json")
                return
            except ApiError as error:
                if error.status == 409:  # a conflicting write: patch again, after a short pause
                    await backoff(attempt)
                    continue
                if error.status != 404:
                    raise self._failed(project, "save", error) from error
            except TRANSPORT_ERRORS as error:
                raise self._failed(project, "save", error) from error
            try:
                await self._kube.request("POST", self._path(), {
                    "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": vault_secret_name(project), "labels": self._labels(project)},
                    "data": data,
                })
                return
            except ApiError as error:
                if error.status != 409:  # 409: created meanwhile by someone else, patch it
                    raise self._failed(project, "create", error) from error
            except TRANSPORT_ERRORS as error:
                raise self._failed(project, "create", error) from error
        raise ClusterCopyError(f"vault copy of project {project}: save still conflicting after {ATTEMPTS} attempts")

    async def remove(self, project: str, uuid: str) -> None:
        """Drop one uuid; the Secret goes when it is empty (only if nobody wrote to it since)."""
        try:
            secret = await self._kube.request("PATCH", self._path(project), {"data": {uuid: None}},
                                              content_type="application/merge-patch+json")
        except ApiError as error:
            if error.status == 404:
                return
            raise self._failed(project, "remove", error) from error
        except TRANSPORT_ERRORS as error:
            raise self._failed(project, "remove", error) from error
        if secret.get("data"):
            return
        meta = secret.get("metadata") or {}
        preconditions = {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
        try:
            await self._kube.request("DELETE", self._path(project), {
                "apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions,
            })
        except ApiError as error:
            if error.status not in (404, 409):  # gone already, or written again since: keep it
                raise self._failed(project, "delete of the empty Secret", error) from error
        except TRANSPORT_ERRORS as error:
            raise self._failed(project, "delete of the empty Secret", error) from error

    async def load(self, project: str) -> dict[str, bytes]:
        """Every uuid and blob of a project ({} when it has no Secret). Undecodable entries load as b""."""
        try:
            secret = await self._kube.request("GET", self._path(project))
        except ApiError as error:
            if error.status == 404:
                return {}
            raise self._failed(project, "load", error) from error
        except TRANSPORT_ERRORS as error:
            raise self._failed(project, "load", error) from error
        data: dict[str, str] = secret.get("data") or {}
        return {uuid: unb64(encoded) or b"" for uuid, encoded in data.items() if is_uuid(uuid)}

    async def projects(self) -> list[str]:
        """The projects that have a cluster copy (for an operator that lost its whole volume)."""
        try:
            listing = await self._kube.request("GET", self._path(), params={"labelSelector": f"{VAULT_LABEL}=true"})
        except (ApiError, *TRANSPORT_ERRORS) as error:
            raise ClusterCopyError(f"listing the vault copies in namespace {self.namespace} failed: "
                                   f"{error}") from error
        found = {((item.get("metadata") or {}).get("labels") or {}).get(PROJECT_LABEL)
                 for item in listing.get("items") or []}
        return sorted(p for p in found if p)
