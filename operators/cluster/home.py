"""Where a local control plane keeps its state (only the standard library: `stead cluster kubeconfig`
prints a path without importing what starting a plane needs)."""

from __future__ import annotations

from pathlib import Path

from operators import stead_home

default_home = stead_home
"""The home of the local control plane: Stead's own (`operators.stead_home`)."""


def kubeconfig_path(home: Path) -> Path:
    """The admin kubeconfig of the plane of `home` (`LocalControlPlane.kubeconfig_path`)."""
    return home.expanduser().absolute() / "kubeconfig"
