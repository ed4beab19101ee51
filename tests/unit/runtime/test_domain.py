"""The catalog of domains (`operators.catalog`, `operators.runtime.domain`): the kinds, API routes and addons the
operator gets are those the domains declare, in the catalog's order."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from operators import environment
from operators.calm.api import CalmApi
from operators.calm.vaultgc import VaultCollector
from operators.catalog import API_EXTENSIONS, DOMAINS, KINDS
from operators.config.api import ConfigStoreApi
from operators.graphs.api import GraphsApi
from operators.graphs.autorunner import AutoRunner
from operators.lsm.api import InventoryApi
from operators.lsm.identities import IdentityIndex
from operators.lsm.notify import Notifier
from operators.runtime.api.server import ApiServer
from operators.runtime.domain import AddonContext, platform_addons
from operators.runtime.settings import ConfigApiSettings, OperatorSettings, VaultSettings


def test_the_kinds_are_the_domains_kinds_in_order_the_environment_extended_by_graphs() -> None:
    assert [domain.name for domain in DOMAINS] == ["environment", "calm", "config", "lsm", "graphs"]
    declared = [kind for domain in DOMAINS for kind in domain.kinds]
    assert [kind.kind for kind in KINDS] == [kind.kind for kind in declared] == [
        "Environment", "Blueprint", "App", "ActionRun", "ConfigComponent", "ConfigValues", "Lifecycle",
        "ClusterLifecycle", "ServiceEntity", "ServiceInstance", "ServiceOrder", "DeploymentGraph", "GraphRun"]
    assert KINDS[1:] == tuple(declared[1:])  # the same objects
    assert declared[0] is environment.KIND and KINDS[0] is not environment.KIND  # the one cross-domain edge
    assert KINDS[0].pipeline.phases == environment.KIND.pipeline.phases


def test_the_api_extensions_are_the_domains_factories() -> None:
    assert (CalmApi, ConfigStoreApi.serving, InventoryApi, GraphsApi) == API_EXTENSIONS


def _addons(settings: OperatorSettings, tmp_path: Path) -> list[object]:
    context = AddonContext(settings, tmp_path, tmp_path / "runs", API_EXTENSIONS)
    return [*(addon for domain in DOMAINS for addon in domain.addons(context)), *platform_addons(context)]


def test_the_addons_are_built_from_the_settings(tmp_path: Path) -> None:
    settings = OperatorSettings(vault=VaultSettings(grace_seconds=5.0, collect_seconds=2.0),
                                config_api=ConfigApiSettings(port=9443, workers=2))
    collector, identities, notifier, runner, server = _addons(settings, tmp_path)  # the platform's API server last
    assert isinstance(collector, VaultCollector) and (collector.grace, collector.interval) == (5.0, 2.0)
    assert isinstance(identities, IdentityIndex) and isinstance(notifier, Notifier)
    assert isinstance(runner, AutoRunner)
    assert isinstance(server, ApiServer)
    assert (server.port, server.workers, server.tls_dir, server.mounted, server.client_ca) == (
        9443, 2, tmp_path / "config-api", False, "auto")
    assert server.extensions == API_EXTENSIONS
    assert server.runs_state_dir == tmp_path / "runs"


def test_config_api_port_0_serves_no_api(tmp_path: Path) -> None:
    settings = OperatorSettings(config_api=dataclasses.replace(ConfigApiSettings(), port=0))
    assert [type(addon) for addon in _addons(settings, tmp_path)] == [VaultCollector, IdentityIndex, Notifier,
                                                                      AutoRunner]
