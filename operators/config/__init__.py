"""The configuration store (docs/configuration.md): the ConfigComponent and ConfigValues kinds.

Modules: `keys` (dotted key paths), `levels` (hierarchy points), `merge` (effective values and
the lookup trace), `schema` (the JSON Schema subset of resource definitions), `models` (the
kinds' models and semantic checks), `history` (versions as immutable ConfigMaps),
`repository` (the HTTP API's storage over Kubernetes), `cache` (its reads from a watch-fed
cache), `api` (the store's routes on the runtime's API server, `operators.runtime.api`), `cli` (`stead
config`, on the runtime's CLI kit), `reconcile` (pipeline steps, the admission check, and what a ConfigValues
depends on), `kinds` (the two kinds), `domain` (what the store gives the platform: its kinds, routes, noun and
the API server addon).

The kinds are imported on first use (`operators.config.KINDS`), not with the package: `stead
config` imports `operators.config.cli`, and must not pay for the models and the Kubernetes client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.runtime import front_door

if TYPE_CHECKING:
    from operators.config.kinds import COMPONENT_KIND, KINDS, VALUES_KIND

__all__ = ["COMPONENT_KIND", "KINDS", "VALUES_KIND"]


__getattr__, __dir__ = front_door(__name__, __file__, __all__)
