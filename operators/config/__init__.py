"""The configuration store (docs/configuration.md): the ConfigComponent and ConfigValues kinds.

Modules: `keys` (dotted key paths), `levels` (hierarchy points), `merge` (effective values and
the lookup trace), `schema` (the JSON Schema subset of resource definitions), `models` (the
kinds' models and semantic checks), `history` (versions as immutable ConfigMaps),
`repository` (the HTTP API's storage over Kubernetes), `cache` (its reads from a watch-fed
cache), `auth` (TokenReview/SubjectAccessReview and Basic), `api` (the HTTP API's routes and handlers),
`server` (the API as an addon of the operator process, over TLS), `cli` (`stead config`; it reads the
kubeconfig with `operators.runtime.kube.kubeconfig`), `reconcile` (pipeline steps, the admission check, and
what a ConfigValues depends on), `kinds` (the two kinds).

The kinds are imported on first use (`operators.config.KINDS`), not with the package: `stead
config` imports `operators.config.cli`, and must not pay for the models and the Kubernetes client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.runtime.lazy import front_door

if TYPE_CHECKING:
    from operators.config.kinds import COMPONENT_KIND, KINDS, VALUES_KIND

__all__ = ["COMPONENT_KIND", "KINDS", "VALUES_KIND"]


__getattr__, __dir__ = front_door(__name__, __file__, __all__)
