"""Stead's operator suite: the runtime and one module per domain kind.

The public surface is small on purpose: the CLI (`operators.cli`) and the catalog of kinds
(`operators.catalog`). Everything else is reached through them.
"""

import os
from pathlib import Path

GROUP = "stead.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


def stead_home() -> Path:
    """Where Stead keeps its local state: ``$STEAD_HOME``, else ``$XDG_DATA_HOME/stead``
    (``~/.local/share/stead``). Here, standard library only, for every command that needs it."""
    explicit = os.environ.get("STEAD_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "stead"
