"""The configuration store as the platform sees it: its kinds, `stead config`, and the API server that serves
its routes and every domain's (`Domain.api`)."""

from __future__ import annotations

from collections.abc import Sequence

from operators.config.api import ConfigStoreApi
from operators.config.cli import add_config_actions
from operators.config.kinds import KINDS
from operators.runtime import Addon, AddonContext, ApiServer, Domain


def addons(context: AddonContext) -> Sequence[Addon]:
    """The API server, unless `--config-api-port 0`: the configuration routes and those of every domain's
    extension, over TLS (certificates made in $STEAD_HOME/config-api unless `--config-api-cert-dir`)."""
    api = context.settings.config_api
    if not api.port:
        return []
    return [ApiServer(
        listen=api.listen, port=api.port, tls_dir=api.cert_dir or context.home / "config-api",
        mounted=api.cert_dir is not None, basic_secret=api.basic_secret, workers=api.workers,
        client_ca=api.client_ca,
        extensions=tuple(context.api),
        runs_state_dir=context.runs_state_dir,
    )]


DOMAIN = Domain(name="config", kinds=KINDS, api=ConfigStoreApi.serving, cli={"config": add_config_actions},
                addons=addons)
