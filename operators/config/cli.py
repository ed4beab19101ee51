"""`stead config`: the client of the configuration API (docs/configuration.md), after Fuel's `fuel config`.

    stead config get      --env E [--level node=FQDN] --resource R [--key a.b.0] [--format json|yaml|plain]
    stead config set      --env E [--level ...] --resource R [--key K --value V [--type T]] [--format json|yaml] < doc
    stead config override (same as set, for the overrides)
    stead config delete   --env E [--level ...] --resource R [--key K] [--overrides]
    stead config history  --env E [--level ...] --resource R [--overrides] [--format json|yaml|plain]
    stead config revert   --env E [--level ...] --resource R --to-version N [--overrides]

`--level` takes `name=value` pairs root first, comma-separated or repeated
(`--level role=controller,node=node-1.domain.tld`); without it, or with Fuel's bare
`--level cluster`, the command addresses the environment root. `get` prints effective values
(as `fuel config` does); `--no-effective` prints what is stored at the level itself.

`--value` without `--type` takes the type the resource's schema declares at that key (Fuel's
`--key deployment_id --value 2` stores the integer 2 where the schema says integer),
and is a string where the schema declares none or allows strings.

The argument checks follow `fuel config`: `--value` only with `--key`; `--type null` takes no
value; `--type int|str|bool` need one; `--type json|yaml` take it from `--value` or stdin; a
whole resource comes from stdin in `--format json|yaml`, so `--value` and `--format` exclude
each other. They live in `check_args`, a pure function, so they are tested without a server.

Credentials: `--token`, else the bearer token of the kubeconfig (`--kubeconfig`, `$KUBECONFIG`),
or `--user NAME` with the password from `$STEAD_CONFIG_PASSWORD` or a prompt. They are never
printed, and never sent in clear text except to a loopback address.
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from base64 import b64encode
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from operators.config.keys import KeyPathError, parse_key
from operators.config.levels import LevelError, parse_levels
from operators.config.schema import schema_at, value_from_text

PREFIX = "/api/v1/config"
DEFAULT_SERVER = "https://127.0.0.1:8443"
TYPES = ("null", "int", "str", "json", "yaml", "bool")
TRUE = ("true", "yes", "on", "1")
FALSE = ("false", "no", "off", "0")


class UsageError(Exception):
    """A command line the argument rules refuse."""


class RequestFailed(Exception):
    """The API answered with an error; `message` is its explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def add_config_commands(subparsers: Any) -> None:
    """Add `config` and its actions to the `stead` command's subparsers."""
    config = subparsers.add_parser("config", help="read and change configuration values (ConfigDB)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = config.add_subparsers(metavar="ACTION")
    specs = [
        ("get", "print the effective values (or one key) of a resource"),
        ("set", "replace the values of a resource, or set one key"),
        ("override", "replace the overrides of a resource, or override one key"),
        ("delete", "delete one key, or the whole values (or overrides) of a resource at a level"),
        ("history", "list the kept versions of the values (or overrides) at a level"),
        ("revert", "make an earlier version current again (recorded as a new version)"),
    ]
    for name, help_ in specs:
        action = actions.add_parser(name, help=help_)
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
    parser.add_argument("--server", default=os.environ.get("STEAD_CONFIG_SERVER", DEFAULT_SERVER),
                        help=f"the API's base URL (default $STEAD_CONFIG_SERVER or {DEFAULT_SERVER})")
    parser.add_argument("--cacert", default=os.environ.get("STEAD_CONFIG_CACERT"),
                        help="CA certificate of the server (default $STEAD_CONFIG_CACERT, else the system's)")
    parser.add_argument("--insecure", action="store_true", help="do not verify the server's certificate")
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig with a bearer token (default $KUBECONFIG)")
    parser.add_argument("--token", help="bearer token (default: the kubeconfig's)")
    parser.add_argument("--user", help="HTTP Basic user; the password comes from $STEAD_CONFIG_PASSWORD or a prompt")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


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


def _namespace(args: argparse.Namespace) -> str:
    if args.namespace:
        return str(args.namespace)
    try:
        from kubernetes import config as kconfig

        path = args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        _, active = kconfig.list_kube_config_contexts(config_file=str(path) if path else None)
        namespace = (active or {}).get("context", {}).get("namespace")
        return str(namespace) if namespace else "default"
    except Exception:  # no kubeconfig at all is fine: the default namespace
        return "default"


def _authorization(args: argparse.Namespace) -> str:
    if args.token:
        return f"Bearer {args.token}"
    if args.user:
        password = os.environ.get("STEAD_CONFIG_PASSWORD")
        if password is None:
            password = getpass.getpass(f"password for {args.user}: ")
        return "Basic " + b64encode(f"{args.user}:{password}".encode()).decode()
    from operators.runtime.kube.client import bearer_token, load_configuration

    try:
        token = bearer_token(load_configuration(args.kubeconfig))
    except Exception as error:
        raise UsageError(f"no credentials: pass --token or --user (kubeconfig: {type(error).__name__})") from None
    if not token:
        raise UsageError("no credentials: the kubeconfig has no bearer token; pass --token or --user")
    return f"Bearer {token}"


def _ssl_context(args: argparse.Namespace) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=args.cacert) if args.cacert else ssl.create_default_context()
    if args.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _check_transport(url: str) -> None:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "https":
        return
    host = parsed.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parsed.scheme != "http" or not loopback:
        raise UsageError(f"refusing to send credentials to {parsed.scheme}://{host}: use https")


