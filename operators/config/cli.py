"""`stead config`: the client of the configuration API (docs/configuration.md), after Fuel's `fuel config`.

What users read is `HELP` (and each action's help), not this docstring.

The argument checks follow `fuel config`: `--value` only with `--key`; `--type null` takes no
value; `--type int|str|bool` need one; `--type json|yaml` take it from `--value` or stdin; a
whole resource comes from stdin in `--format json|yaml`, so `--value` and `--format` exclude
each other. They live in `check_args`, a pure function, so they are tested without a server.

Start-up is kept short: this module imports only the standard library's light modules at the
top; yaml, the schema reader (jsonschema) and rich are imported where they are needed. Where the API
is, credentials, TLS and the requests are the CLI kit's (`operators.runtime.cli.client`), shared with
the other commands that talk to the API.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from operators.config.keys import KeyPathError, parse_key
from operators.runtime import RequestFailed, UsageError, api_arguments, call

if TYPE_CHECKING:
    pass

PREFIX = "/api/v1/config"
TYPES = ("null", "int", "str", "json", "yaml", "bool")
TRUE = ("true", "yes", "on", "1")
FALSE = ("false", "no", "off", "0")

HELP = """\
Read and change configuration values: the values and overrides of a resource at each level of an
environment's hierarchy, merged from the root down, every change kept as a version. `stead
config` talks to the configuration API that the operator serves (`stead operator`, on
https://127.0.0.1:8443 by default).

  stead config get      --env E [--level role=R,node=N] --resource R [--key a.b] [--trace]
  stead config set      --env E [--level ...] --resource R --key K --value V [--type T]
  stead config set      --env E [--level ...] --resource R [--format yaml] < values.yaml
  stead config override (as set, for the overrides, which win over the values of their level)
  stead config delete   --env E [--level ...] --resource R [--key K] [--overrides]
  stead config history  --env E [--level ...] --resource R [--overrides]
  stead config revert   --env E [--level ...] --resource R --to-version N [--overrides]

Levels: --level takes name=value pairs from the root down, comma-separated or repeated
(--level role=controller,node=node-1.domain.tld). A node with one role may be named alone
(--level node=node-1.domain.tld). Without --level, or with --level cluster, the environment's
root.

get prints the effective values, merged from the root down to the level (--no-effective: only
what is stored at the level itself; --trace: which level gave each key). set --key K --value V
stores V with the type the resource's schema declares at K (2 is a number where the schema
says integer), else as text; --type chooses one. set prints what changed.

Credentials, the first that is there: --token, $STEAD_CONFIG_TOKEN, --user NAME (HTTP Basic,
the password from $STEAD_CONFIG_PASSWORD or a prompt), then the kubeconfig's user (--kubeconfig,
$KUBECONFIG, ~/.kube/config, else the local control plane's in $STEAD_HOME): its token, token
file or client certificate, as kubectl uses them. They are never printed, and never sent
unencrypted except to a loopback address.

Where: --server ($STEAD_CONFIG_URL, default https://127.0.0.1:8443); its CA --cacert
($STEAD_CONFIG_CACERT, default the system's and the one `stead operator` writes in
$STEAD_HOME/config-api/ca.crt); -n NAMESPACE (default the kubeconfig context's, else default).

Exit status: 0 done, 1 the API refused or could not be reached (its reason is printed), 2 a
command line that cannot work.
"""


def add_config_commands(subparsers: Any) -> None:
    """Add `config` and its actions to the `stead` command's subparsers."""
    add_config_actions(subparsers.add_parser("config", help="read and change configuration values"))


def add_config_actions(config: argparse.ArgumentParser) -> None:
    """Add the actions of `stead config` to its parser (described by `HELP`)."""
    config.description = HELP
    config.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = config.add_subparsers(metavar="ACTION")
    specs = [
        ("get", "print the effective values (or one key) of a resource",
         "Print the values of a resource at a level: merged from the root down (the effective values), "
         "or, with --no-effective, only what is stored at the level."),
        ("set", "replace the values of a resource, or set one key",
         "Set one key (--key K --value V), or replace all the values at the level with a JSON or YAML "
         "document read from stdin. Prints what changed."),
        ("override", "replace the overrides of a resource, or override one key",
         "As set, for the overrides: at each level they are applied after the values, so they win over "
         "them and over the levels above. Prints what changed."),
        ("delete", "delete one key, or the whole values (or overrides) of a resource at a level",
         "Delete one key (--key), or the values (--overrides: the overrides) stored at the level, with "
         "their history."),
        ("history", "list the kept versions of the values (or overrides) at a level",
         "List the kept versions of the values (--overrides: the overrides) stored at the level; the "
         "current one is marked with *."),
        ("revert", "make an earlier version current again (recorded as a new version)",
         "Put the data of a kept version back in force. The history keeps every version: the revert is "
         "recorded as a new one."),
    ]
    for name, help_, description in specs:
        action = actions.add_parser(name, help=help_, description=description)
        _common(action)
        if name in ("get", "set", "override", "delete"):
            action.add_argument("--key", help="dotted key path, e.g. nova.debug or servers.0.address")
        if name in ("set", "override"):
            action.add_argument("--value", help="the value for --key (see --type)")
            action.add_argument("--type", choices=TYPES, help="type of --value (default: the type the resource's "
                                "schema declares at --key, else str); json and yaml may come from stdin; null "
                                "takes no value")
            action.add_argument("--format", choices=("json", "yaml"), help="format of the document on stdin "
                                "(default json)")
        else:
            action.add_argument("--format", choices=("json", "yaml", "plain"),
                                help="output format (default json; plain prints a key's value as text)")
        if name == "get":
            action.add_argument("--no-effective", dest="effective", action="store_false",
                                help="only what is stored at this level, not the merged values")
            action.add_argument("--trace", action="store_true", help="show which level gave each key")
            action.add_argument("--version", type=_positive, help="read this version of the values at the level")
        if name in ("get", "delete", "history", "revert"):
            action.add_argument("--overrides", action="store_true",
                                help="address the overrides instead of the values")
        if name == "revert":
            action.add_argument("--to-version", type=_positive, required=True, help="the version to go back to")
        action.set_defaults(func=run_config, action=name)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="the environment (its Environment object's name)")
    parser.add_argument("--level", action="append", default=[],
                        help="name=value, root first; comma-separated or repeated (node=node-1.domain.tld)")
    parser.add_argument("--resource", required=True, help="the resource (data source), e.g. astute")
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's, else default)")
    api_arguments(parser)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


# --- argument checks (pure) ---------------------------------------------------------------


def check_args(args: argparse.Namespace) -> list[str]:
    """Everything wrong with a command line beyond argparse's own checks: the argument rules."""
    from operators.config.levels import LevelError

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
    from operators.config.levels import parse_levels

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
    import yaml

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
                from operators.config.schema.reading import value_from_text

                change = value_from_text(args.value, _schema_at_key(args))
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


def _schema_at_key(args: argparse.Namespace) -> Any:
    """The resource's schema at `--key`, from the components the environment enables; None when
    there is none or it cannot be read (the value is then a string)."""
    base = str(args.server).rstrip("/") + PREFIX
    try:
        environment = call(args, "GET", f"{base}/environments/{urllib.parse.quote(args.env, safe='')}")
        for component in environment.get("components") or []:
            view = call(args, "GET", f"{base}/components/{urllib.parse.quote(str(component), safe='')}")
            definition = (view.get("resource_definitions") or {}).get(args.resource)
            if definition is not None:
                from operators.config.schema.reading import schema_at

                return schema_at(definition.get("schema"), parse_key(args.key))
    except (RequestFailed, KeyPathError, AttributeError):
        return None
    return None


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
            from operators.config.keys import get_key

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
    import time

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
    if stdout.isatty():
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
        import yaml

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
