"""The secrets vault: credentials and secret variables, encrypted, referenced elsewhere by uuid only.

A Blueprint's credential or secret variable is stored here once and from then on only its uuid
travels (in specs, status, workflow parameters); the value is decrypted when a step starts and
masked (`pipelines.masking`) in everything stored or shown.

Encryption. AES-256-GCM with a fresh random 96-bit nonce per encryption. The associated data
bind each ciphertext to its project, its uuid and its header, so a blob copied to another
uuid or project (or with an edited key id) fails to decrypt instead of handing out another
secret. Random nonces are safe for far more encryptions than a vault sees under one key (NIST
SP 800-38D: up to 2**32 per key); every rotation starts the count again.

Blob format (the bytes kept in LMDB; the cluster copy holds the same bytes, base64-encoded
as every Secret's `data` is)::

    version (1 byte, 0x02) | n = len(key id) (1 byte) | key id (n ASCII bytes)
    | created (8 bytes, unix seconds) | m = len(owner) (2 bytes) | owner (m UTF-8 bytes)
    | nonce (12 bytes) | AES-GCM ciphertext of the UTF-8 value | GCM tag (16 bytes)

    associated data = b"stead.dev/vault" | version | n | key id
                      | len(project) (2 bytes, big-endian) | project | len(uuid) (2 bytes) | uuid

The key id in clear tells rotation (and a restarted operator holding several keys) which key
encrypted what, without trying each. The owner (the object that stored the value, for example
`Blueprint/web`) and the creation time are in clear too, and authenticated: a reference from any
other object is refused (`get(..., owner=...)`), a delete by another object removes nothing, and
entries no object refers to are found by owner and age. Version 1 blobs (no owner) still decrypt
but belong to no object.

Tenancy. The project of a secret is the namespace of the object that owns it, never a label a
user can set: the namespace is the tenant boundary, so a uuid of another namespace is simply
not found.

Master key. A Kubernetes Secret (default `stead-vault-key`, in the operator's namespace) holds
one or more 32-byte keys and names the current one; the operator creates it on first start, or
the Helm chart supplies it in the same format::

    data:
      current: <base64 of the key id>              # e.g. {{ "k1" | b64enc }}
      key.<key id>: <base64 of 32 random bytes>    # e.g. {{ randBytes 32 }}

New blobs use `current`; the others stay so that blobs not yet re-encrypted still decrypt.
`rotate_master_key` adds a new current key, `Vault.rotate` re-encrypts, `retire_master_key`
removes an old key once no replica needs it.

Storage. LMDB is the fast path: a named database `vault` in the operator's LocalStore, key
`<project>/<uuid>`, value the blob; `get` is a synchronous read and a decryption, microseconds.
It is not the only copy: every write goes first to a `ClusterCopy` (one Secret per project,
`SecretClusterCopy`), then to LMDB, so an operator that loses its volume, or a replica that
takes a project over, recovers every secret with `Vault.recover(project)`. Writes are `async`
and reads are not: there is no way to write LMDB without writing the cluster copy first, and
no LMDB transaction is ever held across an `await` (a second write transaction in the same
thread would deadlock LMDB). Mutations of one project are serialised by an asyncio lock.

Nothing here puts a value or key material into an exception message, a `repr` or a log line;
errors name projects, uuids and key ids, which are not secret. Decryption failures are raised
outside the `except` block that caught them, so that no exception context carries a value.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import re
import secrets
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from operators.runtime.kube import ApiError, Requester
from operators.runtime.ring import PROJECT_LABEL
from operators.runtime.store import LocalStore
from pipelines.masking import Masker

FORMAT_VERSION = 2
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
AAD_CONTEXT = b"stead.dev/vault"
VAULT_DB = b"vault"

KEY_SECRET = "stead-vault-key"
SECRET_PREFIX = "stead-vault-"
PART_OF = {"app.kubernetes.io/part-of": "stead"}
VAULT_LABEL = "stead.dev/vault"
KEY_LABEL = "stead.dev/vault-key"
CURRENT_FIELD = "current"
KEY_FIELD_PREFIX = "key."
ATTEMPTS = 5

# A key id is a Secret data key suffix and one length byte in the blob: short, plain ASCII.
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# A project is a namespace name or a `stead.dev/project` label value.
_PROJECT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class VaultError(Exception):
    """A vault operation failed. The message names projects, uuids and key ids, never a value or key."""


class ClusterCopyError(VaultError):
    """The cluster copy could not be read or written; nothing was changed locally."""


# --- keys ------------------------------------------------------------------------------------


class MasterKey:
    """A keyring: one or more 32-byte AES keys by id, and the id of the current one.

    Immutable; comparisons are constant-time; `repr` shows ids only.
    """

    __slots__ = ("_aead", "_current", "_keys")

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        for key_id, key in keys.items():
            if not _KEY_ID.fullmatch(key_id):
                raise VaultError(f"invalid master key id {key_id!r}: want 1-63 of [A-Za-z0-9._-]")
            if len(key) != KEY_BYTES:
                raise VaultError(f"master key {key_id} is {len(key)} bytes, want {KEY_BYTES}")
        if current not in keys:
            raise VaultError(f"the current master key id {current!r} names none of the keys {sorted(keys)}")
        self._keys = dict(keys)
        self._current = current
        self._aead = {key_id: AESGCM(key) for key_id, key in self._keys.items()}

    @classmethod
    def generate(cls, key_id: str | None = None) -> MasterKey:
        """A keyring with one new random key, named by its creation time (ids sort by age)."""
        key_id = key_id or f"k{datetime.now(UTC):%Y%m%d%H%M%S}-{secrets.token_hex(3)}"
        return cls({key_id: secrets.token_bytes(KEY_BYTES)}, key_id)

    @property
    def current_id(self) -> str:
        return self._current

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    def aead(self, key_id: str) -> AESGCM | None:
        return self._aead.get(key_id)

    def with_current(self, newer: MasterKey) -> MasterKey:
        """This keyring plus `newer`'s keys, with `newer`'s current key as current (a rotation)."""
        for key_id in set(self._keys) & set(newer._keys):
            if not hmac.compare_digest(self._keys[key_id], newer._keys[key_id]):
                raise VaultError(f"master key id {key_id} names two different keys")
        return MasterKey({**self._keys, **newer._keys}, newer._current)

    def without(self, key_id: str) -> MasterKey:
        if key_id == self._current:
            raise VaultError(f"master key {key_id} is the current key and cannot be retired")
        return MasterKey({k: v for k, v in self._keys.items() if k != key_id}, self._current)

    def to_secret_data(self) -> dict[str, str]:
        """The `data` of the key Secret (base64 values, as the API wants them)."""
        data = {CURRENT_FIELD: _b64(self._current.encode())}
        data.update({KEY_FIELD_PREFIX + key_id: _b64(key) for key_id, key in self._keys.items()})
        return data

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str]) -> MasterKey:
        """Parse the key Secret's `data`; `current` may be left out when there is exactly one key."""
        keys: dict[str, bytes] = {}
        for field, encoded in data.items():
            if field.startswith(KEY_FIELD_PREFIX):
                key_id = field.removeprefix(KEY_FIELD_PREFIX)
                decoded = _unb64(encoded)
                if decoded is None:
                    raise VaultError(f"master key {key_id} is not valid base64")
                keys[key_id] = decoded
        if not keys:
            raise VaultError(f"the master key Secret holds no `{KEY_FIELD_PREFIX}<id>` entry")
        if CURRENT_FIELD in data:
            raw_current = _unb64(data[CURRENT_FIELD])
            if raw_current is None:
                raise VaultError("the master key Secret's `current` is not valid base64")
            current = raw_current.decode("ascii", "replace").strip()
        elif len(keys) == 1:
            current = next(iter(keys))
        else:
            raise VaultError(f"the master key Secret holds keys {sorted(keys)} but no `current`")
        return cls(keys, current)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MasterKey):
            return NotImplemented
        return (self._current == other._current and self._keys.keys() == other._keys.keys()
                and all(hmac.compare_digest(v, other._keys[k]) for k, v in self._keys.items()))

    def __hash__(self) -> int:
        return hash((self._current, tuple(sorted(self._keys))))

    def __repr__(self) -> str:
        return f"MasterKey(current={self._current!r}, ids={list(self.ids)!r})"


