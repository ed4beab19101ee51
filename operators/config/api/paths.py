"""The configuration API's paths: its prefix, and the values paths
(`/environments/<env>[/<level>/<value>...]/resources/<resource>/values`) its handlers parse themselves, since
a level path has any number of segments and a resource's name may hold `/`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from operators.runtime import Call, not_found

PREFIX = "/api/v1/config"
TERMINALS: dict[str, Literal["values", "overrides"]] = {
    "values": "values", "overrides": "overrides", "override": "overrides",
}


@dataclass(frozen=True)
class ValuesPath:
    """A parsed `/environments/<env>/.../resources/<resource>/<terminal>` path."""

    environment: str
    pairs: tuple[tuple[str, str], ...]
    resource: str
    kind: Literal["values", "overrides"]


@functools.lru_cache(maxsize=4096)
def parse_values_path(environment: str, tail: str) -> ValuesPath | None:
    """The parts of a values path after `/environments/<env>/`; None when it is not one.

    Memoized: a Hiera backend asks the same few thousand paths over and over, and the answer
    is an immutable value of the strings alone.
    """
    segments = tail.split("/")
    if any(s == "" for s in segments):
        return None
    pairs: list[tuple[str, str]] = []
    index = 0
    while index < len(segments) and segments[index] != "resources":
        if index + 1 >= len(segments):
            return None
        pairs.append((segments[index], segments[index + 1]))
        index += 2
    rest = segments[index + 1:]
    if len(rest) < 2 or rest[-1] not in TERMINALS:
        return None
    return ValuesPath(environment, tuple(pairs), "/".join(rest[:-1]), TERMINALS[rest[-1]])


def values_path(call: Call) -> ValuesPath:
    """The request's values path, or the 404 that says what one looks like."""
    path = parse_values_path(call.params["env"], call.params["tail"])
    if path is None:
        not_found("route", f"no such route: {call.request.method} {call.request.path} "
                           "(expected .../environments/<env>[/<level>/<value>...]/resources/<resource>/values)")
    return path


def level_name(name: str, hierarchy: list[str]) -> str | None:
    """The hierarchy level `name` means: itself, or a level's plural (`nodes` for `node`)."""
    if name in hierarchy:
        return name
    if name.endswith("s") and name[:-1] in hierarchy:
        return name[:-1]
    return None
