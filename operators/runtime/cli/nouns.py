"""`Noun`: one command of `stead` (a noun, followed by its action), as `operators.cli` indexes them; and the
CLI's one lazy point, `load` (with `command`, which runs an action through it).

Why the nouns and the actions are named ("module:name") rather than imported: only the parser of the noun on
the command line is built, so only its module is imported; and only the action that runs imports its own
module. `stead --help`, `stead cluster kubeconfig` or `stead actionrun logs` never import the catalog of kinds,
their models, Kopf or the Kubernetes client unless the command needs them. The modules so named import what
they need at their top, as any module does: there is no other lazy import in the CLI.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def load(reference: str) -> Any:
    """The object `reference` ("package.module:name") names, its module imported now: the CLI's one lazy
    point (a unit test resolves every reference the parsers hold)."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


Command = Callable[[argparse.Namespace], int]
"""What an action runs (a parser's `func`): the parsed arguments in, the exit code out."""


@dataclass(frozen=True)
class command:  # lower-case: called as a function, `set_defaults(func=command("module:function"))`
    """The action `reference` names ("module:function": a parser's `func`, a `Command`, or a noun's `handler`),
    its module imported when it runs; called as that function is."""

    reference: str

    @property
    def __name__(self) -> str:  # the function's name, as a function has it
        return self.reference.rpartition(":")[2]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return load(self.reference)(*args, **kwargs)


Actions = Callable[[argparse.ArgumentParser], None]
"""Adds a noun's actions and flags to the noun's parser (`Domain.cli` holds these, by noun)."""


@dataclass(frozen=True)
class Noun:
    """A command of `stead`: its name, what `stead --help` says of it, and its other spellings."""

    name: str
    help: str
    entry: str
    """What adds the noun's actions, "module:function" (`load`ed only for the noun on the command line)."""
    short_names: tuple[str, ...] = ()
    """The short names of the kind the noun is about (declared once, with the kind's names): its aliases."""
    older: tuple[str, ...] = ()
    """Earlier spellings, still accepted."""

    def actions(self) -> Actions:
        """What adds the noun's actions, its module imported now."""
        found: Actions = load(self.entry)
        return found

    def aliases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for a in (*self.short_names, *self.older) if a != self.name))

    def add(self, subparsers: Any) -> argparse.ArgumentParser:
        """Add the noun's parser, with its actions and flags, to `stead`'s subparsers."""
        parser: argparse.ArgumentParser = subparsers.add_parser(self.name, help=self.help, description=self.help)
        self.actions()(parser)
        return parser
