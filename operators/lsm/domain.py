"""The service lifecycle manager as the platform sees it: its kinds, the inventory API, `stead service`."""

from __future__ import annotations

from operators.lsm.api import InventoryApi
from operators.lsm.cli import add_service_actions
from operators.lsm.kinds import KINDS
from operators.runtime import Domain

DOMAIN = Domain(name="lsm", kinds=KINDS, api=InventoryApi, cli={"service": add_service_actions})
