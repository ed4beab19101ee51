"""The operator's local store: one LMDB environment per operator process.

It keeps the objects that reached Provisioned (keyed by kind, namespace and name, with their
uid and generation), so that a restarted operator recognises finished work without redoing it
or writing to the API server. Later kinds keep their vault and workflow state in other named
databases of the same environment.

Commits do not fsync (`sync=False`): the store is a cache of what the API server already
holds. After a process crash the data are in the OS page cache and survive; after a machine
crash the worst case is that a few objects are re-checked, which writes nothing when their
status is already right. That trade makes a commit cost microseconds instead of a disk flush.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from operators.runtime.core.pipeline import StoredRecord
from pipelines.paths import PRIVATE_FILE, private_lmdb

OBJECTS_DB = b"objects"


def object_key(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


def key_namespace(key: str) -> str:
    """The namespace in an `object_key` ("" for a cluster-scoped object's)."""
    return key.split("/", 2)[1]


class LocalStore:
    """Provisioned objects in LMDB. Not thread-safe by contract: one event loop uses it."""

    def __init__(self, path: Path, map_size: int = 1 << 30, max_dbs: int = 16, readonly: bool = False) -> None:
        """Open (or create) the store; `readonly` lets another process (a test, a debug tool) look in."""
        if not readonly:  # the operator's alone (0700, files 0600): it holds every project's objects
            path.parent.mkdir(parents=True, exist_ok=True)
            private_lmdb(path)
        self.path = path
        self._readonly = readonly
        self._env = lmdb.open(
            str(path), map_size=map_size, max_dbs=max_dbs, sync=False, metasync=False, subdir=True,
            readonly=readonly, mode=PRIVATE_FILE,
        )
        self._objects = self._env.open_db(OBJECTS_DB, create=not readonly)

    def open_db(self, name: bytes) -> tuple[lmdb.Environment, Any]:
        """The environment and a named database in it, for a module that keeps its own records here.

        Sharing the one environment (rather than a second LMDB file) keeps one volume, one map size
        and one place to back up; the caller owns its database's keys and transactions.
        """
        return self._env, self._env.open_db(name, create=not self._readonly)

    def close(self) -> None:
        if not self._readonly:
            self._env.sync(True)
        self._env.close()

    def get(self, key: str) -> StoredRecord | None:
        with self._env.begin(db=self._objects) as txn:
            raw = txn.get(key.encode())
        return None if raw is None else _decode(raw)

    def put(self, key: str, record: StoredRecord) -> None:
        value = json.dumps(
            {"uid": record.uid, "generation": record.generation, "spec": record.spec, "status": record.status},
            separators=(",", ":"),
        ).encode()
        with self._env.begin(db=self._objects, write=True) as txn:
            txn.put(key.encode(), value)

    def delete(self, key: str, uid: str | None = None) -> bool:
        """Remove a record; with `uid`, only if it belongs to that incarnation of the object."""
        with self._env.begin(db=self._objects, write=True) as txn:
            raw = txn.get(key.encode())
            if raw is None or (uid is not None and _decode(raw).uid != uid):
                return False
            return bool(txn.delete(key.encode()))

    def items(self, kind: str) -> Iterator[tuple[str, StoredRecord]]:
        """Every record of one kind, in key order."""
        prefix = f"{kind}/".encode()
        with self._env.begin(db=self._objects) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return
            for raw_key, raw in cursor:
                if not bytes(raw_key).startswith(prefix):
                    break
                yield bytes(raw_key).decode(), _decode(raw)

    def count(self, kind: str) -> int:
        return sum(1 for _ in self.items(kind))


def _decode(raw: bytes) -> StoredRecord:
    data: dict[str, Any] = json.loads(raw)
    return StoredRecord(
        uid=data["uid"], generation=data["generation"], spec=data["spec"], status=data["status"]
    )