# --- the blob --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlobHeader:
    """What a blob says of itself in clear (and authenticates, as part of the associated data).

    `owner` is the object the secret belongs to (`Blueprint/<name>`: the vault refuses it to any
    other) and `created` when it was first stored (unix seconds: entries that no object refers to
    are collected only once no admission request that wrote them can still be in flight).
    Format version 1 blobs carry neither: their owner is "" (nobody's, usable by no reference).
    """

    version: int
    key_id: str
    created: int
    owner: str
    end: int  # where the nonce starts


def _header(key_id: str, owner: str, created: int) -> bytes:
    raw, who = key_id.encode("ascii"), owner.encode()
    return (bytes((FORMAT_VERSION, len(raw))) + raw + created.to_bytes(8, "big")
            + len(who).to_bytes(2, "big") + who)


def _associated_data(header: bytes, project: str, uuid: str) -> bytes:
    parts = [AAD_CONTEXT, header]
    for field in (project.encode(), uuid.encode()):
        parts += (len(field).to_bytes(2, "big"), field)
    return b"".join(parts)


def blob_header(blob: bytes) -> BlobHeader:
    """The clear header of a blob; a malformed one is a VaultError."""
    header = _parse_header(blob)
    if isinstance(header, str):
        raise VaultError(header)
    return header


