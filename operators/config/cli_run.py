"""`stead config`'s actions (`run_config`), imported when one runs (`operators.config.cli` is the parser).

The argument checks follow `fuel config`: `--value` only with `--key`; `--type null` takes no
value; `--type int|str|bool` need one; `--type json|yaml` take it from `--value` or stdin; a
whole resource comes from stdin in `--format json|yaml`, so `--value` and `--format` exclude
each other. They live in `check_args`, a pure function, so they are tested without a server.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
from collections.abc import Sequence
from typing import IO, Any

import yaml

from operators.config.keys import KeyPathError, get_key, parse_key
from operators.config.levels import LevelError, parse_levels
from operators.runtime import RequestFailed, UsageError, call
from operators.runtime import command as lazy

PREFIX = "/api/v1/config"
TRUE = ("true", "yes", "on", "1")
FALSE = ("false", "no", "off", "0")
VALUE_BY_SCHEMA = lazy("operators.config.cli_schema:value_by_schema")
"""`--value` read by the type the resource's schema declares at `--key`: its module imports the schema reader
(jsonschema, a quarter of a second), which only this needs."""


# --- argument checks (pure) ---------------------------------------------------------------


def check_args(args: argparse.Namespace) -> list[str]:
    """Everything wrong with a command line beyond argparse's own checks: the argument rules."""
    problems: list[str] = []
    try:
        level_pairs(args.level)
    except LevelError as error:
        problems.append(f"--level: {error}")
    key = getattr(args, "key", None)
    if key is not None:
        try:
            parse_key(key)
        except KeyPathError as error:
            problems.append(f"--key: {error.message}")
    if args.action in ("set", "override"):
        value, type_, fmt = args.value, args.type, args.format
        if value is not None and key is None:
            problems.append("--value needs --key (a whole resource is read from stdin)")
        if type_ is not None and key is None:
            problems.append("--type needs --key (a whole resource is read from stdin in --format json|yaml)")
        if value is not None and fmt is not None:
            problems.append("--value and --format exclude each other: --format is the format of stdin")
        if type_ == "null" and value is not None:
            problems.append("--type null takes no --value")
        if type_ in ("int", "str", "bool") and value is None:
            problems.append(f"--type {type_} needs --value")
        if key is not None and value is None and type_ is None:
            problems.append("--key needs --value, or --type null, or --type json|yaml with the value on stdin")
        if key is not None and type_ in ("null", "int", "str", "bool") and fmt is not None:
            problems.append(f"--format is the format of stdin, which --type {type_} does not read")
        if value is not None and type_ is not None and not problems:
            try:
                typed_value(value, type_)
            except UsageError as error:
                problems.append(str(error))
    elif args.action == "get":
        if args.format == "plain" and key is None:
            problems.append("--format plain prints one key's value: it needs --key")
        if args.trace and not args.effective:
            problems.append("--trace shows how effective values were found: it cannot go with --no-effective")
        if args.trace and args.format == "plain":
            problems.append("--trace needs --format json or yaml")
    return problems


def level_pairs(levels: list[str]) -> list[tuple[str, str]]:
    """The `--level` options as ordered pairs; a bare `cluster` (Fuel's spelling) means the root."""
    pairs: list[tuple[str, str]] = []
    for text in levels:
        if text.strip() == "cluster":
            continue
        pairs.extend(parse_levels(text))
    return pairs


def typed_value(value: str | None, type_: str | None) -> Any:
    """`--value` converted by `--type` (str when no type is given)."""
    if type_ == "null":
        return None
    assert value is not None
    if type_ in (None, "str"):
        return value
    if type_ == "int":
        try:
            return int(value)
        except ValueError:
            raise UsageError(f"--value: {value!r} is not an int") from None
    if type_ == "bool":
        if value.lower() in TRUE:
            return True
        if value.lower() in FALSE:
            return False
        raise UsageError(f"--value: {value!r} is not a bool (true/false, yes/no, on/off, 1/0)")
    return parse_document(value, "json" if type_ == "json" else "yaml", "--value")


def parse_document(text: str, fmt: str, where: str) -> Any:
    try:
        return json.loads(text) if fmt == "json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageError(f"{where}: not valid {fmt.upper()}: {first}") from None


# --- talking to the API -------------------------------------------------------------------


