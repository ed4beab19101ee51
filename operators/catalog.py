"""The domains this build of Stead serves, and their kinds. The one place a new domain is added.

Importing this imports every domain whole (kinds, API routes, CLI actions): the operator process and
`stead crds` do; the `stead` command's start-up must not (`operators.cli` indexes the nouns itself)."""

from __future__ import annotations

from operators.calm.domain import DOMAIN as CALM
from operators.config.domain import DOMAIN as CONFIG
from operators.environment.domain import DOMAIN as ENVIRONMENT
from operators.graphs.domain import DOMAIN as GRAPHS
from operators.graphs.kinds import with_merged_graphs
from operators.lsm.domain import DOMAIN as LSM
from operators.runtime.api.extension import ExtensionFactory
from operators.runtime.core.kinds import Kind
from operators.runtime.domain import Domain

DOMAINS: tuple[Domain, ...] = (ENVIRONMENT, CALM, CONFIG, LSM, GRAPHS)


def _extended(kind: Kind) -> Kind:
    """The edges between domains, declared here where the domains meet: a kind of one domain that another
    extends. The one today: an Environment keeps its merged deployment graphs too (graphs extend environment)."""
    return with_merged_graphs(kind) if kind is ENVIRONMENT.kinds[0] else kind


KINDS: tuple[Kind, ...] = tuple(_extended(kind) for domain in DOMAINS for kind in domain.kinds)
"""Every domain's kinds, in the catalog's order."""

API_EXTENSIONS: tuple[ExtensionFactory, ...] = tuple(domain.api for domain in DOMAINS if domain.api is not None)
"""The factories of the domains' routes on the API server, in the catalog's order."""
