"""Runs Stead creates by itself (docs/graphs.md, "Runs Stead starts"): what to run when configuration values
change or nodes are added, and when. Pure: the driver (`operators.graphs.autorunner`) reads the cluster and
creates the GraphRun this module describes.

What no Fuel release did. Fuel stored `refresh_on` and `reexecute_on` with every task; only its
`openstack-config` command and `deploy_changes` read them, when an operator asked. Here an environment opts in
(`spec.graphs.autoRun`) and its own configuration store drives the runs:

- **refreshOn.** A task names the values it depends on: `RESOURCE` (any key of it: fuel-library's
  `refresh_on: [neutron_config]` as written), `RESOURCE:KEY` (one dotted key path, `astute:nova.debug`,
  the key a condition reads as `$.astute.nova.debug`) or `*` (every resource). When the effective value of
  such a key changes on a node (the values a condition sees there: `stead config get` for the node), the
  task and its successors (`subgraphs: [{start: [task]}]`) run again on the nodes where a value changed,
  and only there. Changes are compared with the values of the environment's last automatic run (or those
  in force when it opted in): a key changed and changed back in between makes no run.
- **reexecuteOn.** Fuel used one event name, `deploy_changes`: when changes such as new nodes were
  deployed, tasks naming it (the hosts file, the firewall) ran again on the nodes already deployed. Here a
  node added to `spec.nodes` has those tasks run on every node of the environment, the new ones included.
  A new node's own full deployment stays a run its user creates.
- **Debounce.** A change starts a window of `debounceSeconds`; each further change restarts it; the run is
  created when the values have been quiet for the window (or `MAX_DELAY_FACTOR` windows after the first
  change, so that edits every few seconds cannot hold it back for ever). While a run of the environment is
  in progress, the changes wait and make one follow-up run once it ended, naming every key they changed.

Every automatic run has `force: true`: a task re-run because its values changed runs whatever its
condition's change functions say (their comparison is with the last successful run, which may not know the
change yet); a condition that does not hold (a role test) still skips it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from operators import API_VERSION
from operators.config.keys import KeyPath, KeyPathError, format_key, parse_key
from operators.config.models import RESOURCE_PATTERN
from operators.graphs.models import STRUCTURE_TYPES, Task

REFRESH_ALL = "*"
NODE_ADDED_EVENT: Literal["deploy_changes"] = "deploy_changes"
"""The event of `reexecuteOn` that a node added to the environment raises (Fuel's name for it)."""
CONFIG_EVENT: Literal["configChange"] = "configChange"
CREATED_BY_LABEL = "stead.dev/created-by"
CREATED_BY = "stead-auto-run"
TRIGGER_LABEL = "stead.dev/trigger"
REASON_ANNOTATION = "stead.dev/reason"
PROJECT_LABEL = "stead.dev/project"
MAX_KEYS = 50
"""Changed keys a run names (the rest are counted in its reason)."""
MAX_DELAY_FACTOR = 6
"""A burst that goes on makes its run at the latest this many debounce windows after its first change."""

_RESOURCE = re.compile(RESOURCE_PATTERN)  # Stead's own pattern, not a tenant's


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()
"""A key the values do not have (removed, or not there yet): unlike any value."""


@dataclass(frozen=True)
class RefreshRef:
    """One `refreshOn` entry: a resource (None: every resource) and a key path in it (`()`: all of it)."""

    resource: str | None
    key: KeyPath


def parse_refresh(text: str) -> RefreshRef:
    """`neutron_config`, `astute:nova.debug` or `*`; ValueError saying what is wrong."""
    if text == REFRESH_ALL:
        return RefreshRef(None, ())
    resource, sep, key = text.partition(":")
    if not _RESOURCE.fullmatch(resource):
        raise ValueError("not a resource name (letters, digits, ._~- and / only)")
    if sep and not key:
        raise ValueError("nothing after ':' (write RESOURCE, or RESOURCE:KEY with a dotted key path)")
    try:
        path = parse_key(key)
    except KeyPathError as error:
        raise ValueError(error.message) from None
    return RefreshRef(resource, path)


def refresh_problem(text: str) -> str | None:
    """Why a `refreshOn` entry is not usable (for the graph's checks at upload), or None."""
    try:
        parse_refresh(text)
    except ValueError as error:
        return f"{text!r}: {error}"
    return None


def _refs(task: Task) -> list[RefreshRef]:
    refs = []
    for text in task.refresh_on:
        try:
            refs.append(parse_refresh(text))
        except ValueError:
            continue  # refused at upload; a graph from before that check names nothing here
    return refs


def refreshing(tasks: Iterable[Task]) -> list[Task]:
    """The tasks that name values in `refreshOn` (work, not structure)."""
    return [t for t in tasks if t.type not in STRUCTURE_TYPES and _refs(t)]


def resources_read(tasks: Iterable[Task]) -> set[str] | None:
    """The resources the tasks' `refreshOn` name (None: every one, some task says `*`)."""
    names: set[str] = set()
    for task in refreshing(tasks):
        for ref in _refs(task):
            if ref.resource is None:
                return None
            names.add(ref.resource)
    return names


def value_at(data: Any, path: KeyPath) -> Any:
    """The value at `path` (list items by index), `MISSING` when there is none."""
    node = data
    for segment in path:
        if isinstance(node, Mapping):
            if segment not in node:
                return MISSING
            node = node[segment]
        elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
            node = node[int(segment)]
        else:
            return MISSING
    return node


def changed_paths(old: Any, new: Any, prefix: KeyPath = ()) -> list[KeyPath]:
    """The leaf key paths under which `old` and `new` differ (a mapping on both sides is compared key by
    key; anything else, lists included, as a whole, as the merge replaces it)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping) and (old or new):
        out: list[KeyPath] = []
        for name in sorted({*old, *new}, key=str):
            out.extend(changed_paths(old.get(name, MISSING), new.get(name, MISSING), (*prefix, str(name))))
        return out
    if old is MISSING and new is MISSING:
        return []
    return [] if type(old) is type(new) and old == new else [prefix]


NodeValues = Mapping[str, Mapping[str, Any]]
"""One node's effective values: resource -> its values."""


@dataclass(frozen=True)
class Trigger:
    """A run to create: why (`event`, `keys`), which tasks start it and on which nodes."""

    event: Literal["configChange", "deploy_changes"]
    tasks: tuple[str, ...]
    nodes: tuple[str, ...]
    keys: tuple[str, ...] = ()
    more_keys: int = 0

    @property
    def reason(self) -> str:
        if self.event == NODE_ADDED_EVENT:
            return (f"node(s) {', '.join(self.nodes)} added: tasks whose reexecuteOn names {NODE_ADDED_EVENT} "
                    f"({', '.join(self.tasks)}) run on every node")
        keys = ", ".join(self.keys) + (f" and {self.more_keys} more" if self.more_keys else "")
        return (f"configuration changed: {keys} on {', '.join(self.nodes)}: re-running "
                f"{', '.join(self.tasks)} and their successors there")


def config_trigger(tasks: Sequence[Task], old: Mapping[str, NodeValues], new: Mapping[str, NodeValues]
                   ) -> Trigger | None:
    """The run the change from `old` to `new` (node -> its values) calls for, or None.

    A task is started on a node where a value its `refreshOn` names changed. Nodes only in `new` are not
    compared (that is `node_added_trigger`'s), nor resources `old` has no values of for the node (they were
    not read when `old` was taken: the graph started naming them since)."""
    started: set[str] = set()
    nodes: set[str] = set()
    keys: set[str] = set()
    for node, now in new.items():
        before = old.get(node)
        if before is None:
            continue
        for task in refreshing(tasks):
            for ref in _refs(task):
                names = [ref.resource] if ref.resource is not None else sorted({*before} & {*now})
                for resource in names:
                    if resource not in before:
                        continue
                    paths = changed_paths(value_at(before[resource], ref.key),
                                          value_at(now.get(resource, {}), ref.key), ref.key)
                    if paths:
                        started.add(task.id)
                        nodes.add(node)
                        keys.update(f"{resource}:{format_key(p)}" if p else resource for p in paths)
    if not started:
        return None
    ordered = sorted(keys)
    return Trigger(CONFIG_EVENT, tuple(t.id for t in tasks if t.id in started), tuple(n for n in new if n in nodes),
                   tuple(ordered[:MAX_KEYS]), max(0, len(ordered) - MAX_KEYS))


def node_added_trigger(tasks: Sequence[Task], old_nodes: Collection[str], new_nodes: Sequence[str]
                       ) -> Trigger | None:
    """The run nodes added since `old_nodes` call for: the tasks whose `reexecuteOn` names `deploy_changes`."""
    added = tuple(n for n in new_nodes if n not in old_nodes)
    ids = tuple(t.id for t in tasks if NODE_ADDED_EVENT in t.reexecute_on and t.type not in STRUCTURE_TYPES)
    if not added or not ids:
        return None
    return Trigger(NODE_ADDED_EVENT, ids, added)


# --- when ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """Changes seen and not run yet: when the first and the last of them were seen (seconds, any clock)."""

    first: float
    last: float


def note(pending: Pending | None, now: float) -> Pending:
    """One more change seen at `now`."""
    return Pending(now, now) if pending is None else Pending(pending.first, now)


Decision = Literal["wait", "queued", "create"]


def decide(pending: Pending, now: float, debounce: float, busy: bool) -> Decision:
    """`wait` while the window is open, `queued` once it closed while a run is in progress (one follow-up
    then), `create` otherwise."""
    quiet = now - pending.last >= debounce
    overdue = now - pending.first >= debounce * MAX_DELAY_FACTOR
    if not (quiet or overdue):
        return "wait"
    return "queued" if busy else "create"


# --- the run -------------------------------------------------------------------------------------------


def run_object(namespace: str, environment: str, labels: Mapping[str, str], trigger: Trigger,
               graph_type: str, dry_run: bool = False) -> dict[str, Any]:
    """The GraphRun Stead creates for `trigger`: labelled as Stead's, in the environment's project, the
    reason in its spec (`trigger`) and in an annotation."""
    if trigger.event == NODE_ADDED_EVENT:
        graphs: list[dict[str, Any]] = [{"type": graph_type, "tasks": list(trigger.tasks)}]
        subgraphs: list[dict[str, Any]] = []
    else:
        graphs = [{"type": graph_type, "nodes": list(trigger.nodes)}]
        subgraphs = [{"start": list(trigger.tasks)}]
    own = {CREATED_BY_LABEL: CREATED_BY, TRIGGER_LABEL: trigger.event,
           **({PROJECT_LABEL: labels[PROJECT_LABEL]} if PROJECT_LABEL in labels else {})}
    return {
        "apiVersion": API_VERSION, "kind": "GraphRun",
        "metadata": {"generateName": f"{environment[:40]}-auto-", "namespace": namespace, "labels": own,
                     "annotations": {REASON_ANNOTATION: trigger.reason[:4096]}},
        "spec": {"environment": environment, "graphs": graphs, "subgraphs": subgraphs, "force": True,
                 "dryRun": dry_run,
                 "trigger": {"event": trigger.event, "reason": trigger.reason[:4096], "keys": list(trigger.keys),
                             "nodes": list(trigger.nodes)}},
    }