def values_url(args: argparse.Namespace, kind: str) -> str:
    """The values (or overrides) URL of the command's environment, level and resource."""
    parts = ["environments", urllib.parse.quote(args.env, safe="")]
    for name, value in level_pairs(args.level):
        parts += [urllib.parse.quote(name, safe=""), urllib.parse.quote(value, safe="")]
    parts += ["resources", urllib.parse.quote(args.resource, safe="/"), kind]
    return str(args.server).rstrip("/") + PREFIX + "/" + "/".join(parts)


# --- commands -----------------------------------------------------------------------------


def run_config(args: argparse.Namespace, stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Run one `stead config` action; returns the exit code (2 for usage errors, 1 for API errors)."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    problems = check_args(args)
    if problems:
        for problem in problems:
            print(f"stead config {args.action}: {problem}", file=sys.stderr)
        return 2
    try:
        _dispatch(args, stdin, stdout)
    except UsageError as error:
        print(f"stead config {args.action}: {error}", file=sys.stderr)
        return 2
    except RequestFailed as error:
        print(f"stead config {args.action}: {error.message}", file=sys.stderr)
        return 1
    return 0


def _dispatch(args: argparse.Namespace, stdin: IO[str], stdout: IO[str]) -> None:
    kind = "overrides" if args.action == "override" or getattr(args, "overrides", False) else "values"
    url = values_url(args, kind)
    if args.action == "get":
        query: dict[str, str] = {}
        if args.effective:
            query["effective"] = ""
        if args.trace:
            query["trace"] = ""
        if args.version is not None:
            query["version"] = str(args.version)
        if args.key is not None:
            query["key"] = args.key
        result = call(args, "GET", url, query)
        if args.key is not None and not args.trace:
            _print_key(args.key, result, args.format or "json", stdout)
        else:
            _print(result, args.format or "json", stdout)
    elif args.action in ("set", "override"):
        if args.key is None:
            document = parse_document(_read_stdin(stdin), args.format or "json", "stdin")
            if not isinstance(document, dict):
                raise UsageError("stdin: a resource's data is a mapping (a JSON object / YAML mapping)")
            change: Any = document
        else:
            if args.value is not None and args.type is None:
                change = VALUE_BY_SCHEMA(args)
            elif args.value is not None or args.type == "null":
                change = typed_value(args.value, args.type)
            else:
                change = parse_document(_read_stdin(stdin), "json" if args.type == "json" else "yaml", "stdin")
        before, version = _stored(args, url)
        answer: dict[str, str] = {}
        if args.key is None:
            after = call(args, "PUT", url, body=change, answer=answer)
        else:
            after = call(args, "PUT", url, {"key": args.key}, body=change, answer=answer)
        _print_change(args, kind, before, after if isinstance(after, dict) else {}, version, answer, stdout)
    elif args.action == "delete":
        call(args, "DELETE", url, {"key": args.key} if args.key is not None else {}, expect_body=False)
        what = f"key {args.key} of the {kind}" if args.key is not None else f"the {kind} and their history"
        stdout.write(f"deleted {what} of {args.resource} at {_level_text(args)} in environment {args.env}\n")
    elif args.action == "history":
        result = call(args, "GET", url, {"history": ""})
        if args.format == "plain":
            rows = [(str(v["version"]) + ("*" if v["version"] == result.get("current") else ""), str(v["createdAt"]),
                     str(v["source"]), str(v["dataHash"])[:12]) for v in result.get("versions", [])]
            _table(("VERSION", "CREATED", "SOURCE", "HASH"), rows, stdout)
        else:
            _print(result, args.format or "json", stdout)
    elif args.action == "revert":
        answer = {}
        call(args, "POST", url, {"revert": str(args.to_version)}, expect_body=False, answer=answer)
        stdout.write(f"the {kind} of {args.resource} at {_level_text(args)} in environment {args.env} are version "
                     f"{args.to_version}'s again (ETag {answer.get('etag', '?')}; recorded as a new version)\n")


def _stored(args: argparse.Namespace, url: str) -> tuple[dict[str, Any], int | None]:
    """What is stored at the level now, and its version (({}, None) when nothing is)."""
    answer: dict[str, str] = {}
    try:
        data = call(args, "GET", url, answer=answer)
    except RequestFailed as error:
        if error.status == 404 and error.not_found == "values":
            return {}, None
        raise
    version = answer.get("x-stead-version", "")
    return (data if isinstance(data, dict) else {}), (int(version) if version.isdigit() else None)


UNSET = object()


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """The values of a document by dotted key (mappings walked into; lists and scalars are leaves)."""
    if isinstance(data, dict) and data:
        found: dict[str, Any] = {}
        for key, value in data.items():
            found.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return found
    return {prefix: data} if prefix else {}


def _shown(value: Any) -> str:
    return "(unset)" if value is UNSET else json.dumps(value, ensure_ascii=False)


def _level_text(args: argparse.Namespace) -> str:
    pairs = level_pairs(args.level)
    return ",".join(f"{name}={value}" for name, value in pairs) if pairs else "the root"


def _print_change(args: argparse.Namespace, kind: str, before: dict[str, Any], after: dict[str, Any],
                  version: int | None, answer: dict[str, str], stdout: IO[str]) -> None:
    """What a set changed (each key: old -> new), where, and the version it became."""
    old, new = _leaves(before), _leaves(after)
    if args.key is not None:  # the key itself, even when it holds a mapping
        try:
            old_value: Any = get_key(before, args.key)
        except KeyPathError:
            old_value = UNSET
        try:
            new_value: Any = get_key(after, args.key)
        except KeyPathError:
            new_value = UNSET
        changes = [] if old_value == new_value and type(old_value) is type(new_value) else [
            (args.key, old_value, new_value)]
    else:
        changes = [(key, old.get(key, UNSET), new.get(key, UNSET)) for key in dict.fromkeys([*old, *new])
                   if old.get(key, UNSET) != new.get(key, UNSET)]
    where = f"{kind} of {args.resource} at {_level_text(args)} in environment {args.env}"
    if not changes:
        stdout.write(f"unchanged: the {where} already held that (version {version or '-'})\n")
        return
    for key, was, now in changes[:50]:
        stdout.write(f"{key}: {_shown(was)} -> {_shown(now)}\n")
    if len(changes) > 50:
        stdout.write(f"... and {len(changes) - 50} more keys\n")
    recorded = _recorded_version(args, answer.get("etag", ""), version)
    stored = answer.get("x-stead-object", "?")
    if recorded is not None:
        stdout.write(f"the {where}: version {recorded} (ConfigValues {stored}, ETag {answer.get('etag', '?')})\n")
    else:
        stdout.write(f"the {where}: ConfigValues {stored}, ETag {answer.get('etag', '?')}; the operator has not "
                     "recorded the new version yet (stead config history shows it once it has)\n")


def _recorded_version(args: argparse.Namespace, etag: str, previous: int | None, within: float = 3.0
                      ) -> int | None:
    """The version the operator recorded for the write with `etag` (it does so within moments of
    the write): polled for `within` seconds, None when not recorded by then."""
    url = values_url(args, "overrides" if args.action == "override" else "values")
    deadline = time.monotonic() + within
    while True:
        answer: dict[str, str] = {}
        try:
            call(args, "GET", url, answer=answer)
        except RequestFailed:
            return None
        version = answer.get("x-stead-version", "")
        if answer.get("etag") == etag and version.isdigit() and (previous is None or int(version) > previous):
            return int(version)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)  # a poll with a deadline: the operator records versions asynchronously


