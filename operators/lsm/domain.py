"""The service lifecycle manager as the platform sees it: its kinds, the inventory API, `stead service`."""

from __future__ import annotations

from collections.abc import Sequence

from operators.lsm.api import InventoryApi
from operators.lsm.cli import add_service_actions
from operators.lsm.kinds import KINDS
from operators.lsm.notify import Notifier
from operators.runtime import Addon, AddonContext, Domain


def addons(context: AddonContext) -> Sequence[Addon]:
    """The notifier: it sends entities' notifications (CloudEvents) off the handler path."""
    return [Notifier()]


DOMAIN = Domain(name="lsm", kinds=KINDS, api=InventoryApi, cli={"service": add_service_actions}, addons=addons)
