"""How the `stead` commands print: tables as kubectl prints them, documents as JSON or YAML.

Shared so that every noun's `list` and `-o json|yaml` look alike, whichever domain the noun belongs to."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl prints them: upper-case headers, two spaces apart."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def dump(value: Any, fmt: str) -> str:
    """One document: JSON (`fmt` "json"), else YAML, keys in their order, without the final newline."""
    if fmt == "json":
        return json.dumps(value, indent=2)
    import yaml

    return str(yaml.safe_dump(value, sort_keys=False, allow_unicode=True)).rstrip("\n")