def _parse_header(blob: bytes) -> BlobHeader | str:
    """The clear header of a blob, or why it is malformed."""
    version = blob[0] if blob else 0
    if version not in (1, FORMAT_VERSION) or len(blob) < 2:
        return f"not a vault blob of format version 1 or {FORMAT_VERSION}"
    end = 2 + blob[1]
    key_id = blob[2:end].decode("ascii", "replace")
    created, owner = 0, ""
    if version == FORMAT_VERSION:
        if len(blob) >= end + 10:
            created = int.from_bytes(blob[end:end + 8], "big")
            size = int.from_bytes(blob[end + 8:end + 10], "big")
            owner = blob[end + 10:end + 10 + size].decode("utf-8", "replace")
            end += 10 + size
        else:
            end = len(blob) + 1
    if len(blob) < end + NONCE_BYTES + TAG_BYTES:
        return "vault blob is truncated"
    return BlobHeader(version=version, key_id=key_id, created=created, owner=owner, end=end)


def blob_key_id(blob: bytes) -> str:
    """The id of the key that encrypted `blob` (read from its clear header)."""
    return blob_header(blob).key_id


def encrypt(keys: MasterKey, project: str, uuid: str, plaintext: bytes, owner: str = "",
            created: int | None = None) -> bytes:
    """Seal `plaintext` for (project, uuid, owner) under the keyring's current key, with a fresh nonce."""
    header = _header(keys.current_id, owner, int(time.time()) if created is None else created)
    aead = keys.aead(keys.current_id)
    assert aead is not None  # MasterKey guarantees the current key exists
    nonce = secrets.token_bytes(NONCE_BYTES)
    return header + nonce + aead.encrypt(nonce, plaintext, _associated_data(header, project, uuid))


def decrypt(keys: MasterKey, project: str, uuid: str, blob: bytes) -> bytes:
    """Open a blob sealed for (project, uuid); any tampering, move or wrong key is a VaultError."""
    where = f"secret {uuid} of project {project}"
    header = _parse_header(blob)
    if isinstance(header, str):
        raise VaultError(f"{where}: {header}")
    aead = keys.aead(header.key_id)
    if aead is None:
        raise VaultError(f"{where} is encrypted with master key {header.key_id}, which this vault does not hold "
                         f"(it holds {list(keys.ids)}); reload the master key Secret")
    nonce = blob[header.end:header.end + NONCE_BYTES]
    plaintext: bytes | None = None
    # Raised below, outside the suppressing block, so that no exception context is attached.
    with contextlib.suppress(InvalidTag):
        plaintext = aead.decrypt(nonce, blob[header.end + NONCE_BYTES:],
                                 _associated_data(blob[:header.end], project, uuid))
    if plaintext is None:
        raise VaultError(f"{where} was refused: its ciphertext was altered, belongs to another uuid or project, "
                         f"or master key {header.key_id} is not the key that encrypted it")
    return plaintext


# --- the cluster copy ------------------------------------------------------------------------


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


_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


async def _backoff(attempt: int) -> None:
    """A short, growing, jittered pause before retrying a conflict, so that racers spread out."""
    await asyncio.sleep(0.02 * (2 ** attempt) * (0.5 + secrets.randbelow(1000) / 1000))


