"""The inventory list's filters, sort and pages, as Inmanta's `GET /lsm/v1/service_inventory/<entity>` has them.

Pure: it takes the instances as `view` shows them and the query, and answers Inmanta's list shape
``{"data": [...], "links": {"self", "next"?, "prev"?}, "metadata": {"total", "before", "after",
"page_size"}}``. Clients (Inmanta's web console among them) follow `links` verbatim, so a page is
named by an opaque cursor (`start_after`: the sort value and name of the row before
the page), not an offset: rows created or deleted between two requests neither repeat nor vanish
going forward (`links.prev` steps back `limit` rows from where the page starts).

Filters (each `filter.<name>`; a repeated name means any of its values): `id` (uid or name), `state`,
`deleted` (true/false), `attribute_set_empty` / `attribute_set_not_empty` (candidate_attributes,
active_attributes, rollback_attributes), `id_or_service_identity` (a substring of the uid, name or
identity value), and the entity's identity attribute by its own name (the exact value). Sort:
`<field>.<asc|desc>` over created_at (the default, newest first), last_updated, state, version,
name. Instances being deleted are left out unless `include_deleted=true` or `filter.deleted=true`
(Inmanta's default). Anything else is a 400 that names the parameter.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

DEFAULT_LIMIT = 1000
MAX_LIMIT = 1000
SORT_FIELDS = ("created_at", "last_updated", "state", "version", "name")
ATTRIBUTE_SETS = ("candidate_attributes", "active_attributes", "rollback_attributes")
FILTERS = ("id", "state", "deleted", "attribute_set_empty", "attribute_set_not_empty", "id_or_service_identity")
MAX_CURSOR = 2048


class QueryError(ValueError):
    """A query parameter that cannot be understood; the message names it."""


def _bad(message: str) -> NoReturn:
    raise QueryError(message)


def _limit(query: Mapping[str, Sequence[str]]) -> int:
    raw = _one(query, "limit")
    if raw is None:
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        _bad(f"query parameter limit: expected an integer from 1 to {MAX_LIMIT}, got {raw!r}")
    return int(raw)


def _one(query: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = query.get(name) or []
    if len(values) > 1:
        _bad(f"query parameter {name}: given {len(values)} times, expected once")
    return values[0] if values else None


def _sort(query: Mapping[str, Sequence[str]]) -> tuple[str, bool]:
    raw = _one(query, "sort") or "created_at.desc"
    field, _, order = raw.rpartition(".")
    if field not in SORT_FIELDS or order not in ("asc", "desc"):
        _bad(f"query parameter sort: expected <field>.<asc|desc> with field one of {', '.join(SORT_FIELDS)}, "
             f"got {raw!r}")
    return field, order == "desc"


def _bool(name: str, raw: str) -> bool:
    if raw.lower() not in ("true", "false"):
        _bad(f"query parameter {name}: expected true or false, got {raw!r}")
    return raw.lower() == "true"


def _filters(query: Mapping[str, Sequence[str]], identity: str | None) -> dict[str, list[str]]:
    """The `filter.<name>` parameters, each checked (whether or not any row would meet it)."""
    filters = {name.removeprefix("filter."): list(values) for name, values in query.items()
               if name.startswith("filter.")}
    known = [*FILTERS, *([identity] if identity else [])]
    for name, values in filters.items():
        if name not in known:
            _bad(f"query parameter filter.{name}: no such filter (filters: {', '.join(known)})")
        for value in values:
            if name == "deleted":
                _bool("filter.deleted", value)
            elif name in ("attribute_set_empty", "attribute_set_not_empty") and value not in ATTRIBUTE_SETS:
                _bad(f"query parameter filter.{name}: expected one of {', '.join(ATTRIBUTE_SETS)}, got {value!r}")
    return filters


def _matches(row: Mapping[str, Any], filters: Mapping[str, Sequence[str]], identity: str | None) -> bool:
    for name, wanted in filters.items():
        if name == "id":
            ok = bool({row.get("id"), row.get("name")} & set(wanted))
        elif name == "state":
            ok = row.get("state") in wanted
        elif name == "deleted":
            ok = bool(row.get("deleted")) in {w.lower() == "true" for w in wanted}
        elif name in ("attribute_set_empty", "attribute_set_not_empty"):
            ok = all(bool(row.get(s)) == (name == "attribute_set_not_empty") for s in wanted)
        elif name == "id_or_service_identity":
            texts = [str(row.get(k) or "") for k in ("id", "name", "service_identity_attribute_value")]
            ok = any(w in text for w in wanted for text in texts)
        else:  # the identity attribute
            ok = row.get("service_identity_attribute_value") in wanted
        if not ok:
            return False
    return True


def _key(row: Mapping[str, Any], field: str) -> tuple[Any, str]:
    value = row.get(field)
    if field == "version":
        return (int(value or 0), str(row.get("name")))
    return (str(value or ""), str(row.get("name")))


def _cursor(key: tuple[Any, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).decode().rstrip("=")


def _uncursor(name: str, raw: str, field: str) -> tuple[Any, str]:
    try:
        if len(raw) > MAX_CURSOR:
            raise ValueError("too long")
        value, row_name = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if not isinstance(row_name, str) or not isinstance(value, int if field == "version" else str) \
                or isinstance(value, bool):
            raise ValueError("not a cursor of this sort")
    except (ValueError, TypeError, UnicodeDecodeError, json.JSONDecodeError):
        _bad(f"query parameter {name}: not a cursor this list gave (follow links.next / links.prev as they are)")
    return value, row_name


def page(rows: Sequence[Mapping[str, Any]], query: Mapping[str, Sequence[str]], path: str,
         identity: str | None = None) -> dict[str, Any]:
    """One page of `rows` (instances as `view` shows them) as `query` asks; `path` is the list's own path
    (with `namespace` in `query` if it was given) for the links; `identity` the entity's identity attribute."""
    limit = _limit(query)
    field, descending = _sort(query)
    filters = _filters(query, identity)
    include_deleted = _bool("include_deleted", _one(query, "include_deleted") or "false")
    include_deleted = include_deleted or "deleted" in filters
    chosen = [r for r in rows if _matches(r, filters, identity) and (include_deleted or not r.get("deleted"))]
    chosen.sort(key=lambda r: _key(r, field), reverse=descending)
    keys = [_key(r, field) for r in chosen]
    after = _one(query, "start_after")
    start = 0
    if after is not None:
        cursor = _uncursor("start_after", after, field)
        start = next((i for i, k in enumerate(keys) if (k < cursor if descending else k > cursor)), len(keys))
    end = min(len(keys), start + limit)
    kept = [(k, v) for k, values in query.items() if k != "start_after" for v in values]

    def link(start_at: int) -> str:
        items = kept + ([("start_after", _cursor(keys[start_at - 1]))] if start_at > 0 else [])
        return f"{path}?{urllib.parse.urlencode(items)}" if items else path

    links = {"self": f"{path}?{urllib.parse.urlencode([*kept, ('start_after', after)])}" if after else link(0)}
    if end < len(keys):
        links["next"] = link(end)
    if start > 0:
        links["prev"] = link(max(0, start - limit))
    return {"data": [dict(r) for r in chosen[start:end]], "links": links,
            "metadata": {"total": len(chosen), "before": start, "after": len(chosen) - end, "page_size": limit}}
