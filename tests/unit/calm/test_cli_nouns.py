"""The command line's scheme: its nouns are the kinds' names, their aliases the kinds' short names (one
source: the Kind), `stead run` still starts the operator, `stead --help` shows all of it, and a command
imports only what it uses."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from operators.catalog import KINDS
from operators.cli import NOUNS, PLATFORM_NOUNS, _parser, canonical_argv, main

ROOT = Path(__file__).resolve().parents[3]


def test_the_nouns_of_kinds_are_their_names_and_their_aliases_are_their_short_names() -> None:
    from operators.calm import actionrun, app, blueprint

    by_name = {noun.name: noun for noun in NOUNS if noun.short_names}
    assert set(by_name) == {"app", "actionrun", "blueprint"}
    for module in (app, actionrun, blueprint):
        kind = module.KIND
        noun = by_name[kind.kind.lower()]  # as kubectl knows it: `kubectl get actionrun`
        assert kind in KINDS
        assert noun.short_names == kind.short_names  # declared once (operators.calm.names), read without the kind
        assert set(kind.short_names) - {noun.name} <= set(noun.aliases())
    assert actionrun.KIND.short_names == ("ar", "run")
    assert {noun.name: noun.aliases() for noun in NOUNS if noun.aliases()} == {
        "operator": ("run",), "actionrun": ("ar", "run", "runs"), "blueprint": ("bp",)}


def test_the_index_of_nouns_is_what_the_domains_declare() -> None:
    """`operators.cli` indexes the domains' nouns itself (start-up imports no domain): the same nouns, reaching
    the same actions, as the catalog's `Domain.cli`."""
    from operators.catalog import DOMAINS

    declared = {name: actions for domain in DOMAINS for name, actions in domain.cli.items()}
    indexed = {noun.name: noun.actions() for noun in NOUNS if noun.name not in PLATFORM_NOUNS}
    assert indexed == declared


@pytest.mark.parametrize(("argv", "canonical"), [
    (["ar", "logs", "r"], ["actionrun", "logs", "r"]),
    (["run", "abort", "r", "-n", "x"], ["actionrun", "abort", "r", "-n", "x"]),
    (["runs", "logs", "r"], ["actionrun", "logs", "r"]),
    (["bp", "deps", "three-tier"], ["blueprint", "deps", "three-tier"]),
    (["run", "--local", "auto"], ["operator", "--local", "auto"]),
    (["-h"], ["-h"]),
    ([], []),
    (["nosuch", "x"], ["nosuch", "x"]),  # argparse says it is no command
])
def test_the_noun_is_spelled_canonically(argv: list[str], canonical: list[str]) -> None:
    assert canonical_argv(argv) == canonical


def test_every_spelling_reaches_the_same_action() -> None:
    for argv in (["actionrun", "logs", "r"], ["ar", "logs", "r"], ["run", "logs", "r"], ["runs", "logs", "r"]):
        words = canonical_argv(argv)
        args = _parser(words).parse_args(words)
        assert (args.handler.__name__, args.run) == ("logs", "r")
    for argv in (["blueprint", "deps", "bp1", "-o", "yaml"], ["bp", "deps", "bp1", "-o", "yaml"]):
        words = canonical_argv(argv)
        args = _parser(words).parse_args(words)
        assert (args.handler.__name__, args.name, args.output) == ("deps", "bp1", "yaml")
    for argv in (["operator", "--local", "auto"], ["run", "--local", "auto"]):
        words = canonical_argv(argv)
        args = _parser(words).parse_args(words)
        assert (args.func.__name__, args.local) == ("cmd_run", "auto")


def test_help_shows_the_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for names in ("operator, run ", "actionrun, ar, run, runs ", "blueprint, bp ", "app ", "config ", "cluster "):
        assert any(line.startswith(f"  {names}") for line in lines), names
    assert "`stead actionrun logs R` is `stead ar logs R` or `stead run logs R`" in " ".join(out.split())
    assert "older spelling of `stead operator`" in " ".join(out.split())
    assert main([]) == 2
    assert "actionrun, ar, run, runs" in capsys.readouterr().out


def test_a_bare_stead_run_starts_nothing_and_names_stead_operator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"]) == 2  # it once started an operator with every default
    err = capsys.readouterr().err
    assert "`stead operator`" in err and "stead run logs" in err


def _actions(parser: argparse.ArgumentParser) -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _actions(sub) if sub is not parser else set()
                found.add(name)
    return found