def vault_secret_name(project: str) -> str:
    """`stead-vault-<project>`; a project that is no valid Secret name (upper case, `_`) gets a hash suffix,
    and so does a project named `key`, whose plain name would be the master key Secret's."""
    if _DNS_SUBDOMAIN.fullmatch(project) and SECRET_PREFIX + project != KEY_SECRET:
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
        data = {uuid: _b64(blob) for uuid, blob in blobs.items()}
        patch = {"metadata": {"labels": self._labels(project)}, "data": data}
        for attempt in range(ATTEMPTS):
            try:
                await self._kube.request("PATCH", self._path(project), patch,
                                         content_type="application/merge-patch+json")
                return
            except ApiError as error:
                if error.status == 409:  # a conflicting write: patch again, after a short pause
                    await _backoff(attempt)
                    continue
                if error.status != 404:
                    raise self._failed(project, "save", error) from error
            except _TRANSPORT_ERRORS as error:
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
            except _TRANSPORT_ERRORS as error:
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
        except _TRANSPORT_ERRORS as error:
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
        except _TRANSPORT_ERRORS as error:
            raise self._failed(project, "delete of the empty Secret", error) from error

    async def load(self, project: str) -> dict[str, bytes]:
        """Every uuid and blob of a project ({} when it has no Secret). Undecodable entries load as b""."""
        try:
            secret = await self._kube.request("GET", self._path(project))
        except ApiError as error:
            if error.status == 404:
                return {}
            raise self._failed(project, "load", error) from error
        except _TRANSPORT_ERRORS as error:
            raise self._failed(project, "load", error) from error
        data: dict[str, str] = secret.get("data") or {}
        return {uuid: _unb64(encoded) or b"" for uuid, encoded in data.items() if _is_uuid(uuid)}

    async def projects(self) -> list[str]:
        """The projects that have a cluster copy (for an operator that lost its whole volume)."""
        try:
            listing = await self._kube.request("GET", self._path(), params={"labelSelector": f"{VAULT_LABEL}=true"})
        except (ApiError, *_TRANSPORT_ERRORS) as error:
            raise ClusterCopyError(f"listing the vault copies in namespace {self.namespace} failed: "
                                   f"{error}") from error
        found = {((item.get("metadata") or {}).get("labels") or {}).get(PROJECT_LABEL)
                 for item in listing.get("items") or []}
        return sorted(p for p in found if p)


# --- the master key Secret -------------------------------------------------------------------


def _key_path(namespace: str, name: str | None = None) -> str:
    path = f"/api/v1/namespaces/{namespace}/secrets"
    return path if name is None else f"{path}/{name}"


def _key_failed(namespace: str, name: str, action: str, error: Exception) -> VaultError:
    detail = f"{error.status} {error.message}" if isinstance(error, ApiError) else type(error).__name__
    return VaultError(f"master key Secret {namespace}/{name}: {action} failed: {detail}")


async def _read_key_secret(kube: Requester, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await kube.request("GET", _key_path(namespace, name))
    except ApiError as error:
        if error.status == 404:
            return None
        raise _key_failed(namespace, name, "read", error) from error
    except _TRANSPORT_ERRORS as error:
        raise _key_failed(namespace, name, "read", error) from error


def _parse_key_secret(secret: dict[str, Any], namespace: str, name: str) -> MasterKey:
    try:
        return MasterKey.from_secret_data(secret.get("data") or {})
    except VaultError as error:
        raise VaultError(f"master key Secret {namespace}/{name}: {error}") from None


async def load_or_create_master_key(kube: Requester, namespace: str, name: str = KEY_SECRET) -> MasterKey:
    """The vault's keyring from its Secret, created with one random key when absent.

    Two replicas starting together may both find it absent: the loser's create gets 409 and
    it reads the winner's key, so every replica ends up with the same one.
    """
    for _ in range(ATTEMPTS):
        secret = await _read_key_secret(kube, namespace, name)
        if secret is not None:
            return _parse_key_secret(secret, namespace, name)
        keys = MasterKey.generate()
        try:
            await kube.request("POST", _key_path(namespace), {
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "labels": {**PART_OF, KEY_LABEL: "true"}},
                "data": keys.to_secret_data(),
            })
            return keys
        except ApiError as error:
            if error.status != 409:
                raise _key_failed(namespace, name, "create", error) from error
        except _TRANSPORT_ERRORS as error:
            raise _key_failed(namespace, name, "create", error) from error
    raise VaultError(f"master key Secret {namespace}/{name}: still absent after {ATTEMPTS} create races")


