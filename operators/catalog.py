"""The kinds this build of Stead serves. The one place a new domain is added."""

from __future__ import annotations

from operators import config, environment, graphs, lsm
from operators.calm import actionrun, app, blueprint
from operators.config.api import ConfigStoreApi
from operators.graphs.api import GraphsApi
from operators.lsm.api import InventoryApi
from operators.runtime.api.extension import ExtensionFactory
from operators.runtime.core.kinds import Kind

KINDS: tuple[Kind, ...] = (
    graphs.with_merged_graphs(environment.KIND),  # an Environment keeps its merged deployment graphs too
    blueprint.KIND, app.KIND, actionrun.KIND, *config.KINDS, *lsm.KINDS, *graphs.KINDS,
)
API_EXTENSIONS: tuple[ExtensionFactory, ...] = (ConfigStoreApi.serving, InventoryApi, GraphsApi)  # the API's routes
