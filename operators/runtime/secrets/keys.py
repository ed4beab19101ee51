"""Master keys: the keys themselves, the Secret that holds them (created, rotated, retired), and
the constants and errors of the vault."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import re
import secrets
import uuid as uuidlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from operators.runtime.kube.client import ApiError, Requester

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
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class VaultError(Exception):
    """A vault operation failed. The message names projects, uuids and key ids, never a value or key."""


class ClusterCopyError(VaultError):
    """The cluster copy could not be read or written; nothing was changed locally."""


TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


async def backoff(attempt: int) -> None:
    """A short, growing, jittered pause before retrying a conflict, so that racers spread out."""
    await asyncio.sleep(0.02 * (2 ** attempt) * (0.5 + secrets.randbelow(1000) / 1000))


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
        data = {CURRENT_FIELD: b64(self._current.encode())}
        data.update({KEY_FIELD_PREFIX + key_id: b64(key) for key_id, key in self._keys.items()})
        return data

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str]) -> MasterKey:
        """Parse the key Secret's `data`; `current` may be left out when there is exactly one key."""
        keys: dict[str, bytes] = {}
        for field, encoded in data.items():
            if field.startswith(KEY_FIELD_PREFIX):
                key_id = field.removeprefix(KEY_FIELD_PREFIX)
                decoded = unb64(encoded)
                if decoded is None:
                    raise VaultError(f"master key {key_id} is not valid base64")
                keys[key_id] = decoded
        if not keys:
            raise VaultError(f"the master key Secret holds no `{KEY_FIELD_PREFIX}<id>` entry")
        if CURRENT_FIELD in data:
            raw_current = unb64(data[CURRENT_FIELD])
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
    except TRANSPORT_ERRORS as error:
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
        except TRANSPORT_ERRORS as error:
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
            await backoff(attempt)
        except TRANSPORT_ERRORS as error:
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


def is_uuid(uuid: str) -> bool:
    """A secret reference is a canonical, lower-case uuid: anything else is refused, not normalised."""
    try:
        return str(uuidlib.UUID(uuid)) == uuid
    except ValueError:
        return False


def check_project(project: str, uuid: str | None = None) -> None:
    """Refuse a project (and reference) that could not name a Secret's label or key: before any I/O."""
    if not _PROJECT.fullmatch(project):
        raise VaultError(f"invalid project name {project!r}: want a namespace name or label value")
    if uuid is not None and not is_uuid(uuid):
        raise VaultError(f"invalid secret reference {uuid!r}: want a lower-case uuid")


def b64(raw: bytes) -> str:
    """Bytes as the text a Secret's data holds."""
    return base64.b64encode(raw).decode("ascii")


def unb64(encoded: str) -> bytes | None:
    """A Secret's data back to bytes, None when it is not base64 (a damaged copy, reported by the caller)."""
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
