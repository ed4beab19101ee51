"""The Calm domain as the platform sees it: blueprints, apps and action runs, their nouns, the vault collector,
and its API routes (an ActionRun's whole output, `operators.calm.api`)."""

from __future__ import annotations

from collections.abc import Sequence

from operators.calm import actionrun, app, blueprint
from operators.calm.api import CalmApi
from operators.calm.cli import add_actionrun_actions, add_app_actions, add_blueprint_actions
from operators.calm.vaultgc import VaultCollector
from operators.runtime import Addon, AddonContext, Domain


def addons(context: AddonContext) -> Sequence[Addon]:
    """The vault collector: the secrets of Calm's objects (blueprints' credentials) that no object refers to
    any more are removed, after `--vault-grace-seconds`."""
    vault = context.settings.vault
    return [VaultCollector(grace=vault.grace_seconds, interval=vault.collect_seconds)]


DOMAIN = Domain(
    name="calm",
    kinds=(blueprint.KIND, app.KIND, actionrun.KIND),
    api=CalmApi,
    cli={"app": add_app_actions, "actionrun": add_actionrun_actions, "blueprint": add_blueprint_actions},
    addons=addons,
)
