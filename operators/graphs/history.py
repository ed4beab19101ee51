"""History per node and task across an environment's GraphRuns (docs/graphs.md, "History").

A GraphRun's status shows one run, and goes with it; Fuel kept no history of a task on a node at all. Here
every task instance that ran (success, failure, aborted) is recorded once its run's status reports it: the
run, the graph type, the node, the task, its state, times, duration and attempts, why it failed, and for a
puppet task of a noop run what would have changed (`noop`: the count and the resources). `stead graph
history` and `GET /api/v1/clusters/<env>/history/` read it, newest first, filtered by node, task, type,
state or run, a page at a time, and as CSV.

**Bound** (what is kept): the last `PER_INSTANCE` entries of each task on each node (per graph type), and at
most `MAX_ENTRIES` entries per environment (the oldest go first). A noop entry lists at most
`RESOURCES_KEPT` resources (the count is exact).

**Where**: one LMDB environment per Stead environment, under the runs' state directory
(`graph-history/<namespace>/<environment>/<uid>`, the Environment's `metadata.uid`), beside the runs' own
files: the operator writes it, the API (in the operator's process or its workers) reads it. One per
environment rather than one for all: LMDB tells its users apart by pid, and a Stead environment's runs are
handled by one replica at a time (its project's holder), as `pipelines.store` explains for runs.

**Whose**: the namespace is the tenant boundary, and a namespace deleted and re-created may be someone
else's: an Environment of the same name there is another object (another uid), and its history starts
empty. Keying by uid holds even when the operator never saw the deletion (it was down), and no process
can read the old history through a handle it kept open: the writer drops the other uids' histories of the
name (`drop_others`, closing this process's handles) when it first records for a uid.

The entries' logic (`entries_from_records`, `to_csv`, paging tokens) is pure; `HistoryStore` is the LMDB part
(lmdb is imported when a store is opened: `stead graph history` formats entries without it).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.paths import PRIVATE_FILE, private_lmdb

if TYPE_CHECKING:
    import lmdb

HISTORY_DIR = "graph-history"
"""Under the runs' state directory: `<namespace>/<environment>/`, an LMDB environment."""
PER_INSTANCE = 20
"""Entries kept per (graph type, node, task): its last runs."""
MAX_ENTRIES = 20_000
"""Entries kept per environment, whatever its size (the oldest are dropped first)."""
RESOURCES_KEPT = 50
"""Resources a noop entry lists (puppet's would-change report; the count is exact)."""
MAX_PAGE = 1000
"""The most entries one page gives (the API's `limit`, the CLI's `--limit`)."""
FINISHED = ("success", "failure", "aborted")
"""The states of an instance that ran to an end: what the history records."""
CSV_COLUMNS = ("finished", "run", "type", "node", "task", "state", "duration", "attempts", "started",
               "wouldChange", "resources", "reason")
MAP_SIZE = 1 << 30
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_UID = re.compile(r"^[0-9A-Za-z][-0-9A-Za-z]{0,62}$")
_ENTRIES, _INSTANCES, _RECORDED = b"entries", b"instances", b"recorded"


@dataclass(frozen=True)
class HistoryEntry:
    """One task instance of one run, as it ended."""

    run: str
    run_uid: str
    step: str
    graph_type: str
    task: str
    node: str
    state: str
    started: str | None
    finished: str | None
    attempts: int
    duration: float | None = None
    """Seconds from start to end, to the millisecond (None when either is unknown)."""
    reason: str | None = None
    noop: Mapping[str, Any] | None = None
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        """The API's form (camelCase; `seq` is the entry's place, newest highest)."""
        out: dict[str, Any] = {
            "seq": self.seq, "run": self.run, "runUid": self.run_uid, "step": self.step, "type": self.graph_type,
            "task": self.task, "node": self.node or None, "state": self.state, "started": self.started,
            "finished": self.finished, "duration": self.duration, "attempts": self.attempts}
        if self.reason:
            out["reason"] = self.reason
        if self.noop is not None:
            out["noop"] = dict(self.noop)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryEntry:
        return cls(str(data["run"]), str(data.get("runUid") or ""), str(data.get("step") or ""),
                   str(data.get("type") or ""), str(data["task"]), str(data.get("node") or ""), str(data["state"]),
                   data.get("started"), data.get("finished"), int(data.get("attempts") or 0),
                   None if data.get("duration") is None else float(data["duration"]), data.get("reason"),
                   data.get("noop"), int(data.get("seq") or 0))


