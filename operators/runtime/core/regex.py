"""Tenants' regular expressions, compiled for RE2, which matches in time linear in the text.

Python's `re` backtracks: `(a+)+$` against 30 `a`s and a `!` takes minutes, and no deadline can
interrupt a single `re` call, so a pattern a tenant wrote is never given to it. RE2 (`google-re2`)
refuses what would need backtracking (backreferences, lookaround): the refusal comes at
admission, naming the field. Used by the graphs' references and yaql functions and by the
configuration store's JSON Schema `pattern` keywords.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

MAX_MEMORY = 8 << 20
"""RE2's memory budget for one compiled pattern (its default); a pattern needing more is refused."""


class RegexError(ValueError):
    """A pattern RE2 refuses (syntax, a feature needing backtracking, too large)."""


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # a tenant's bad pattern is an answer to the tenant, not an operator log line
    return options


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """The compiled pattern (`search`, `finditer`, `split`, `sub`, like `re`'s), or `RegexError`."""
    try:
        return re2.compile(pattern, _options())
    except re2.error as error:
        why = error.args[0] if error.args else "invalid"
        text = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        hint = f" (RE2 limits a compiled pattern to {MAX_MEMORY >> 20} MiB)" if "too large" in text else \
            " (RE2 syntax: no backreferences or lookaround)"
        raise RegexError(text + hint) from None
