"""The built-in macros and functions (calm_time, calm_array_index, calm_b64encode, ...)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from datetime import time as time_of_day
from types import MappingProxyType
from typing import Final

from operators.calm.macros.lexer import MacroError


@dataclass(frozen=True)
class Builtin:
    """A built-in macro: how many arguments it takes, how to write it and what it gives."""

    name: str
    min_args: int
    max_args: int
    usage: str
    description: str


BUILTINS: Final[Mapping[str, Builtin]] = MappingProxyType(
    {
        builtin.name: builtin
        for builtin in (
            Builtin("calm_array_index", 0, 0, "calm_array_index", "index of the task's replica (0 for the first)"),
            Builtin("calm_blueprint_name", 0, 0, "calm_blueprint_name", "name of the app's blueprint"),
            Builtin("calm_blueprint_uuid", 0, 0, "calm_blueprint_uuid", "uuid of the app's blueprint"),
            Builtin("calm_application_name", 0, 0, "calm_application_name", "name of the application"),
            Builtin("calm_application_uuid", 0, 0, "calm_application_uuid", "uuid of the application"),
            Builtin("calm_project_name", 0, 0, "calm_project_name", "name of the application's project"),
            Builtin(
                "calm_is_within",
                2,
                2,
                'calm_is_within("08:00", "18:00")',
                "'1' if now is within the window (ends included), else '0'",
            ),
            Builtin("calm_time", 0, 1, 'calm_time or calm_time("%H:%M")', "current time, HH:MM:SS by default"),
            Builtin("calm_date", 0, 1, 'calm_date or calm_date("%d/%m/%Y")', "current date, YYYY-MM-DD by default"),
            Builtin("calm_unique", 0, 0, "calm_unique", "a six-digit number unique to the application"),
            Builtin("calm_unique_hash", 0, 0, "calm_unique_hash", "32 hex digits unique to the application"),
            Builtin("calm_random", 0, 0, "calm_random", "a random number from 0 to 999999, new each time"),
            Builtin("calm_int", 1, 1, "calm_int(x)", "the value as a whole number"),
            Builtin("calm_string", 1, 1, "calm_string(x)", "the value as text"),
            Builtin("calm_b64encode", 1, 1, "calm_b64encode(x)", "the value's UTF-8 text, base64-encoded"),
            Builtin("calm_b64decode", 1, 1, "calm_b64decode(x)", "the base64 value decoded to UTF-8 text"),
        )
    }
)

CONTEXT_BUILTINS: Final = MappingProxyType(
    {
        "calm_array_index": "array_index",
        "calm_blueprint_name": "blueprint_name",
        "calm_blueprint_uuid": "blueprint_uuid",
        "calm_application_name": "application_name",
        "calm_application_uuid": "application_uuid",
        "calm_project_name": "project_name",
    }
)
"""Built-ins read from `BuiltinValues` (the attribute named here)."""

MOMENT_BUILTINS: Final = frozenset({"calm_time", "calm_date", "calm_random", "calm_is_within"})
"""Built-ins whose value depends on when the task runs: never resolved before the run."""


def _parse_moment(text: str) -> time_of_day | datetime | None:
    stripped = text.strip()
    match = re.fullmatch(r"([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?", stripped)
    if match:
        try:
            return time_of_day(int(match[1]), int(match[2]), int(match[3] or 0))
        except ValueError:
            return None
    try:
        return datetime.fromisoformat(stripped)
    except ValueError:
        return None


def within_window(
    first: str, second: str, position: int, macro: str | None
) -> tuple[time_of_day, time_of_day] | tuple[datetime, datetime]:
    """calm_is_within's window: two times of day (daily, may wrap midnight) or two ISO 8601 moments."""
    start, end = _parse_moment(first), _parse_moment(second)
    if isinstance(start, datetime) and isinstance(end, datetime):
        return start, end
    if isinstance(start, time_of_day) and isinstance(end, time_of_day):
        return start, end
    raise MacroError(
        "calm_is_within takes two times of day (HH:MM or HH:MM:SS) or two ISO 8601 dates with times",
        position,
        macro,
    )