def _read_stdin(stdin: IO[str]) -> str:
    if stdin.isatty():
        raise UsageError("no data: pipe a document on stdin, or give --key with --value")
    text = stdin.read()
    if not text.strip():
        raise UsageError("no data: stdin is empty")
    return text


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], stdout: IO[str]) -> None:
    """A table: drawn by rich on a terminal, fixed-width columns otherwise (for scripts and pipes)."""
    if stdout.isatty():  # rich only on a terminal (a pipe gets plain columns without importing it)
        from rich.console import Console
        from rich.table import Table

        table = Table(*header, box=None, header_style="bold")
        for row in rows:
            table.add_row(*row)
        Console(file=stdout).print(table)
        return
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    for line in (header, *rows):
        stdout.write(" ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() + "\n")


def _print(value: Any, fmt: str, stdout: IO[str]) -> None:
    if fmt == "yaml":
            stdout.write(yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=True))
    else:
        stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _print_key(key: str, value: Any, fmt: str, stdout: IO[str]) -> None:
    """plain: the value as text; json/yaml: `{key: value}`, keeping its type (`fuel config`'s forms)."""
    if fmt == "plain":
        if isinstance(value, str):
            text = value
        elif isinstance(value, dict | list):
            text = json.dumps(value, ensure_ascii=False)
        else:
            text = json.dumps(value)  # true, 1, null: as data, not Python's spelling
        stdout.write(text + "\n")
    else:
        _print({key: value}, fmt, stdout)
