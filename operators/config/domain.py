"""The configuration store as the platform sees it: its kinds, `stead config`, and its routes on the platform's
API server (`operators.runtime.domain.platform_addons` starts that server, with every domain's routes)."""

from __future__ import annotations

from operators.config.api import ConfigStoreApi
from operators.config.cli import add_config_actions
from operators.config.kinds import KINDS
from operators.runtime import Domain

DOMAIN = Domain(name="config", kinds=KINDS, api=ConfigStoreApi.serving, cli={"config": add_config_actions})
