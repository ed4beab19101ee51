"""`Noun`: one command of `stead` (a noun, followed by its action), as `operators.cli` indexes them.

Why the actions are loaded by a function: only the parser of the noun on the command line is built, so
only its module is imported. `stead --help`, `stead cluster kubeconfig` or `stead actionrun logs` never
import the catalog of kinds, their models, Kopf or the Kubernetes client unless the command needs them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Actions = Callable[[argparse.ArgumentParser], None]
"""Adds a noun's actions and flags to the noun's parser (`Domain.cli` holds these, by noun)."""


@dataclass(frozen=True)
class Noun:
    """A command of `stead`: its name, what `stead --help` says of it, and its other spellings."""

    name: str
    help: str
    actions: Callable[[], Actions]
    """Imports and returns what adds the noun's actions (called only for the noun on the command line)."""
    short_names: tuple[str, ...] = ()
    """The short names of the kind the noun is about (declared once, with the kind's names): its aliases."""
    older: tuple[str, ...] = ()
    """Earlier spellings, still accepted."""

    def aliases(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for a in (*self.short_names, *self.older) if a != self.name))

    def add(self, subparsers: Any) -> argparse.ArgumentParser:
        """Add the noun's parser, with its actions and flags, to `stead`'s subparsers."""
        parser: argparse.ArgumentParser = subparsers.add_parser(self.name, help=self.help, description=self.help)
        self.actions()(parser)
        return parser
