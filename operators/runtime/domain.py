"""`Domain`: what a domain (calm, config, environment, lsm, graphs, ...) gives the platform, declared once.

Why: a domain used to be wired in by edits all over the platform: its kinds in the catalog, its HTTP
routes as import strings in the operator's command, its addons built inline there too, its nouns in the
CLI. Now each domain states in `operators/<domain>/domain.py`

    DOMAIN = Domain(name="graphs", kinds=KINDS, api=GraphsApi, cli={"graph": add_graph_actions},
                    addons=addons)

and `operators/catalog.py` lists the domains: the one place a domain is added. The operator process,
the API server and `stead crds` read the catalog; none of them names a domain.

The runtime is below every domain (import-linter's layers), so this module names none of their types:
an API extension is the API server's `ExtensionFactory`, an addon anything with the runtime's `Addon` shape.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from operators.runtime.api.server import ApiServer

if TYPE_CHECKING:
    from operators.runtime.api.extension import ExtensionFactory
    from operators.runtime.core.kinds import Kind
    from operators.runtime.engine.addons import Addon
    from operators.runtime.settings import OperatorSettings

Actions = Callable[[argparse.ArgumentParser], None]
"""Adds a noun's actions and their flags to the noun's parser (`stead graph` -> upload, list, ...)."""


@dataclass(frozen=True)
class AddonContext:
    """What a domain's addons are built from: the operator's settings, and what the process resolved from
    them at start-up (which the settings alone do not say)."""

    settings: OperatorSettings
    home: Path
    """$STEAD_HOME: where an addon keeps files it makes (the API server's certificates)."""
    runs_state_dir: Path | None = None
    """Where the operator's workflow runs keep their files (for the routes that serve their logs)."""
    api: Sequence[ExtensionFactory] = ()
    """Every domain's API extension (`Domain.api` of the catalog's domains), for the API server."""


def no_addons(context: AddonContext) -> Sequence[Addon]:
    """The addons of a domain that has none."""
    return ()


def platform_addons(context: AddonContext) -> Sequence[Addon]:
    """The platform's own addons, started after the domains': the API server of every domain's routes (same
    port, TLS and authentication for all), unless `--config-api-port 0`. It belongs to no domain: the
    configuration store's routes are one extension among the others."""
    api = context.settings.config_api
    if not api.port:
        return ()
    return (ApiServer(
        listen=api.listen, port=api.port, tls_dir=api.cert_dir or context.home / "config-api",
        mounted=api.cert_dir is not None, basic_secret=api.basic_secret, workers=api.workers,
        client_ca=api.client_ca, extensions=tuple(context.api), runs_state_dir=context.runs_state_dir,
    ),)


@dataclass(frozen=True)
class Domain:
    """A domain as the platform sees it: its kinds, its API routes, its CLI nouns and its addons."""

    name: str
    """Its package's name under `operators` (`calm`, `graphs`, ...)."""
    kinds: tuple[Kind, ...]
    """The kinds it serves, in the order the catalog gives them to the operator (and `stead crds`)."""
    api: ExtensionFactory | None = None
    """The factory of its routes on the API server; None: it serves none."""
    cli: Mapping[str, Actions] = field(default_factory=dict)
    """Its `stead` nouns, each with what adds its actions. `operators.cli` indexes them by name without
    importing the domain (start-up: `stead --help` must not import the kinds); a test holds the index equal
    to these."""
    addons: Callable[[AddonContext], Sequence[Addon]] = no_addons
    """Builds its addons (parts of the operator process beside the reconcilers: the vault collector, the
    graphs' auto-runner) from the operator's settings. The API server that serves every domain's routes is the
    platform's (`platform_addons`)."""