async def _update_key_secret(
    kube: Requester, namespace: str, name: str, change: Callable[[MasterKey], MasterKey], action: str,
) -> MasterKey:
    """Read, change and write back the keyring; optimistic concurrency (resourceVersion), 409 retries."""
    for attempt in range(ATTEMPTS):
        secret = await _read_key_secret(kube, namespace, name)
        if secret is None:
            raise VaultError(f"master key Secret {namespace}/{name} does not exist; {action} needs it")
        current = _parse_key_secret(secret, namespace, name)
        updated = change(current)
        data: dict[str, str | None] = {field: None for field in current.to_secret_data()}
        data.update(updated.to_secret_data())
        patch = {"metadata": {"resourceVersion": (secret.get("metadata") or {}).get("resourceVersion")},
                 "data": data}
        try:
            await kube.request("PATCH", _key_path(namespace, name), patch,
                               content_type="application/merge-patch+json")
            return updated
        except ApiError as error:
            if error.status != 409:  # 409: changed since our read, start again from a fresh read
                raise _key_failed(namespace, name, action, error) from error
            await _backoff(attempt)
        except _TRANSPORT_ERRORS as error:
            raise _key_failed(namespace, name, action, error) from error
    raise VaultError(f"master key Secret {namespace}/{name}: {action} still conflicting after {ATTEMPTS} attempts")


async def rotate_master_key(kube: Requester, namespace: str, name: str = KEY_SECRET) -> MasterKey:
    """Add a new random key to the Secret and make it current; the previous keys stay.

    Then give the result to `Vault.rotate` on every replica, and retire the old key when done.
    """
    return await _update_key_secret(kube, namespace, name, lambda keys: keys.with_current(MasterKey.generate()),
                                    "rotation")


async def retire_master_key(kube: Requester, namespace: str, key_id: str, name: str = KEY_SECRET) -> MasterKey:
    """Remove a non-current key from the Secret: only once no blob of any replica still uses it."""
    return await _update_key_secret(kube, namespace, name, lambda keys: keys.without(key_id), "retiring a key")


# --- the vault -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    """What `Vault.recover` did for one project."""

    restored: int  # blobs copied from the cluster into LMDB (new or newer there)
    repaired: int  # blobs only LMDB had (or only LMDB had intact), written back to the cluster
    refused: tuple[str, ...]  # uuids in the cluster copy that do not decrypt for this project


@dataclass(frozen=True)
class Entry:
    """One secret as the vault lists it: no value, only who stored it and when."""

    uuid: str
    owner: str
    created: int  # unix seconds; 0 for a version 1 blob


def _is_uuid(uuid: str) -> bool:
    try:
        return str(uuidlib.UUID(uuid)) == uuid
    except ValueError:
        return False


def _check(project: str, uuid: str | None = None) -> None:
    if not _PROJECT.fullmatch(project):
        raise VaultError(f"invalid project name {project!r}: want a namespace name or label value")
    if uuid is not None and not _is_uuid(uuid):
        raise VaultError(f"invalid secret reference {uuid!r}: want a lower-case uuid")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(encoded: str) -> bytes | None:
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None