NO_BODY = object()


def call(args: argparse.Namespace, method: str, url: str, query: dict[str, str] | None = None,
         body: Any = NO_BODY, expect_body: bool = True) -> Any:
    """One API request; errors become `RequestFailed` with the server's message."""
    _check_transport(url)
    params = {"namespace": _namespace(args), **(query or {})}
    full = url + "?" + "&".join(f"{k}={urllib.parse.quote(v, safe='')}" if v else k for k, v in params.items())
    data = None if body is NO_BODY else json.dumps(body).encode()  # JSON null is a body too
    request = urllib.request.Request(full, data=data, method=method, headers={
        "Authorization": _authorization(args), "Accept": "application/json",
        **({"Content-Type": "application/json"} if data is not None else {}),
    })
    try:
        with urllib.request.urlopen(request, context=_ssl_context(args), timeout=30) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        raw = error.read().decode(errors="replace")
        try:
            message = str(json.loads(raw).get("message") or raw)
        except (ValueError, AttributeError):
            message = raw[:300] or error.reason
        raise RequestFailed(error.code, message) from None
    except urllib.error.URLError as error:
        raise RequestFailed(0, f"cannot reach {args.server}: {error.reason}") from None
    if not expect_body or not text:
        return None
    return json.loads(text)


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
            call(args, "PUT", url, body=document, expect_body=False)
        else:
            if args.value is not None and args.type is None:
                value = value_from_text(args.value, _schema_at_key(args))
            elif args.value is not None or args.type == "null":
                value = typed_value(args.value, args.type)
            else:
                value = parse_document(_read_stdin(stdin), "json" if args.type == "json" else "yaml", "stdin")
            call(args, "PUT", url, {"key": args.key}, body=value, expect_body=False)
    elif args.action == "delete":
        call(args, "DELETE", url, {"key": args.key} if args.key is not None else {}, expect_body=False)
    elif args.action == "history":
        result = call(args, "GET", url, {"history": ""})
        if args.format == "plain":
            rows = [(str(v["version"]) + ("*" if v["version"] == result.get("current") else ""), str(v["createdAt"]),
                     str(v["source"]), str(v["dataHash"])[:12]) for v in result.get("versions", [])]
            _table(("VERSION", "CREATED", "SOURCE", "HASH"), rows, stdout)
        else:
            _print(result, args.format or "json", stdout)
    elif args.action == "revert":
        call(args, "POST", url, {"revert": str(args.to_version)}, expect_body=False)


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
                return schema_at(definition.get("schema"), parse_key(args.key))
    except (RequestFailed, KeyPathError, AttributeError):
        return None
    return None


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
