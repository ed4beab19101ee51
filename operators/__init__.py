"""Stead's operator suite: the runtime and one module per domain kind.

The public surface is small on purpose: the CLI (`operators.cli`) and the catalog of kinds
(`operators.catalog`). Everything else is reached through them.
"""

GROUP = "stead.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
