"""The versions of every component of the local control plane, pinned in one place.

Kubernetes, etcd and Helm are built from the Go module proxy (see ``build.py``); changing a
version here changes the cache directory the binaries are built into, so a bump never reuses
binaries of the old version.
"""

from __future__ import annotations

from typing import Final

KUBERNETES_VERSION: Final = "v1.34.4"
"""kube-apiserver, kube-controller-manager and kubectl (one Go module, ``k8s.io/kubernetes``)."""

ETCD_VERSION: Final = "v3.6.16"
"""etcd 3.6 is what envtest pairs with Kubernetes 1.34; watch-list needs 3.5.11 or newer."""

HELM_VERSION: Final = "v3.22.0"
"""Newest Helm v3 release on the Go module proxy when pinned (the chart tests use Helm 3)."""

FLUX_VERSION: Final = "v1.9.0"
"""Flux's source-controller and kustomize-controller, for the
GitOps loop of the e2e tests. The newest that builds here with Go 1.26: v1.10.0 and v1.10.1 need Go
1.27 (`requires go >= 1.27.0 (running go 1.26.8; GOTOOLCHAIN=local)`), and source-controller v1.9.4
to v1.9.6 need github.com/fluxcd/pkg/artifact v0.18.2 or v0.18.3, which the module proxy used here
refuses (`403 Forbidden ... This module version is not available`). v1.9.1 to v1.9.3 were not tried."""


def component_versions() -> dict[str, str]:
    """The pinned versions by component name, for status output and the cluster's state file."""
    return {"kubernetes": KUBERNETES_VERSION, "etcd": ETCD_VERSION, "helm": HELM_VERSION}

CLI_UTILS_VERSION: Final = "v0.37.2"
"""``sigs.k8s.io/cli-utils``, whose kstatus the e2e tests judge Stead's objects with (tools/kstatus);
tools/kstatus/go.mod requires this version (a unit test holds them together)."""
