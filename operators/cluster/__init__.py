"""A local Kubernetes control plane built from the Go module proxy and run on loopback.

``stead cluster up|down|status|kubeconfig|kubectl|build`` and the e2e session fixture use these
names; everything else in the package is an implementation detail:

    build.py         building the binaries from the Go module proxy and caching them
    versions.py      the pinned Kubernetes, etcd and Helm versions
    home.py          where a plane keeps its state
    ports.py         the ports of one plane, and where `stead` takes them from
    controlplane.py  the components' start, health, up/down/status
    planeconfig.py   what they are told: their flags, kubeconfigs, audit policy, admission config
    node.py          a real node beside it: containerd, kubelet, scheduler, up/down/status
    nodeconfig.py    what the node's processes are told: containerd, CNI and kubelet configuration
    nodehost.py      what the node changes on the machine and down undoes: bridge, NAT rule, cgroups, mounts
    images.py        the Pods' sandbox image (pause), built and packed without a registry
    pki.py           which certificates the plane needs (made by operators.runtime.serving.certs)
    processes.py     pid records, /proc inspection, pidfd signalling, port owners
    probes.py        health endpoints and whether a kubeconfig reaches a cluster
    atomicwrite.py   files written whole or not at all

The names are imported from their modules when first used, so that `stead cluster kubeconfig`
or `stead cluster --help` do not import what starting a plane needs (cryptography, YAML, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.runtime.lazy import front_door

if TYPE_CHECKING:
    from operators.cluster.build import Binaries, ControlPlaneError, cache_root, cached_kubectl, ensure_binaries
    from operators.cluster.controlplane import ClusterInfo, ClusterStatus, LocalControlPlane, PortInUse
    from operators.cluster.home import default_home
    from operators.cluster.node import LocalNode, NodeUnavailable
    from operators.cluster.nodehost import NodeNetwork
    from operators.cluster.planeconfig import JwtIssuer
    from operators.cluster.probes import reaches_cluster

__all__ = [
    "Binaries",
    "ClusterInfo",
    "ClusterStatus",
    "ControlPlaneError",
    "JwtIssuer",
    "LocalControlPlane",
    "LocalNode",
    "NodeNetwork",
    "NodeUnavailable",
    "PortInUse",
    "cache_root",
    "cached_kubectl",
    "default_home",
    "ensure_binaries",
    "reaches_cluster",
]

__getattr__, __dir__ = front_door(__name__, __file__, __all__)
