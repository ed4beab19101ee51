"""Version history of ConfigValues as immutable ConfigMaps in the cluster.

Why ConfigMaps: the history must outlive any one operator replica and its LMDB store, be
readable with kubectl, and go away with its ConfigValues. One ConfigMap per version with
`immutable: true` cannot be edited after the fact (the API server refuses), carries an
ownerReference to its ConfigValues (garbage-collected with it) and labels that find all
versions of one object incarnation (`stead.dev/config-values-uid`).

Rules:
- The *data in force* is `spec.data`, or the data of version `spec.revertTo` when set.
- Whenever the data in force differs from the newest kept version (by SHA-256 of canonical
  JSON), a new version is recorded, numbered one above the newest. Numbers are never reused:
  the newest version is always kept (the limit is at least 1), so "one above the newest" only
  grows.
- Recording is idempotent: the ConfigMap name is derived from the object and the number, so a
  retry after a crash finds its own ConfigMap (same hash) instead of writing a duplicate; a
  different hash under that name means another writer won the number, and we take the next.
- After recording, versions beyond the retention limit are deleted, oldest first.

The pure helpers (names, bodies, parsing, what to prune) are separate from `History`, which
does the I/O through any client with the `KubeClient.request` signature.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from operators import API_VERSION
from operators.runtime import ApiError, Requester, core_path, utc_now

DATA_KEY = "data.json"
LABEL_UID = "stead.dev/config-values-uid"
LABEL_NAME = "stead.dev/config-values"
LABEL_VERSION = "stead.dev/version"
LABEL_PART_OF = "app.kubernetes.io/part-of"
ANNOTATION_HASH = "stead.dev/data-hash"
ANNOTATION_SOURCE = "stead.dev/source"
ANNOTATION_CREATED = "stead.dev/created-at"
ANNOTATION_OWNER = "stead.dev/config-values-name"
MAX_NAME = 253


class HistoryError(Exception):
    """A version that cannot be recorded or read (too large, not kept, ...)."""


class StaleHistory(HistoryError):
    """A version name is still held by a deleted earlier object of the same name: retry later,
    once the garbage collector has removed it."""


@dataclass(frozen=True)
class Owner:
    """The ConfigValues object a history belongs to."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Version:
    """One recorded version."""

    number: int
    data: dict[str, Any]
    data_hash: str
    source: str
    created_at: str
    config_map: str

    def info(self) -> dict[str, Any]:
        """The version as `status.versions[]` and the HTTP API list it (without the data)."""
        return {
            "version": self.number, "configMap": self.config_map, "dataHash": self.data_hash,
            "createdAt": self.created_at, "source": self.source,
        }


# --- pure helpers -------------------------------------------------------------------------


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def data_hash(data: Any) -> str:
    """SHA-256 of the canonical JSON: equal data, equal hash, whatever the key order."""
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def version_name(owner_name: str, number: int) -> str:
    """`<owner>-v<n>`, shortened with a hash when that would exceed a ConfigMap name's 253 characters."""
    suffix = f"-v{number}"
    if len(owner_name) + len(suffix) <= MAX_NAME:
        return owner_name + suffix
    digest = hashlib.sha256(owner_name.encode()).hexdigest()[:10]
    keep = MAX_NAME - len(suffix) - len(digest) - 1
    return f"{owner_name[:keep].rstrip('-.')}-{digest}{suffix}"


def version_labels(owner: Owner, number: int) -> dict[str, str]:
    labels = {LABEL_UID: owner.uid, LABEL_VERSION: str(number), LABEL_PART_OF: "stead"}
    if len(owner.name) <= 63:  # a label value's limit; the annotation always has the name
        labels[LABEL_NAME] = owner.name
    return labels


