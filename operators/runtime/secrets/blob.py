"""The blob: one encrypted value with its authenticated header (format in the package docstring)."""

from __future__ import annotations

import contextlib
import secrets
import time
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag

from operators.runtime.secrets.keys import AAD_CONTEXT, FORMAT_VERSION, NONCE_BYTES, TAG_BYTES, MasterKey, VaultError


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
