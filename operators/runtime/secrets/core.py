"""`Vault`: the entries of each project in LMDB, written through a cluster copy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid as uuidlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from operators.runtime.core.store import LocalStore
from operators.runtime.kube.client import ApiError, Requester
from operators.runtime.secrets.blob import blob_header, decrypt, encrypt
from operators.runtime.secrets.copies import ClusterCopy, SecretClusterCopy
from operators.runtime.secrets.keys import (
    VAULT_DB,
    MasterKey,
    VaultError,
    check_project,
    is_uuid,
    load_or_create_master_key,
)
from pipelines.masking import Masker

log = logging.getLogger(__name__)


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
        check_project(project, uuid)
        blob = self._blob(project, uuid)
        if owner is not None and (blob is None or blob_header(blob).owner != owner):
            raise VaultError(f"secret {uuid} is not one of {owner}'s in namespace {project}")
        if blob is None:
            raise VaultError(f"no secret {uuid} in project {project} in this operator's store "
                             "(if the project moved here, recover it from its cluster copy)")
        return self._decrypt_str(project, uuid, blob)

    async def fetch(self, project: str, uuids: Collection[str]) -> int:
        """Copy into LMDB the entries among `uuids` that LMDB lacks and the cluster copy holds (and
        that decrypt there, for this project and uuid); how many came. Reads the cluster copy only.

        With several replicas an entry is written by whichever replica served the admission
        request (into its LMDB and the cluster copy), so another replica's LMDB may lack it: its
        validating webhook, and the project's holder when a run opens it, read it from the cluster
        copy here (issue 25, finding 7). Nothing is written back, so a replica that does not hold
        the project changes nothing of it.
        """
        check_project(project)
        missing = {uuid for uuid in uuids if is_uuid(uuid) and self._blob(project, uuid) is None}
        if not missing:
            return 0
        async with self._lock(project):
            remote = await self._cluster.load(project)
            found = {uuid: remote[uuid] for uuid in missing if uuid in remote
                     and self._blob(project, uuid) is None and self._opens(project, uuid, remote[uuid])}
            self._write(project, found)
        return len(found)

    async def refreshed(self, project: str, uuid: str, owner: str | None = None) -> str:
        """`get`, after `fetch`ing the entry when this store lacks it."""
        check_project(project, uuid)
        await self.fetch(project, [uuid])
        return self.get(project, uuid, owner)

    def owner_of(self, project: str, uuid: str) -> str | None:
        """Who stored a secret ("" for a version 1 blob), or None when the project has no such uuid."""
        check_project(project, uuid)
        blob = self._blob(project, uuid)
        return None if blob is None else blob_header(blob).owner

    def entries(self, project: str) -> list[Entry]:
        """A project's secrets as (uuid, owner, created), without decrypting any."""
        check_project(project)
        return [Entry(uuid, header.owner, header.created)
                for uuid, header in ((u, blob_header(b)) for u, b in self._items(project))]

    def uuids(self, project: str) -> list[str]:
        """The uuids of a project's secrets, sorted."""
        check_project(project)
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

    def seal(self, project: str, value: str, owner: str = "") -> tuple[str, bytes]:
        """A new uuid and `value` encrypted for (project, uuid, owner), stored nowhere.

        What admission hands back instead of writing (issue 25, finding 2): the blob travels in
        the object, and only the object the API server stored brings it to the vault
        (`store_sealed`). A review that never becomes an object, forged or refused, leaves
        nothing behind, and its answer (a fresh uuid and a ciphertext under a fresh nonce) says
        nothing about what the vault holds.
        """
        check_project(project)
        plaintext: bytes | None = None
        with contextlib.suppress(UnicodeEncodeError):  # it carries the whole string: raise our own, below
            plaintext = value.encode("utf-8")
        if plaintext is None:
            raise VaultError(f"a secret of project {project} is not encodable as UTF-8 (lone surrogate)")
        uuid = str(uuidlib.uuid4())
        return uuid, encrypt(self._keys, project, uuid, plaintext, owner)

    def sealed_problem(self, project: str, uuid: str, blob: bytes, owner: str) -> str | None:
        """Why `blob` may not become entry `uuid` of `owner` in `project`, or None when it may.

        It must open for exactly this project and uuid (the associated data bind both), name
        `owner` in its authenticated header, and not replace another owner's entry. Messages
        name no value.
        """
        check_project(project, uuid)
        if not self._opens(project, uuid, blob):
            return (f"{uuid}: its sealed value does not open for namespace {project} (sealed for another "
                    "namespace or uuid, altered, or under a master key this operator no longer holds)")
        if blob_header(blob).owner != owner:
            return f"{uuid}: its sealed value is not {owner}'s"
        held = self._blob(project, uuid)
        if held is not None and blob_header(held).owner != owner:
            return f"{uuid}: is not {owner}'s"
        return None

    # asynchronous writes: cluster copy first, then one LMDB transaction

    async def put(self, project: str, value: str, owner: str = "") -> str:
        """Encrypt and store a new secret of `owner`; its new uuid is the only thing to keep elsewhere."""
        uuid, blob = self.seal(project, value, owner)
        async with self._lock(project):
            await self._cluster.save(project, uuid, blob)
            self._write(project, {uuid: blob})
        return uuid

    async def store_sealed(self, project: str, uuid: str, blob: bytes, owner: str) -> bool:
        """Keep a `seal`ed blob as entry `uuid` unless the vault (either copy) has it already; True
        if it was written. A blob `sealed_problem` refuses is a VaultError naming why."""
        await self.fetch(project, [uuid])
        async with self._lock(project):
            problem = self.sealed_problem(project, uuid, blob, owner)
            if problem is not None:
                raise VaultError(problem)
            if self._blob(project, uuid) is not None:
                return False
            await self._cluster.save(project, uuid, blob)
            self._write(project, {uuid: blob})
        return True

    async def delete(self, project: str, uuid: str, owner: str | None = None) -> bool:
        """Forget a secret in both copies; True if it was there. Deleting an absent one is not an error.

        With `owner`, a secret stored by another object is left alone (and False returned): an
        object that names another's uuid cannot delete it.
        """
        check_project(project, uuid)
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
        check_project(project)
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
        if not is_uuid(uuid):
            return False
        try:
            decrypt(self._keys, project, uuid, blob)
        except VaultError:
            return False
        return True


async def open_vault(kube: Requester, store: LocalStore, namespace: str) -> Vault:
    """The vault with its master key, and every project's secrets recovered from the cluster copy.

    Recovery at start-up is what makes a lost volume (or a project moving to this replica)
    lose no secret: the LMDB copy is the fast path, the per-project Secrets the durable one.
    """
    try:
        await kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": namespace}})
    except ApiError as error:
        if error.status not in (403, 409):  # exists, or we may not create namespaces (a chart made it)
            raise
    copy = SecretClusterCopy(kube, namespace)
    vault = Vault(store, await load_or_create_master_key(kube, namespace), copy)
    for project in await copy.projects():
        recovery = await vault.recover(project)
        if recovery.refused:
            log.warning("vault: %d secrets of project %s could not be decrypted", len(recovery.refused), project)
    return vault
