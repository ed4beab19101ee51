"""Stead's Argo CD resource customizations: generated from one source, and run as Argo CD runs them.

Argo CD judges a custom resource's health, and offers actions on it, with Lua scripts in its
`resource_customizations/<group>/<Kind>/` tree (health.lua, actions/discovery.lua,
actions/<name>/action.lua) or in `argocd-cm`. It shares no file between kinds, so the per-kind files under
charts/stead/argocd/resource_customizations/stead.dev/ are generated (`make argocd`, which calls `generate`)
from charts/stead/argocd/source/: a source file's `--@kinds A B` ... `--@end` blocks are kept only in the
files of those kinds, and `{{KIND}}` names the kind. A unit test checks the generated files are current.

The harness runs a script the way Argo CD does (util/lua/lua.go upstream): on Lua 5.1 (gopher-lua implements
5.1; lupa ships a 5.1 runtime), with the live object as the global `obj` and the action's parameters as the
global `actionParams`, the script's chunk returning a table: `{status, message}` for health, the changed
object (a patch) or a list of `{operation, resource}` (create or patch) for an action, a table of actions for
discovery. `python -m tests.argocd` regenerates the files; `--check` fails when they are stale.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lupa.lua51  # Lua 5.1: the language gopher-lua, Argo CD's interpreter, implements

ROOT = Path(__file__).resolve().parents[1]
ARGOCD = ROOT / "charts" / "stead" / "argocd"
SOURCE = ARGOCD / "source"
TREE = ARGOCD / "resource_customizations" / "stead.dev"
GROUP = "stead.dev"

ACTIONS: Mapping[str, tuple[str, ...]] = {
    "App": ("run-action",),
    "ActionRun": ("abort",),
    "GraphRun": ("abort",),
    "ServiceInstance": ("request-state",),
    "DeploymentGraph": ("execute",),
}
"""The actions of each kind: an App's action run, a run's abort, a ServiceInstance's state request, a graph
type's execution (DeploymentGraph -> GraphRun). Kinds not named here have a health check only."""

HEALTH_STATES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")


def kinds() -> tuple[str, ...]:
    """Every Stead kind, from the catalog the operator serves (a new kind gets a health check by `make argocd`)."""
    from operators.catalog import KINDS
    return tuple(sorted(kind.kind for kind in KINDS))


# --- generation ----------------------------------------------------------------------------------------------

_BLOCK = re.compile(r"^--@kinds ((?:\w+ ?)+)\n(.*?)^--@end\n", re.MULTILINE | re.DOTALL)


def specialize(source: str, kind: str) -> str:
    """The source as the file of `kind`: its `--@kinds` blocks kept (without their markers) where they name
    `kind`, dropped elsewhere; `{{KIND}}` replaced."""
    def block(match: re.Match[str]) -> str:
        return match.group(2) if kind in match.group(1).split() else ""
    text = _BLOCK.sub(block, source)
    if "--@kinds" in text or "--@end" in text:
        raise ValueError(f"unbalanced --@kinds/--@end block in a source for {kind}")
    return text.replace("{{KIND}}", kind)


def generated() -> dict[Path, str]:
    """Every generated file (relative to the tree of stead.dev) and its content."""
    files: dict[Path, str] = {}
    health = (SOURCE / "health.lua").read_text()
    discovery = (SOURCE / "discovery.lua").read_text()
    for kind in kinds():
        files[Path(kind) / "health.lua"] = specialize(health, kind)
        if kind in ACTIONS:
            files[Path(kind) / "actions" / "discovery.lua"] = specialize(discovery, kind)
            for name in ACTIONS[kind]:
                text = (SOURCE / "actions" / f"{name}.lua").read_text()
                files[Path(kind) / "actions" / name / "action.lua"] = specialize(text, kind)
    return files


def stale() -> list[str]:
    """The generated files that differ from what the source gives, or should not be there."""
    wanted = generated()
    present = {p.relative_to(TREE) for p in TREE.rglob("*.lua")} if TREE.exists() else set()
    out = [str(p) for p, text in sorted(wanted.items()) if not (TREE / p).exists() or (TREE / p).read_text() != text]
    return out + [f"{p} (not generated)" for p in sorted(present - set(wanted))]


def generate() -> None:
    wanted = generated()
    for path, text in wanted.items():
        (TREE / path).parent.mkdir(parents=True, exist_ok=True)
        (TREE / path).write_text(text)
    for path in TREE.rglob("*.lua"):
        if path.relative_to(TREE) not in wanted:
            path.unlink()


# --- running them as Argo CD does ------------------------------------------------------------------------------

class LuaFailure(Exception):
    """The script raised `error(...)`: Argo CD shows the message to the user and changes nothing."""


def _runtime() -> Any:
    return lupa.lua51.LuaRuntime(unpack_returned_tuples=True)


