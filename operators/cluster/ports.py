"""The loopback ports of one local control plane, and where `stead` takes them from.

Two control planes (two homes: a second checkout, a bench) run side by side when their ports
differ. Each port comes from, first to last: the `stead cluster up` flag, the `$STEAD_*_PORT`
variable, the ports the home's plane last started on (``<home>/ports.json``, kept across `down`,
so that `stead cluster up` or `stead operator --local auto` in that home again finds its plane),
the default. Only the standard library: `stead cluster --help` imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DEFAULT_APISERVER_PORT: Final = 16443
DEFAULT_ETCD_CLIENT_PORT: Final = 12379
DEFAULT_ETCD_PEER_PORT: Final = 12380
DEFAULT_CONTROLLER_MANAGER_PORT: Final = 16257

PORTS_FILE: Final = "ports.json"
"""``<home>/ports.json``: the ports the home's plane last started on."""


@dataclass(frozen=True)
class Ports:
    """The loopback ports one control plane listens on; two planes need disjoint sets."""

    apiserver: int = DEFAULT_APISERVER_PORT
    etcd_client: int = DEFAULT_ETCD_CLIENT_PORT
    etcd_peer: int = DEFAULT_ETCD_PEER_PORT
    controller_manager: int = DEFAULT_CONTROLLER_MANAGER_PORT

    def labelled(self) -> dict[str, int]:
        return {setting.label: getattr(self, setting.field) for setting in PORT_SETTINGS}

    def describe(self) -> str:
        return ", ".join(f"{label} {port}" for label, port in self.labelled().items())


@dataclass(frozen=True)
class PortSetting:
    """One port: its field of `Ports`, its name for people, its flag and its variable."""

    field: str
    label: str
    flag: str
    variable: str

    @property
    def argument(self) -> str:
        """The keyword of `LocalControlPlane` (and the flag's argparse destination)."""
        return f"{self.field}_port"

    @property
    def default(self) -> int:
        return int(getattr(Ports(), self.field))


PORT_SETTINGS: Final = (
    PortSetting("apiserver", "kube-apiserver", "--apiserver-port", "STEAD_APISERVER_PORT"),
    PortSetting("etcd_client", "etcd client", "--etcd-port", "STEAD_ETCD_CLIENT_PORT"),
    PortSetting("etcd_peer", "etcd peer", "--etcd-peer-port", "STEAD_ETCD_PEER_PORT"),
    PortSetting("controller_manager", "kube-controller-manager", "--controller-manager-port",
                "STEAD_CONTROLLER_MANAGER_PORT"),
)


def parse_port(text: str) -> int:
    """A TCP port number, 1 to 65535 (ValueError otherwise)."""
    if not text.strip().isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"expected a port number from 1 to 65535, got {text!r}")
    return int(text)


def remembered_ports(home: Path) -> Ports | None:
    """The ports the plane of `home` last started on, if it ever started (and the file is sound)."""
    try:
        recorded = json.loads((home / PORTS_FILE).read_text())
        return Ports(**{key: int(value) for key, value in recorded.items()})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def choose_ports(given: Mapping[str, int | None], environ: Mapping[str, str], remembered: Ports | None) -> Ports:
    """Each port from `given` (by field name: the flags), else its variable in `environ`, else
    `remembered`, else the default. A variable that is not a port number is a ValueError naming it."""
    chosen: dict[str, int] = {}
    for setting in PORT_SETTINGS:
        value = given.get(setting.field)
        if value is None and environ.get(setting.variable):
            try:
                value = parse_port(environ[setting.variable])
            except ValueError as error:
                raise ValueError(f"${setting.variable}: {error}") from None
        if value is None:
            value = getattr(remembered or Ports(), setting.field)
        chosen[setting.field] = int(value)
    return Ports(**chosen)