def version_body(owner: Owner, number: int, data: Mapping[str, Any], source: str, created_at: str) -> dict[str, Any]:
    """The immutable ConfigMap of one version."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": version_name(owner.name, number),
            "namespace": owner.namespace,
            "labels": version_labels(owner, number),
            "annotations": {
                ANNOTATION_HASH: data_hash(data),
                ANNOTATION_SOURCE: source,
                ANNOTATION_CREATED: created_at,
                ANNOTATION_OWNER: owner.name,
            },
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "ConfigValues", "name": owner.name, "uid": owner.uid,
                "blockOwnerDeletion": False, "controller": False,
            }],
        },
        "immutable": True,
        "data": {DATA_KEY: canonical_json(data)},
    }


def parse_version(config_map: Mapping[str, Any]) -> Version | None:
    """A version from its ConfigMap; None for a ConfigMap that is not a well-formed version."""
    meta = config_map.get("metadata") or {}
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    try:
        number = int(labels[LABEL_VERSION])
        data = json.loads((config_map.get("data") or {})[DATA_KEY])
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    return Version(
        number=number, data=data, data_hash=str(notes.get(ANNOTATION_HASH) or data_hash(data)),
        source=str(notes.get(ANNOTATION_SOURCE) or "spec"), created_at=str(notes.get(ANNOTATION_CREATED) or ""),
        config_map=str(meta.get("name") or ""),
    )


def newest(versions: Sequence[Version]) -> Version | None:
    return max(versions, key=lambda v: v.number, default=None)


def to_prune(versions: Sequence[Version], limit: int) -> list[Version]:
    """The versions beyond the newest `limit`, oldest first (the newest is always kept)."""
    ordered = sorted(versions, key=lambda v: v.number)
    return ordered[: max(0, len(ordered) - max(1, limit))]


def source_of(revert_to: int | None) -> str:
    return "spec" if revert_to is None else f"revert:{revert_to}"


# --- I/O ----------------------------------------------------------------------------------


def _configmaps(namespace: str, name: str | None = None) -> str:
    return core_path("configmaps", namespace, name or None)


class History:
    """The versions of one ConfigValues object, through an injected API client."""

    def __init__(self, kube: Requester, owner: Owner) -> None:
        self._kube = kube
        self.owner = owner

    async def versions(self) -> list[Version]:
        """Every kept version, oldest first."""
        params = {"labelSelector": f"{LABEL_UID}={self.owner.uid}"}
        try:
            page = await self._kube.request("GET", _configmaps(self.owner.namespace), params=params)
        except ApiError as error:
            raise HistoryError(f"cannot list the versions of {self.owner.name}: {error.message}") from error
        versions = [v for v in (parse_version(item) for item in page.get("items") or []) if v is not None]
        return sorted(versions, key=lambda v: v.number)

    async def read(self, number: int) -> Version | None:
        """One version, or None when it was never recorded or is no longer kept."""
        try:
            path = _configmaps(self.owner.namespace, version_name(self.owner.name, number))
            body = await self._kube.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise HistoryError(f"cannot read version {number} of {self.owner.name}: {error.message}") from error
        version = parse_version(body)
        uid = ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_UID)
        return version if version is not None and uid == self.owner.uid else None

    async def record(self, data: Mapping[str, Any], source: str = "spec",
                     known: Sequence[Version] | None = None) -> tuple[Version, bool]:
        """Make `data` the newest version; returns it and whether a new one was written."""
        versions = list(known) if known is not None else await self.versions()
        wanted = data_hash(data)
        for _ in range(5):
            latest = newest(versions)
            if latest is not None and latest.data_hash == wanted:
                return latest, False
            number = (latest.number if latest is not None else 0) + 1
            body = version_body(self.owner, number, data, source, utc_now())
            try:
                await self._kube.request("POST", _configmaps(self.owner.namespace), body)
            except ApiError as error:
                if error.status == 409:  # the name exists: our own earlier attempt, or another writer
                    await self._check_not_stale(body["metadata"]["name"])
                    versions = await self.versions()
                    continue
                if error.status in (413, 422) or "too long" in error.message or "exceeds" in error.message:
                    raise HistoryError(f"version {number} is too large to store: {error.message}") from error
                raise HistoryError(f"cannot record version {number} of {self.owner.name}: {error.message}") from error
            version = parse_version(body)
            assert version is not None  # we just built it
            return version, True
        raise HistoryError(f"could not record a version of {self.owner.name}: too many concurrent writers")

    async def _check_not_stale(self, name: str) -> None:
        try:
            existing = await self._kube.request("GET", _configmaps(self.owner.namespace, name))
        except ApiError:
            return  # gone already, or unreadable: the retry will tell
        uid = ((existing.get("metadata") or {}).get("labels") or {}).get(LABEL_UID)
        if uid is None:
            raise HistoryError(f"ConfigMap {name} exists and is not one of Stead's versions; it is left as it is: "
                               "rename it, or this object")
        if uid != self.owner.uid:
            raise StaleHistory(f"ConfigMap {name} belongs to an earlier object named {self.owner.name}; "
                               "waiting for the garbage collector to remove it")

    async def prune(self, limit: int, known: Sequence[Version] | None = None) -> list[Version]:
        """Delete the versions beyond `limit`; returns the ones deleted."""
        versions = list(known) if known is not None else await self.versions()
        gone = to_prune(versions, limit)
        for version in gone:
            try:
                await self._kube.request("DELETE", _configmaps(self.owner.namespace, version.config_map))
            except ApiError as error:
                if error.status != 404:
                    raise HistoryError(f"cannot delete {version.config_map}: {error.message}") from error
        return gone


@dataclass(frozen=True)
class Recorded:
    """What `sync` found and did: the version in force and the versions kept."""

    current: Version
    created: bool
    kept: list[Version]
    pruned: list[Version]


async def data_in_force(history: History, spec_data: Mapping[str, Any], revert_to: int | None) -> dict[str, Any]:
    """`spec.data`, or the data of version `revert_to` (HistoryError when that version is not kept)."""
    if revert_to is None:
        return dict(spec_data)
    version = await history.read(revert_to)
    if version is None:
        raise HistoryError(f"spec.revertTo: version {revert_to} is not kept (see status.versions)")
    return version.data


async def sync(history: History, spec_data: Mapping[str, Any], revert_to: int | None, limit: int) -> Recorded:
    """Record the data in force if it changed, then apply the retention limit."""
    versions = await history.versions()
    if revert_to is None:
        data = dict(spec_data)
    else:
        kept = {v.number: v for v in versions}
        if revert_to not in kept:
            raise HistoryError(
                f"spec.revertTo: version {revert_to} is not kept "
                f"(kept: {', '.join(str(n) for n in sorted(kept)) or 'none'})"
            )
        data = kept[revert_to].data
    current, created = await history.record(data, source_of(revert_to), known=versions)
    if created:
        versions = [*versions, current]
    pruned = await history.prune(limit, known=versions)
    gone = {v.number for v in pruned}
    return Recorded(current=current, created=created, kept=[v for v in versions if v.number not in gone],
                    pruned=pruned)
