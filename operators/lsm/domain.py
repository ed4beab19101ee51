"""The service lifecycle manager as the platform sees it: its kinds, the inventory API, `stead service`, and the
index of service identities that spares a creation a LIST of every instance (`operators.lsm.identities`)."""

from __future__ import annotations

from collections.abc import Sequence

from operators.lsm.api import InventoryApi
from operators.lsm.cli import add_service_actions
from operators.lsm.identities import IdentityIndex
from operators.lsm.kinds import KINDS
from operators.lsm.notify import Notifier
from operators.runtime import Addon, AddonContext, Domain


def addons(context: AddonContext) -> Sequence[Addon]:
    """The identity index (it taps the watch of every ServiceInstance before the watches start) and the
    notifier (it sends entities' notifications, CloudEvents, off the handler path)."""
    return [IdentityIndex(), Notifier()]


DOMAIN = Domain(name="lsm", kinds=KINDS, api=InventoryApi, cli={"service": add_service_actions}, addons=addons)
