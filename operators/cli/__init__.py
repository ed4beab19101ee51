"""`stead` (also `kubectl stead`): run the operators, generate CRDs, drive the local control plane.

Split by job: this module is `main`, the index of the nouns and `stead crds`; `operators.cli.operator` is
`stead operator` (its flags are the settings tree's, `operators.runtime.settings`); `operators.cli.cluster`
is `stead cluster` and the local control plane `stead operator --local` starts. The domains' nouns are
their own (`Domain.cli`), built with the CLI kit (`operators.runtime.cli`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from operators.calm.names import ACTIONRUN_ACTIONS, ACTIONRUN_SHORT_NAMES, APP_SHORT_NAMES, BLUEPRINT_SHORT_NAMES
from operators.runtime.cli.nouns import Noun, command

CRD_DIRS = (Path("crds"), Path("charts/stead/files/crds"))  # checked in, and the chart's copy
POLICIES_DIR = Path("charts/stead/files/policies")  # the shard-label ValidatingAdmissionPolicy, for the chart
OBJECTS_DIR = Path("charts/stead/files/objects")  # the objects Stead ships (built-in ClusterLifecycles), for the chart

SCHEME = """\
Commands are the kinds' names as kubectl knows them, followed by an action, and take the
kinds' short names too: `stead actionrun logs R` is `stead ar logs R` or `stead run logs R`,
as `kubectl get actionrun R` is `kubectl get ar R`. `stead run` followed by operator flags is the
older spelling of `stead operator`. `stead COMMAND -h` shows a command's
actions and flags.
"""


EPIPE_EXIT = 141
"""The exit code of a command whose reader went away (`stead service get X | head -1`): what a shell reports
for a tool that SIGPIPE ended (128 + 13), quietly, as such tools end."""


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given == ["run"]:  # once an operator with every default: now too easily typed for `stead run logs R`
        print("stead run: the operator is `stead operator` (`stead run` with its flags still works); "
              "`stead run logs|abort R` follows or aborts an ActionRun", file=sys.stderr)
        return 2
    words = canonical_argv(given)
    parser = _parser(words)
    args = parser.parse_args(words)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is seen below rather than at the interpreter's exit
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        quiet_stdout()
        return EPIPE_EXIT
    return code


def quiet_stdout() -> None:
    """The reader of stdout has gone: what is still buffered goes nowhere, so that the interpreter's last
    flush does not print 'Exception ignored ... BrokenPipeError' (Python's documented way, see `signal`)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# --- the command nouns ------------------------------------------------------------------------------
# Each noun names ("module:function") what adds its actions; only the noun on the command line is loaded
# (`operators.runtime.cli.nouns.load`, the CLI's one lazy point), and only the action that runs imports its
# module: `stead --help`, `stead cluster kubeconfig` or `stead actionrun logs` never import the catalog of
# kinds, their models, Kopf or the Kubernetes client unless the command itself needs them.


def add_crds_actions(crds: argparse.ArgumentParser) -> None:
    crds.add_argument("--dir", type=Path, action="append", help="write here instead (repeatable)")
    crds.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    crds.set_defaults(func=command("operators.cli.crds:cmd_crds"))


NOUNS: tuple[Noun, ...] = (
    Noun("operator", "run the operators in the foreground",
         "operators.cli.operator_args:add_operator_arguments", older=("run",)),
    Noun("app", "Apps: launch one from a blueprint, run an action",
         "operators.calm.cli:add_app_actions", short_names=APP_SHORT_NAMES),
    Noun("actionrun", "ActionRuns: logs (follow one), abort",
         "operators.calm.cli:add_actionrun_actions", short_names=ACTIONRUN_SHORT_NAMES, older=("runs",)),
    Noun("blueprint", "Blueprints: deps (their dependencies, one per line)",
         "operators.calm.cli:add_blueprint_actions", short_names=BLUEPRINT_SHORT_NAMES),
    Noun("service", "service instances: catalog, list, create, get, update, set-state, migrate, delete, log, "
         "diff, diagnose, expert (set-state, edit, destroy)",
         "operators.lsm.cli:add_service_actions"),
    Noun("graph", "deployment graphs: upload, download, list, delete, execute (a GraphRun), plan, status, logs, "
         "history", "operators.graphs.cli:add_graph_actions"),
    Noun("config", "read and change configuration values (the configuration API)",
         "operators.config.cli:add_config_actions"),
    Noun("console", "the web console: serve it (every kind in a browser, with each user's own rights)",
         "operators.cli.console:add_console_arguments"),
    Noun("cluster", "the local control plane (kube-apiserver, etcd, controller-manager)",
         "operators.cli.cluster:cluster_actions"),
    Noun("crds", "write crds/*.yaml and the chart's copies from the models (or --check them)",
         "operators.cli:add_crds_actions"),
)
"""The index of the nouns: the platform's (operator, cluster, crds) and the domains' (`Domain.cli`, which a
test holds equal to this), written here so that start-up imports no domain."""

PLATFORM_NOUNS = ("operator", "console", "cluster", "crds")


def _noun_index(words: Sequence[str]) -> int | None:
    """Where the noun is: the first word that is not an option (`stead` itself takes only -h)."""
    return next((i for i, word in enumerate(words) if not word.startswith("-")), None)


def canonical_argv(argv: Sequence[str]) -> list[str]:
    """The command line with its noun spelled canonically: a kind's short name or an older spelling
    becomes the noun (`ar`, `run`, `runs` -> `actionrun`, `bp` -> `blueprint`). `run` is both the
    ActionRun's short name and the operator's older spelling: `stead run logs|abort ...` is about
    ActionRuns, `stead run` with anything else (operator flags) starts the operator (`main` refuses a bare
`stead run`)."""
    words = list(argv)
    i = _noun_index(words)
    if i is None or words[i] in {noun.name for noun in NOUNS}:
        return words
    if words[i] == "run":
        words[i] = "actionrun" if words[i + 1:i + 2] and words[i + 1] in ACTIONRUN_ACTIONS else "operator"
        return words
    for noun in NOUNS:
        if words[i] in noun.aliases():
            words[i] = noun.name
            break
    return words


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of `argv` (canonical): the noun it names is built whole, the others as names only.
    Without a noun, `stead --help` lists every noun with its aliases."""
    i = _noun_index(argv)
    named = argv[i] if i is not None else None
    listing = named not in {noun.name for noun in NOUNS}
    parser = argparse.ArgumentParser(prog="stead", usage="%(prog)s [-h] [--version] COMMAND [ACTION] [ARGS ...]",
                                     description=__doc__, epilog=SCHEME if listing else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version of Stead and exit")
    sub = parser.add_subparsers(prog="stead", metavar="COMMAND", help=argparse.SUPPRESS, title="commands",
                                description=commands_table() if listing else None)
    for noun in NOUNS:
        if noun.name == named:
            noun.add(sub)
        else:
            sub.add_parser(noun.name, help=argparse.SUPPRESS)
    return parser


class _Version(argparse.Action):
    """`stead --version`: the installed distribution's version (looked up only when asked)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        # here, not above: importlib.metadata costs every command's start-up, and only --version needs it
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"stead {version('stead')}")
        except PackageNotFoundError:
            print("stead (not installed: run from a source tree)")
        parser.exit()


def commands_table() -> str:
    """The nouns of `stead --help`, each with its aliases (`stead COMMAND -h` shows its actions)."""
    names = [", ".join((noun.name, *noun.aliases())) for noun in NOUNS]
    width = max(len(name) for name in names) + 2
    rows = [f"{name:<{width}}{noun.help}" for name, noun in zip(names, NOUNS, strict=True)]
    return "\n".join(rows)
