"""`stead config`: the client of the configuration API (docs/configuration.md), after Fuel's `fuel config`.

What users read is `HELP` (and each action's help), not this docstring.

This module is the parser; the actions are run by `operators.config.cli_run` (its `run_config`), named
("module:function") and imported only when one runs (`operators.runtime.cli.nouns`, the CLI's one lazy
point), and the schema reader (jsonschema) by `cli_schema`, only when a `--value` is typed by the schema.
Parsing imports the standard library only. Where the API is, credentials, TLS and the requests are the CLI
kit's (`operators.runtime.cli.client`), shared with the other commands that talk to the API.
"""

from __future__ import annotations

import argparse
from typing import Any

from operators.runtime import api_arguments
from operators.runtime import command as lazy

TYPES = ("null", "int", "str", "json", "yaml", "bool")

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
        action.set_defaults(func=lazy("operators.config.cli_run:run_config"), action=name)


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