def _to_lua(lua: Any, value: Any) -> Any:
    if isinstance(value, Mapping):
        return lua.table_from({k: _to_lua(lua, v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return lua.table_from([_to_lua(lua, v) for v in value])
    return value


def _from_lua(value: Any, like: Any = None) -> Any:
    """A Lua value as JSON-like Python: a table with keys 1..n is a list, another a dict; an empty table is
    what the input had at the same place (Lua cannot tell {} from []), else a dict."""
    if not (hasattr(value, "keys") and hasattr(value, "values")):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    items = dict(value.items())
    if not items:
        return [] if isinstance(like, list) else {}
    if all(isinstance(k, int) for k in items) and sorted(items) == list(range(1, len(items) + 1)):
        hints = like if isinstance(like, list) else []
        return [_from_lua(items[i], hints[i - 1] if i - 1 < len(hints) else None) for i in range(1, len(items) + 1)]
    hint = like if isinstance(like, Mapping) else {}
    return {str(k): _from_lua(v, hint.get(str(k))) for k, v in items.items()}


def _run(script: str, obj: Mapping[str, Any], params: Mapping[str, str] | None = None,
         clock: str | None = None) -> Any:
    lua = _runtime()
    g = lua.globals()
    g.obj = _to_lua(lua, obj)
    g.actionParams = _to_lua(lua, dict(params or {}))
    if clock is not None:  # actions name what they create after the time: tests fix it, as upstream's do
        lua.execute(f'local os = require("os"); os.date = function() return "{clock}" end')
    try:
        return lua.execute(script)
    except lupa.lua51.LuaError as error:
        raise LuaFailure(str(error).split("\nstack traceback:")[0]) from None  # Argo CD drops the trace too


def script(kind: str, *parts: str) -> str:
    return (TREE / kind).joinpath(*parts).read_text()


@dataclass(frozen=True)
class Health:
    status: str
    message: str


def health(obj: Mapping[str, Any], source: str | None = None) -> Health:
    """The health Argo CD shows for a live Stead object (`source`: another script than the kind's)."""
    result = _from_lua(_run(source or script(str(obj["kind"]), "health.lua"), obj))
    status = str(result.get("status") or "")
    if status not in HEALTH_STATES:  # Argo CD shows Unknown for a status it does not know
        raise AssertionError(f"health.lua of {obj['kind']} returned status {status!r}")
    return Health(status, str(result.get("message") or ""))


def discover(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The actions Argo CD offers on the object, by name, each with disabled, params, iconClass, displayName."""
    found = _from_lua(_run(script(str(obj["kind"]), "actions", "discovery.lua"), obj))
    return {name: {"disabled": False, **spec} for name, spec in found.items()}


@dataclass(frozen=True)
class Impacted:
    """One resource an action writes: `patch` (the changed object; Argo CD sends the merge patch from the live
    one) or `create`."""

    operation: str
    resource: dict[str, Any]


def run_action(obj: Mapping[str, Any], name: str, params: Mapping[str, str] | None = None,
               clock: str | None = None) -> list[Impacted]:
    """What the action does, as Argo CD reads a script's result: an object is a patch of the live object, a list
    is the new-style list of impacted resources."""
    result = _run(script(str(obj["kind"]), "actions", name, "action.lua"), obj, params, clock)
    converted = _from_lua(result, like=dict(obj))
    if isinstance(converted, list):
        return [Impacted(str(item["operation"]), dict(item["resource"])) for item in converted]
    return [Impacted("patch", converted)]


def merge_patch(live: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) from `live` to `new`, as Argo CD computes it before sending a patch."""
    if not (isinstance(live, Mapping) and isinstance(new, Mapping)):
        return new
    patch: dict[str, Any] = {}
    for key in set(live) | set(new):
        if key not in new:
            patch[key] = None
        elif key not in live:
            patch[key] = new[key]
        elif live[key] != new[key]:
            patch[key] = merge_patch(live[key], new[key])
    return patch


# --- captured objects -----------------------------------------------------------------------------------------

VOLATILE_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink", "generateName")


def cleaned(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A live object as testdata: without uid, managedFields, resource versions and times, which change on
    every capture and decide nothing (a run's times, a condition's lastTransitionTime)."""
    def scrub(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: scrub(v) for k, v in value.items()
                    if k not in ("lastTransitionTime", "startTime", "endTime", "startedAt", "finishedAt", "since",
                                 "started", "finished", "time")}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value
    metadata = {k: v for k, v in obj["metadata"].items() if k not in VOLATILE_METADATA}
    metadata.get("annotations", {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not metadata.get("annotations"):
        metadata.pop("annotations", None)
    metadata.pop("ownerReferences", None)  # they carry the owner's uid
    return scrub({**obj, "metadata": metadata})


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        problems = stale()
        if problems:
            sys.exit("stale Argo CD customizations (run `make argocd`): " + ", ".join(problems))
        sys.exit(0)
    generate()
    print(f"generated {len(generated())} files under {TREE.relative_to(ROOT)}")