def duration(started: str | None, finished: str | None) -> float | None:
    """Seconds between two RFC 3339 times (None when one is missing or unreadable)."""
    if not started or not finished:
        return None
    try:
        begin = datetime.fromisoformat(started.replace("Z", "+00:00"))
        end = datetime.fromisoformat(finished.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round((end - begin).total_seconds(), 3)


def noop_report(details: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a step's details say would change (`pipelines.executors.ssh.noop`), bounded for keeping:
    `{wouldChange, resources (at most RESOURCES_KEPT), more}`; None when the step reported none."""
    report = (details or {}).get("noop")
    if not isinstance(report, Mapping):
        return None
    resources = [str(r)[:512] for r in report.get("resources") or [] if isinstance(r, str)]
    count = int(report.get("wouldChange") or 0)
    kept = resources[:RESOURCES_KEPT]
    return {"wouldChange": count, "resources": kept, "more": max(0, count - len(kept))}


def entries_from_records(run: str, run_uid: str, index: Mapping[str, Sequence[str]],
                         records: Mapping[str, Mapping[str, Any]],
                         planned: Mapping[str, Mapping[str, Any]]) -> list[HistoryEntry]:
    """The finished instances among a run's step records (`step id -> record`), as entries: those the plan
    ran (`planned[sid].state` is "planned"; skipped and structure instances are not work). `index` is the
    plan's `step id -> [task, node]`; a step id starts with its graph type's prefix (`output.instances`)."""
    from operators.runtime import utc_seconds

    found: list[HistoryEntry] = []
    for sid, record in records.items():
        state = str(record.get("state") or "")
        if state not in FINISHED or sid not in index or (planned.get(sid) or {}).get("state") != "planned":
            continue
        task, node = index[sid]
        raw = [str(record[k]) if record.get(k) else None for k in ("startedAt", "finishedAt")]
        times = [utc_seconds(t) if t else None for t in raw]
        reason = str(record.get("message") or "")[:1024] if state != "success" else None
        found.append(HistoryEntry(run, run_uid, sid, sid.split(":", 1)[0], str(task), str(node or ""), state,
                                  times[0], times[1], int(record.get("attempts") or 0), duration(*raw),
                                  reason or None, noop_report(record.get("details"))))
    return found


def encode_token(seq: int) -> str:
    """The paging token that continues after the entry `seq` (older ones)."""
    return f"s{seq}"


def decode_token(token: str) -> int:
    """The entry a token continues after (ValueError for one this module did not give)."""
    if not re.fullmatch(r"s[0-9]{1,18}", token):
        raise ValueError(f"not a continue token of this history: {token[:40]!r}")
    return int(token[1:])


def to_csv(entries: Iterable[HistoryEntry], header: bool = True) -> str:
    """Entries as CSV (`CSV_COLUMNS`, RFC 4180 quoting): a noop entry's resources are `;`-separated."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if header:
        writer.writerow(CSV_COLUMNS)
    for e in entries:
        noop = e.noop or {}
        took = e.duration
        writer.writerow([e.finished or "", e.run, e.graph_type, e.node, e.task, e.state,
                         "" if took is None else f"{took:g}", e.attempts, e.started or "",
                         noop.get("wouldChange", "") if e.noop is not None else "",
                         ";".join(noop.get("resources") or []), e.reason or ""])
    return out.getvalue()


@dataclass(frozen=True)
class Query:
    """What to read: filters (None: any), the page size and where to continue (`before`: older than it)."""

    node: str | None = None
    task: str | None = None
    graph_type: str | None = None
    state: str | None = None
    run: str | None = None
    limit: int = 100
    before: int | None = None

    def matches(self, entry: Mapping[str, Any]) -> bool:
        return all(want is None or (entry.get(key) or "") == want for key, want in (
            ("node", self.node), ("task", self.task), ("type", self.graph_type), ("state", self.state),
            ("run", self.run)))


@dataclass
class Page:
    """Entries newest first, and the token of the next page (None: there is no more)."""

    entries: list[HistoryEntry] = field(default_factory=list)
    next_token: str | None = None


def history_path(state_dir: Path, namespace: str, environment: str, uid: str) -> Path:
    """Where the history of the Environment `uid` (its `metadata.uid`) lives (ValueError for a name that is
    not an object name, or a uid that is not one: they name directories)."""
    for what, name in (("namespace", namespace), ("environment", environment)):
        if not _NAME.match(name):
            raise ValueError(f"{what} {name!r} is not an object name")
    if not _UID.match(uid):
        raise ValueError(f"environment uid {uid[:80]!r} is not an object's uid")
    return state_dir / HISTORY_DIR / namespace / environment / uid


_OPEN: dict[str, lmdb.Environment] = {}
_LOCK = threading.Lock()
_CURRENT: dict[Path, str] = {}
"""Per `<namespace>/<environment>` directory, the uid this process last dropped the others for."""


def drop_others(path: Path) -> list[str]:
    """Remove the histories of the other Environments that had this one's namespace and name (another uid,
    or the layout before uids: files right in the directory), closing this process's handles of them, so
    that neither their data nor their file descriptors outlive them. `path` is `history_path`'s. What was
    removed (names in the directory); checked once per uid in a process (a directory listing)."""
    parent, uid = path.parent, path.name
    with _LOCK:
        if _CURRENT.get(parent) == uid:
            return []
        dropped = []
        for other in sorted(parent.iterdir()) if parent.is_dir() else []:
            if other.name == uid:
                continue
            env = _OPEN.pop(str(other), None)
            if env is not None:
                env.close()
            if other.is_dir() and not other.is_symlink():
                shutil.rmtree(other)
            else:
                other.unlink()
            dropped.append(other.name)
        _CURRENT[parent] = uid
        return dropped


def _environment(path: Path, create: bool) -> lmdb.Environment | None:
    """The process's one handle of `path` (LMDB must not be opened twice in a process); None when it does
    not exist and `create` is false. Kept open for the process's life: one per Stead environment."""
    import lmdb

    key = str(path)
    with _LOCK:
        env = _OPEN.get(key)
        if env is not None:
            return env
        if not create and not (path / "data.mdb").exists():
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        private_lmdb(path)
        env = lmdb.open(key, map_size=MAP_SIZE, max_dbs=4, subdir=True, sync=False, metasync=False,
                        mode=PRIVATE_FILE)
        _OPEN[key] = env
        return env


def close_all() -> None:
    """Close every history this process opened (tests)."""
    with _LOCK:
        for env in _OPEN.values():
            env.close()
        _OPEN.clear()
        _CURRENT.clear()


def _seq_key(seq: int) -> bytes:
    return struct.pack(">Q", seq)


def _instance_prefix(graph_type: str, node: str, task: str) -> bytes:
    return f"{graph_type}\0{node}\0{task}\0".encode()


class HistoryStore:
    """An environment's history in LMDB: `entries` (seq -> entry, newest highest), `instances` (type, node,
    task, seq: for the per-instance bound) and `recorded` (run uid, step -> seq: an instance is recorded once
    however often its run's status is reported)."""

    def __init__(self, path: Path, *, per_instance: int = PER_INSTANCE, max_entries: int = MAX_ENTRIES,
                 create: bool = True) -> None:
        self.path = path
        self.per_instance = per_instance
        self.max_entries = max_entries
        self._env = _environment(path, create)
        if self._env is not None:
            self._entries = self._env.open_db(_ENTRIES)
            self._instances = self._env.open_db(_INSTANCES)
            self._recorded = self._env.open_db(_RECORDED)

    def record(self, entries: Sequence[HistoryEntry]) -> int:
        """Add the entries not recorded yet (by run uid and step); drop what is past the bounds. How many
        were added."""
        if self._env is None or not entries:
            return 0
        added = 0
        touched: set[bytes] = set()
        with self._env.begin(write=True) as txn:
            cursor = txn.cursor(db=self._entries)
            seq = struct.unpack(">Q", cursor.key())[0] if cursor.last() else 0
            for entry in entries:
                done = f"{entry.run_uid}\0{entry.step}".encode()
                if txn.get(done, db=self._recorded) is not None:
                    continue
                seq += 1
                data = {**entry.to_json(), "seq": seq}
                txn.put(_seq_key(seq), json.dumps(data, separators=(",", ":")).encode(), db=self._entries)
                prefix = _instance_prefix(entry.graph_type, entry.node, entry.task)
                txn.put(prefix + _seq_key(seq), b"", db=self._instances)
                txn.put(done, _seq_key(seq), db=self._recorded)
                touched.add(prefix)
                added += 1
            for prefix in touched:
                self._trim_instance(txn, prefix)
            self._trim_total(txn)
        return added

    def _drop(self, txn: lmdb.Transaction, seq_key: bytes) -> None:
        raw = txn.get(seq_key, db=self._entries)
        if raw is None:
            return
        data = json.loads(bytes(raw))
        txn.delete(seq_key, db=self._entries)
        txn.delete(_instance_prefix(str(data.get("type") or ""), str(data.get("node") or ""),
                                    str(data["task"])) + seq_key, db=self._instances)
        txn.delete(f"{data.get('runUid') or ''}\0{data.get('step') or ''}".encode(), db=self._recorded)

    def _trim_instance(self, txn: lmdb.Transaction, prefix: bytes) -> None:
        keys = []
        cursor = txn.cursor(db=self._instances)
        if cursor.set_range(prefix):
            for key in cursor.iternext(values=False):
                if not bytes(key).startswith(prefix):
                    break
                keys.append(bytes(key)[len(prefix):])
        for seq_key in keys[:max(0, len(keys) - self.per_instance)]:
            self._drop(txn, seq_key)

    def _trim_total(self, txn: lmdb.Transaction) -> None:
        over = txn.stat(self._entries)["entries"] - self.max_entries
        if over <= 0:
            return
        cursor = txn.cursor(db=self._entries)
        oldest = []
        if cursor.first():
            for key in cursor.iternext(values=False):
                oldest.append(bytes(key))
                if len(oldest) >= over:
                    break
        for seq_key in oldest:
            self._drop(txn, seq_key)

    def read(self, query: Query) -> Page:
        """A page of entries matching `query`, newest first."""
        page = Page()
        if self._env is None:
            return page
        limit = max(1, min(query.limit, MAX_PAGE))
        with self._env.begin(db=self._entries) as txn:
            cursor = txn.cursor()
            if query.before is None:
                positioned = cursor.last()
            elif cursor.set_range(_seq_key(query.before)):  # the first at or after it: step back once
                positioned = cursor.prev()
            else:  # every entry is older
                positioned = cursor.last()
            if not positioned:
                return page
            for _, raw in cursor.iterprev():
                data = json.loads(bytes(raw))
                if not query.matches(data):
                    continue
                if len(page.entries) == limit:
                    page.next_token = encode_token(page.entries[-1].seq)
                    break
                page.entries.append(HistoryEntry.from_json(data))
        return page

    def count(self) -> int:
        if self._env is None:
            return 0
        with self._env.begin(db=self._entries) as txn:
            return int(txn.stat(self._entries)["entries"])


__all__ = [
    "CSV_COLUMNS", "FINISHED", "HISTORY_DIR", "MAX_ENTRIES", "MAX_PAGE", "PER_INSTANCE", "RESOURCES_KEPT",
    "HistoryEntry", "HistoryStore", "Page", "Query", "decode_token", "drop_others", "duration", "encode_token",
    "entries_from_records", "history_path", "noop_report", "to_csv",
]
