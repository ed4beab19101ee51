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

from operators.runtime.secrets.blob import BlobHeader, blob_header, blob_key_id, decrypt, encrypt
from operators.runtime.secrets.copies import ClusterCopy, MemoryClusterCopy, SecretClusterCopy, vault_secret_name
from operators.runtime.secrets.core import Entry, Recovery, Vault, open_vault
from operators.runtime.secrets.keys import (
    AAD_CONTEXT,
    ATTEMPTS,
    CURRENT_FIELD,
    FORMAT_VERSION,
    KEY_BYTES,
    KEY_FIELD_PREFIX,
    KEY_LABEL,
    KEY_SECRET,
    NONCE_BYTES,
    PART_OF,
    SECRET_PREFIX,
    TAG_BYTES,
    VAULT_DB,
    VAULT_LABEL,
    ClusterCopyError,
    MasterKey,
    VaultError,
    load_or_create_master_key,
    retire_master_key,
    rotate_master_key,
)

__all__ = [
    "AAD_CONTEXT",
    "ATTEMPTS",
    "CURRENT_FIELD",
    "FORMAT_VERSION",
    "KEY_BYTES",
    "KEY_FIELD_PREFIX",
    "KEY_LABEL",
    "KEY_SECRET",
    "NONCE_BYTES",
    "PART_OF",
    "SECRET_PREFIX",
    "TAG_BYTES",
    "VAULT_DB",
    "VAULT_LABEL",
    "BlobHeader",
    "ClusterCopy",
    "ClusterCopyError",
    "Entry",
    "MasterKey",
    "MemoryClusterCopy",
    "Recovery",
    "SecretClusterCopy",
    "Vault",
    "VaultError",
    "blob_header",
    "blob_key_id",
    "decrypt",
    "encrypt",
    "load_or_create_master_key",
    "open_vault",
    "retire_master_key",
    "rotate_master_key",
    "vault_secret_name",
]