@pytest.mark.parametrize("noun", ["app", "actionrun", "blueprint", "service", "graph"])
def test_help_names_every_action_of_a_noun(noun: str) -> None:
    """`stead --help` is where a user learns the actions (it once left out `graph logs` and `graph history`)."""
    (command,) = (n for n in NOUNS if n.name == noun)
    noun_parser = _parser([noun])._subparsers._group_actions[0].choices[noun]  # type: ignore[union-attr]
    actions = {name for name in _actions(noun_parser)}
    assert actions
    for action in actions:
        assert re.search(rf"\b{re.escape(action)}\b", command.help), (noun, action)


def _modules_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


HEAVY = ("operators.catalog", "operators.calm.models", "operators.calm.actionrun", "operators.config",
         "operators.runtime.kube.client", "pydantic", "kopf", "aiohttp", "kubernetes", "rich", "lmdb", "luigi",
         "granian", "yaml", "cryptography", "networkx")


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def test_help_and_the_parsers_import_nothing_heavy() -> None:
    helped = _modules_after("import contextlib, io, operators.cli as c\n"
                            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                            "    c.main(['--help'])")
    assert _heavy(helped) == set()
    for argv in (["actionrun", "logs", "r"], ["bp", "deps", "x"], ["app", "run", "a", "b"], ["cluster", "up"],
                 ["operator", "--local", "auto"]):
        code = f"import operators.cli as c\nw = c.canonical_argv({argv!r})\nc._parser(w).parse_args(w)"
        parsed = _modules_after(code)
        assert _heavy(parsed) == set(), argv


def test_kubeconfig_and_kubectl_paths_import_nothing_heavy(tmp_path: Path) -> None:
    for action in ("kubeconfig", "kubectl"):
        modules = _modules_after(f"import contextlib, io, os, operators.cli as c\nos.environ['STEAD_HOME'] = "
                                 f"{str(tmp_path)!r}\nwith contextlib.redirect_stdout(io.StringIO()), "
                                 f"contextlib.redirect_stderr(io.StringIO()):\n    c.main(['cluster', {action!r}])")
        assert _heavy(modules) == set(), action


CLUSTER_HEAVY = ("kubernetes", "aiohttp", "urllib3", "requests", "pydantic", "kopf", "operators.runtime.kube.client",
                 "operators.catalog", "operators.calm.models", "operators.graphs.models", "operators.graphs.api",
                 "operators.lsm.models", "operators.config.models", "operators.config.api", "rich", "lmdb", "luigi",
                 "granian", "cryptography", "networkx", "asyncio")
"""What a command that talks to the cluster must not import (issue 27: importing the `kubernetes` package and
aiohttp was most of the 0.9-1.9 s of `stead actionrun logs`, asyncio a third of what was left: the commands
run without an event loop, `run_to_end`); PyYAML it needs, for the kubeconfig."""


@pytest.mark.parametrize("argv", [["actionrun", "logs", "r"], ["service", "list", "e"], ["graph", "list"]])
def test_the_cluster_commands_import_neither_the_kubernetes_client_nor_aiohttp(tmp_path: Path, argv: list[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    modules = _modules_after(f"import contextlib, io, operators.cli as c\nerr = io.StringIO()\n"
                             f"with contextlib.redirect_stderr(err):\n"
                             f"    code = c.main({[*argv, '--kubeconfig', str(kubeconfig)]!r})\n"
                             f"assert code == 1 and 'cannot connect to host 127.0.0.1:1' in err.getvalue(), "
                             f"err.getvalue()")
    assert {m for m in modules if any(m == h or m.startswith(h + ".") for h in CLUSTER_HEAVY)} == set()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert (exit_info.value.code, capsys.readouterr().out) == (0, f"stead {version('stead')}\n")


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every parser under it (a noun's actions, their sub-actions)."""
    found = [parser]
    for action in parser._actions:  # argparse keeps its subparsers here, and only here
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += _parsers(child)
    return found


@pytest.mark.parametrize("noun", [noun.name for noun in NOUNS])
def test_every_action_a_parser_names_is_a_function_that_exists(noun: str) -> None:
    """The CLI names its actions ("module:function", imported when they run): a misspelt one would fail only
    when a user runs it. Every action of every noun resolves, here, to a callable."""
    from operators.runtime.cli.nouns import command, load

    actions = [parser.get_default(key) for parser in _parsers(_parser([noun])) for key in ("func", "handler")]
    actions = [action for action in actions if action is not None]
    assert actions, f"stead {noun}: no action"
    for action in actions:  # named ones are loaded now; the others are functions already
        assert callable(load(action.reference) if isinstance(action, command) else action), action
