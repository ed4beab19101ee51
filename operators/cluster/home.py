"""Where a local control plane keeps its state (only the standard library: `stead cluster kubeconfig`
prints a path without importing what starting a plane needs)."""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """``$STEAD_HOME``, else ``$XDG_DATA_HOME/stead`` (``~/.local/share/stead``)."""
    explicit = os.environ.get("STEAD_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "stead"


def kubeconfig_path(home: Path) -> Path:
    """The admin kubeconfig of the plane of `home` (`LocalControlPlane.kubeconfig_path`)."""
    return home.expanduser().absolute() / "kubeconfig"