class Vault:
    """Secrets of every project this operator owns, in LMDB, written through to a ClusterCopy.

    Reads (`get`, `uuids`, `projects`, `masker`) are synchronous: LMDB and AES-GCM only.
    Writes (`put`, `delete`, `rotate`, `recover`) are coroutines: they write the cluster copy
    first and LMDB after it, so a failed cluster write changes nothing, and LMDB never holds
    something the cluster copy lacks.
    """

    def __init__(self, store: LocalStore, keys: MasterKey, cluster: ClusterCopy) -> None:
        self._env, self._db = store.open_db(VAULT_DB)
        self._keys = keys
        self._cluster = cluster
        self._locks: dict[str, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"Vault(current_key={self._keys.current_id!r})"

    @property
    def keys(self) -> MasterKey:
        return self._keys

    def _lock(self, project: str) -> asyncio.Lock:
        return self._locks.setdefault(project, asyncio.Lock())

    # synchronous LMDB core: no await anywhere below until the coroutines

    def _items(self, project: str) -> list[tuple[str, bytes]]:
        """A project's (uuid, blob) pairs, read in one transaction that is closed on return."""
        prefix = f"{project}/".encode()
        items: list[tuple[str, bytes]] = []
        with self._env.begin(db=self._db) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return items
            for raw_key, raw in cursor:
                if not bytes(raw_key).startswith(prefix):
                    break
                items.append((bytes(raw_key)[len(prefix):].decode(), bytes(raw)))
        return items

    def _write(self, project: str, blobs: Mapping[str, bytes]) -> None:
        """Store blobs of one project in one LMDB transaction (all or none)."""
        with self._env.begin(db=self._db, write=True) as txn:
            for uuid, blob in blobs.items():
                txn.put(f"{project}/{uuid}".encode(), blob)

    def _blob(self, project: str, uuid: str) -> bytes | None:
        with self._env.begin(db=self._db) as txn:
            raw = txn.get(f"{project}/{uuid}".encode())
        return None if raw is None else bytes(raw)

    def _decrypt_str(self, project: str, uuid: str, blob: bytes) -> str:
        plaintext = decrypt(self._keys, project, uuid, blob)
        value: str | None = None
        with contextlib.suppress(UnicodeDecodeError):  # it carries the bytes: raise our own, below
            value = plaintext.decode("utf-8")
        if value is None:
            raise VaultError(f"secret {uuid} of project {project} is not UTF-8 text")
        return value

    def get(self, project: str, uuid: str, owner: str | None = None) -> str:
        """The value of a secret. Missing, tampered, moved or undecryptable: VaultError.

        With `owner`, a secret stored by any other object is refused with the same message as a
        missing one: a reference tells nothing about secrets that are not its object's.
        """
        _check(project, uuid)
        blob = self._blob(project, uuid)
        if owner is not None and (blob is None or blob_header(blob).owner != owner):
            raise VaultError(f"secret {uuid} is not one of {owner}'s in namespace {project}")
        if blob is None:
            raise VaultError(f"no secret {uuid} in project {project} in this operator's store "
                             "(if the project moved here, recover it from its cluster copy)")
        return self._decrypt_str(project, uuid, blob)

    def owner_of(self, project: str, uuid: str) -> str | None:
        """Who stored a secret ("" for a version 1 blob), or None when the project has no such uuid."""
        _check(project, uuid)
        blob = self._blob(project, uuid)
        return None if blob is None else blob_header(blob).owner

    def entries(self, project: str) -> list[Entry]:
        """A project's secrets as (uuid, owner, created), without decrypting any."""
        _check(project)
        return [Entry(uuid, header.owner, header.created)
                for uuid, header in ((u, blob_header(b)) for u, b in self._items(project))]

    def find(self, project: str, owner: str, value: str) -> str | None:
        """The uuid of a secret of `owner` holding exactly `value`, if there is one.

        So that a GitOps tool applying the same inline value again reuses the entry instead of
        adding one per apply. Every candidate is compared in constant time.
        """
        _check(project)
        wanted = value.encode("utf-8", "surrogatepass")
        found: str | None = None
        for uuid, blob in self._items(project):
            if blob_header(blob).owner != owner:
                continue
            try:
                plaintext = decrypt(self._keys, project, uuid, blob)
            except VaultError:
                continue
            if hmac.compare_digest(plaintext, wanted) and found is None:
                found = uuid
        return found

    def uuids(self, project: str) -> list[str]:
        """The uuids of a project's secrets, sorted."""
        _check(project)
        return [uuid for uuid, _ in self._items(project)]

    def projects(self) -> list[str]:
        """The projects with at least one secret in this store, sorted."""
        found: list[str] = []
        with self._env.begin(db=self._db) as txn:
            cursor = txn.cursor()
            positioned = cursor.first()
            while positioned:
                project = bytes(cursor.key()).decode().partition("/")[0]
                found.append(project)
                # "0" sorts right after "/": jump over the rest of this project's keys.
                positioned = cursor.set_range(f"{project}0".encode())
        return found

    def masker(self, project: str) -> Masker:
        """A Masker of every secret of a project (for a run's output). Undecryptable ones are skipped:
        they cannot be handed to a run either."""
        values: list[str] = []
        for uuid, blob in self._items(project):
            try:
                values.append(self._decrypt_str(project, uuid, blob))
            except VaultError:
                continue
        return Masker(values)

    # asynchronous writes: cluster copy first, then one LMDB transaction

    async def put(self, project: str, value: str, owner: str = "") -> str:
        """Encrypt and store a new secret of `owner`; its new uuid is the only thing to keep elsewhere."""
        _check(project)
        plaintext: bytes | None = None
        with contextlib.suppress(UnicodeEncodeError):  # it carries the whole string: raise our own, below
            plaintext = value.encode("utf-8")
        if plaintext is None:
            raise VaultError(f"a secret of project {project} is not encodable as UTF-8 (lone surrogate)")
        uuid = str(uuidlib.uuid4())
        async with self._lock(project):
            blob = encrypt(self._keys, project, uuid, plaintext, owner)
            await self._cluster.save(project, uuid, blob)
            self._write(project, {uuid: blob})
        return uuid

    async def delete(self, project: str, uuid: str, owner: str | None = None) -> bool:
        """Forget a secret in both copies; True if it was there. Deleting an absent one is not an error.

        With `owner`, a secret stored by another object is left alone (and False returned): an
        object that names another's uuid cannot delete it.
        """
        _check(project, uuid)
        async with self._lock(project):
            blob = self._blob(project, uuid)
            if owner is not None and (blob is None or blob_header(blob).owner != owner):
                return False
            await self._cluster.remove(project, uuid)
            with self._env.begin(db=self._db, write=True) as txn:
                txn.delete(f"{project}/{uuid}".encode())
            return blob is not None

    async def rotate(self, new_keys: MasterKey) -> int:
        """Make `new_keys`' current key this vault's current key and re-encrypt every secret under it.

        The vault keeps the keys it had (blobs still under them keep decrypting). Project by
        project: re-encrypt in memory, write the cluster copy (one patch), then LMDB (one
        transaction), so each project is rotated in both copies or in neither. Interrupted
        (a cluster error), it raises; calling it again with the same keys finishes the work.
        Returns how many secrets were re-encrypted. Secrets that no held key decrypts cannot be
        rotated: they are left as they are and named in the VaultError raised at the end.
        """
        keys = self._keys.with_current(new_keys)
        self._keys = keys  # from here on, new secrets are encrypted with the new key
        count = 0
        stuck: list[str] = []
        for project in self.projects():
            async with self._lock(project):
                fresh: dict[str, bytes] = {}
                for uuid, blob in self._items(project):
                    try:
                        header = blob_header(blob)
                        if header.key_id == keys.current_id:
                            continue
                        plaintext = decrypt(keys, project, uuid, blob)
                    except VaultError:
                        stuck.append(f"{project}/{uuid}")
                        continue
                    fresh[uuid] = encrypt(keys, project, uuid, plaintext, header.owner, header.created or None)
                if fresh:
                    await self._cluster.save_many(project, fresh)
                    self._write(project, fresh)
                    count += len(fresh)
        if stuck:
            raise VaultError(f"rotated {count} secrets; {len(stuck)} do not decrypt with any held key and keep "
                             f"their old encryption: {', '.join(stuck[:20])}")
        return count

    async def recover(self, project: str) -> Recovery:
        """Bring LMDB and the cluster copy of a project back to the same full set of secrets.

        For an operator that lost its volume or a replica that took the project over: every
        blob of the cluster copy that decrypts for its uuid and this project is stored in LMDB.
        Nothing is deleted: a blob only LMDB has (say, the project's Secret was deleted by
        hand) is written back to the cluster. When both hold a uuid and both decrypt, the
        cluster's wins (it is written first, so it is never older).
        """
        _check(project)
        async with self._lock(project):
            remote = await self._cluster.load(project)
            local = dict(self._items(project))
            restore: dict[str, bytes] = {}
            repair: dict[str, bytes] = {}
            refused: list[str] = []
            for uuid in sorted(set(remote) | set(local)):
                theirs, ours = remote.get(uuid), local.get(uuid)
                if theirs is not None and self._opens(project, uuid, theirs):
                    if theirs != ours:
                        restore[uuid] = theirs
                    continue
                if theirs is not None:
                    refused.append(uuid)
                if ours is not None and self._opens(project, uuid, ours):
                    repair[uuid] = ours
            if repair:
                await self._cluster.save_many(project, repair)
            self._write(project, restore)
        return Recovery(restored=len(restore), repaired=len(repair), refused=tuple(refused))

    def _opens(self, project: str, uuid: str, blob: bytes) -> bool:
        if not _is_uuid(uuid):
            return False
        try:
            decrypt(self._keys, project, uuid, blob)
        except VaultError:
            return False
        return True
