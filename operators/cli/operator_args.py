"""The flags of `stead operator` (and `stead run`, as it was spelled first): the settings tree's
(`operators.runtime.settings`). Parsing them imports nothing else; `operators.cli.operator` runs the operator."""

from __future__ import annotations

import argparse

from operators.runtime.cli.nouns import command
from operators.runtime.settings import add_flags


def add_operator_arguments(run: argparse.ArgumentParser) -> None:
    """The operator's flags (`stead operator`, and `stead run` as it was spelled first): the settings tree's."""
    add_flags(run)
    run.set_defaults(func=command("operators.cli.operator:cmd_run"))
