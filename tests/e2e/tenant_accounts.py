"""Tenants for attack tests: a ServiceAccount of a namespace, and a kubectl that acts with its token.

The attacker of a hardening test is a tenant, not the cluster's admin: a ServiceAccount bound in its
own namespace only (to `edit`, and to what the chart aggregates into `edit` for Stead's kinds),
whose kubectl carries nothing but a token of it (`kubectl create token`), so the API server's RBAC
judges every request it makes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from operators.cluster import Binaries, ClusterInfo
from tests.e2e.conftest import Kubectl

STEAD_KINDS_ROLE = "stead-kinds"
"""Stead's kinds in the namespace: what the chart's aggregated ClusterRoles add to `edit`."""
CHART_EDIT_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
"""The verbs the chart's aggregated roles (stead-view, stead-edit) give `edit` on Stead's kinds: no custom verb
(`expert`), which `*` would include."""


def tenant_token(kubectl: Kubectl, namespace: str, *, role: str = "edit", account: str = "tenant",
                 duration: str = "1h", stead_verbs: tuple[str, ...] = ("*",),
                 stead_resources: tuple[str, ...] = ("*",)) -> str:
    """Make ServiceAccount `account` in `namespace`, bound there to the ClusterRole `role` (`edit`; `view`
    for a tenant who may not read the namespace's Secrets) and to Stead's kinds (`stead_resources`: all, or
    some plurals; with `stead_verbs`: all, or `CHART_EDIT_VERBS` as the chart gives `edit`), and return a
    token of it."""
    kubectl("create", "serviceaccount", account, "-n", namespace)
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": STEAD_KINDS_ROLE, "namespace": namespace},
        "rules": [{"apiGroups": ["stead.dev"], "resources": list(stead_resources), "verbs": list(stead_verbs)}]}))
    kubectl("create", "rolebinding", f"{account}-stead", "-n", namespace, f"--role={STEAD_KINDS_ROLE}",
            f"--serviceaccount={namespace}:{account}")
    kubectl("create", "rolebinding", f"{account}-{role}", "-n", namespace, f"--clusterrole={role}",
            f"--serviceaccount={namespace}:{account}")
    return kubectl("create", "token", account, "-n", namespace, f"--duration={duration}").stdout.strip()


def tenant_kubectl(kubectl: Kubectl, cluster: ClusterInfo, binaries: Binaries, namespace: str, work: Path, *,
                   role: str = "edit", account: str = "tenant", stead_verbs: tuple[str, ...] = ("*",),
                   stead_resources: tuple[str, ...] = ("*",)) -> Kubectl:
    """A kubectl acting as a tenant (`tenant_token`), with a kubeconfig of its token alone
    (`work/<namespace>-<account>.kubeconfig`)."""
    token = tenant_token(kubectl, namespace, role=role, account=account, stead_verbs=stead_verbs,
                         stead_resources=stead_resources)
    config = work / f"{namespace}-{account}.kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "tenant",
        "clusters": [{"name": "c", "cluster": {"server": cluster.server,
                                               "certificate-authority": str(cluster.ca_cert)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "tenant", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
    }))
    config.chmod(0o600)

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(binaries.kubectl), "--kubeconfig", str(config), *args],
                              input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"tenant kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    return run


def grant_secret(kubectl: Kubectl, namespace: str, *secrets: str, account: str = "default") -> None:
    """Let the namespace's service account (whose token reads the Secrets a run names) get `secrets`."""
    names = [f"--resource-name={name}" for name in secrets]
    kubectl("create", "role", "stead-secrets", "-n", namespace, "--verb=get", "--resource=secrets", *names)
    kubectl("create", "rolebinding", "stead-secrets", "-n", namespace, "--role=stead-secrets",
            f"--serviceaccount={namespace}:{account}")
