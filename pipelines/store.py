"""The run store: one LMDB environment per run, in the run's directory, keyed by run uid.

One environment per run rather than one for all: LMDB tells its readers apart by pid, and the
operator's replicas, each in a Pod of its own, are all pid 1 (their runners have small pids too)
on the runs volume they share with sharding; in one environment they took each other for the same
process and all but the first failed every transaction. A run is handled by one replica at a time
(its project's holder), so an environment is only ever used from one pid namespace.

Three named databases, every key prefixed with ``<uid>/`` so that runs never collide and one
run's keys are a contiguous range:

- ``runs``:  ``<uid>`` -> the run record (phase, total, times, message, runner pid);
- ``steps``: ``<uid>/<step@target>`` -> the step record (state, times, attempts, exit code,
  masked output tail, variables set, sequence number);
- ``done``:  ``<uid>/<step@target>`` -> empty: the Luigi Target of a finished instance. It is
  written in the same transaction as the "success" record and the variables, so a crash leaves
  either both or neither: a restarted run skips exactly the instances whose effects were recorded.

Completion checks are single B-tree lookups in ``done`` (no JSON decoding), which keeps Luigi's
per-task `complete()` calls O(1) in the size of the run.

Commits do not fsync by default: a killed runner loses nothing (the pages are in the OS cache);
only a machine crash can lose the last commits, and then the worst case is that an instance whose
effect had happened runs again. `durable=True` trades a disk flush per commit for that case.

LMDB must not be opened twice in one process, so environments are shared per path (`open_store`
keeps one for the process's life: the runner's), and a reader of many runs (the operator) borrows
one only while it reads (`borrowed_store`); the operator's process and the runner's process may
each hold one on the same directory.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from pipelines.paths import PRIVATE_FILE, private_lmdb

RUNS_DB = b"runs"
STEPS_DB = b"steps"
DONE_DB = b"done"

_OPEN: dict[str, RunStore] = {}
_OPEN_LOCK = threading.Lock()


def open_store(path: Path, durable: bool = False) -> RunStore:
    """The process-wide store of `path`, opened (and created) on first use.

    Readers open it writable too: LMDB readers never block the writer, and a single handle per
    process is what LMDB requires.
    """
    resolved = str(path.resolve())
    with _OPEN_LOCK:
        store = _OPEN.get(resolved)
        if store is None or store.closed:
            store = RunStore(path, durable=durable)
            _OPEN[resolved] = store
        _KEPT.add(resolved)
        return store


_BORROWED: dict[str, int] = {}
"""Readers of a borrowed environment, by path: the last one closes it (unless `open_store` kept it)."""
_KEPT: set[str] = set()


@contextlib.contextmanager
def borrowed_store(path: Path) -> Iterator[RunStore]:
    """The store of `path` for one read: the process's own handle when it has one, else one opened
    here and closed when its last borrower is done, so that a process reading many runs does not hold
    an environment (two descriptors and a map) for each run it ever read."""
    resolved = str(path.resolve())
    with _OPEN_LOCK:
        store = _OPEN.get(resolved)
        if store is None or store.closed:
            store = RunStore(path)
            _OPEN[resolved] = store
        _BORROWED[resolved] = _BORROWED.get(resolved, 0) + 1
    try:
        yield store
    finally:
        with _OPEN_LOCK:
            _BORROWED[resolved] -= 1
            last = not _BORROWED[resolved] and resolved not in _KEPT
            if not _BORROWED[resolved]:
                del _BORROWED[resolved]
            if last:
                del _OPEN[resolved]
        if last:
            store.close()


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


class RunStore:
    def __init__(self, path: Path, readonly: bool = False, durable: bool = False, map_size: int = 4 << 30) -> None:
        if not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
            private_lmdb(path)
        self.path = path
        self.readonly = readonly
        self.closed = False
        self._env = lmdb.open(
            str(path), map_size=map_size, max_dbs=8, subdir=True, readonly=readonly,
            sync=durable, metasync=durable, lock=True, mode=PRIVATE_FILE,
        )
        create = not readonly
        self._runs = self._env.open_db(RUNS_DB, create=create)
        self._steps = self._env.open_db(STEPS_DB, create=create)
        self._done = self._env.open_db(DONE_DB, create=create)

    def close(self) -> None:
        with _OPEN_LOCK:
            for key, store in list(_OPEN.items()):
                if store is self:
                    del _OPEN[key]
                    _KEPT.discard(key)
        if not self.readonly:
            self._env.sync(True)
        self._env.close()
        self.closed = True

    # -- reads -------------------------------------------------------------------------------

    def is_done(self, uid: str, key: str) -> bool:
        with self._env.begin(db=self._done) as txn:
            return txn.get(f"{uid}/{key}".encode()) is not None

    def run(self, uid: str) -> dict[str, Any] | None:
        with self._env.begin(db=self._runs) as txn:
            raw = txn.get(uid.encode())
        return None if raw is None else dict(json.loads(raw))

    def step(self, uid: str, key: str) -> dict[str, Any] | None:
        with self._env.begin(db=self._steps) as txn:
            raw = txn.get(f"{uid}/{key}".encode())
        return None if raw is None else dict(json.loads(raw))

    def steps(self, uid: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every step record of a run, in key order (one read transaction)."""
        prefix = f"{uid}/".encode()
        with self._env.begin(db=self._steps) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return
            for raw_key, raw in cursor:
                key = bytes(raw_key)
                if not key.startswith(prefix):
                    break
                yield key[len(prefix):].decode(), json.loads(raw)

    def run_ids(self) -> list[str]:
        with self._env.begin(db=self._runs) as txn:
            return [bytes(k).decode() for k, _ in txn.cursor()]

    # -- writes ------------------------------------------------------------------------------

    def put_run(self, uid: str, record: dict[str, Any]) -> None:
        with self._env.begin(db=self._runs, write=True) as txn:
            txn.put(uid.encode(), _dumps(record))

    def put_step(self, uid: str, key: str, record: dict[str, Any], done: bool = False) -> None:
        """Write a step record; with `done`, also its completion Target, atomically."""
        k = f"{uid}/{key}".encode()
        with self._env.begin(write=True) as txn:
            txn.put(k, _dumps(record), db=self._steps)
            if done:
                txn.put(k, b"", db=self._done)

    def put_steps(self, uid: str, records: dict[str, dict[str, Any]]) -> None:
        """Many step records in one transaction (marking the rest of a run aborted or skipped)."""
        with self._env.begin(db=self._steps, write=True) as txn:
            for key, record in records.items():
                txn.put(f"{uid}/{key}".encode(), _dumps(record))

    def mark_done(self, uid: str, key: str) -> None:
        with self._env.begin(db=self._done, write=True) as txn:
            txn.put(f"{uid}/{key}".encode(), b"")

    def delete_run(self, uid: str) -> int:
        """Forget a run (its records and Targets); returns how many keys went."""
        prefix = f"{uid}/".encode()
        removed = 0
        with self._env.begin(write=True) as txn:
            for db in (self._steps, self._done):
                cursor = txn.cursor(db=db)
                if cursor.set_range(prefix):
                    while bytes(cursor.key()).startswith(prefix):
                        cursor.delete()
                        removed += 1
                        if not cursor.key():
                            break
            if txn.delete(uid.encode(), db=self._runs):
                removed += 1
        return removed
