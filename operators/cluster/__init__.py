"""A local Kubernetes control plane built from the Go module proxy and run on loopback.

``stead cluster up|down|status|kubeconfig|build`` and the e2e session fixture use these names;
everything else in the package is an implementation detail:

    build.py         building the binaries from the Go module proxy and caching them
    versions.py      the pinned Kubernetes, etcd and Helm versions
    controlplane.py  the components, their flags, up/down/status and kubeconfigs
    pki.py           which certificates the plane needs (made by operators.runtime.serving.certs)
    processes.py     pid records, /proc inspection, pidfd signalling, port owners
    probes.py        health endpoints and whether a kubeconfig reaches a cluster
    atomicwrite.py   files written whole or not at all
"""

from operators.cluster.build import Binaries, ControlPlaneError, cache_root, ensure_binaries
from operators.cluster.controlplane import ClusterInfo, ClusterStatus, LocalControlPlane, default_home
from operators.cluster.probes import reaches_cluster

__all__ = [
    "Binaries",
    "ClusterInfo",
    "ClusterStatus",
    "ControlPlaneError",
    "LocalControlPlane",
    "cache_root",
    "default_home",
    "ensure_binaries",
    "reaches_cluster",
]
