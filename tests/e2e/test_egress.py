"""Where a tenant's http tasks may connect, attacked from a tenant's namespace on the real local
control plane: every address the runner's pod (here: host) reaches but the tenant must not.

The tenant is a ServiceAccount with the built-in `edit` role in its own namespace only (and
Stead's kinds there, as the chart's aggregated roles grant). The session's operator runs with
`--http-allow-networks 10.0.0.0/8` (a private network an operator opened for its databases), which
contains the local plane's Service CIDR 10.0.0.0/24: the operator reads that CIDR from the
cluster's ServiceCIDR objects and refuses every ClusterIP anyway.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.test_apps import action_run, app, blueprint


@dataclass(frozen=True)
class Tenant:
    """kubectl as `system:serviceaccount:<namespace>:tenant`, which may edit its namespace only."""

    kubectl: Kubectl
    namespace: str

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.kubectl(f"--as=system:serviceaccount:{self.namespace}:tenant", "-n", self.namespace, *args,
                            input=input, check=check)

    def apply(self, body: dict[str, Any]) -> None:
        self("apply", "-f", "-", input=json.dumps(body))

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = self("get", kind, name, "-o", "json", check=False)
        return dict(json.loads(found.stdout)) if found.returncode == 0 else {}


@pytest.fixture
def tenant(kubectl: Kubectl, namespace: str) -> Iterator[Tenant]:
    """A tenant of `namespace`: `edit` there, and Stead's kinds there (the chart's aggregated roles)."""
    kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    kubectl("create", "rolebinding", "tenant-edit", "--clusterrole=edit", f"--serviceaccount={namespace}:tenant",
            "-n", namespace)
    kubectl("create", "role", "tenant-stead", "-n", namespace, "--verb=get,list,watch,create,update,patch,delete",
            "--resource=blueprints.stead.dev,apps.stead.dev,actionruns.stead.dev")
    kubectl("create", "rolebinding", "tenant-stead", "--role=tenant-stead", f"--serviceaccount={namespace}:tenant",
            "-n", namespace)
    who = Tenant(kubectl, namespace)
    wait_until(lambda: who("auth", "can-i", "create", "services", check=False).stdout.strip() == "yes", 30,
               "the tenant's edit role (aggregated)", interval=0.2)
    assert who("auth", "can-i", "get", "secrets", "-n", "kube-system", check=False).stdout.strip() == "no"
    yield who


def probes(targets: list[str]) -> dict[str, Any]:
    """A blueprint with one user action per URL, an http GET of it; nothing runs on the operator's host."""
    return {
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [
            {"name": "create", "tasks": [{"name": "settle", "type": "delay", "delaySeconds": 1}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
        "actions": [{"name": f"probe{i}", "tasks": [
            {"name": "get", "type": "http", "timeoutSeconds": 10, "http": {"url": url}}]}
            for i, url in enumerate(targets)],
    }


def test_a_tenants_http_tasks_reach_no_metadata_service_clusterip_or_operator_port(
    operator: OperatorProcess, tenant: Tenant,
) -> None:
    tenant("create", "service", "clusterip", "mine", "--tcp=80:8080")
    cluster_ip = tenant.get("service", "mine")["spec"]["clusterIP"]
    loopback = "loopback address"
    attacks = [  # (url, what the refusal must say)
        ("http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254 is not a public address"),  # AWS IMDS, IPv6
        ("http://100.100.100.200/latest/meta-data/", "100.100.100.200 is not a public address"),  # Alibaba
        ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", "169.254.169.254 (in 64:ff9b::a9fe:a9fe) is a link-local"),
        ("http://[2002:a9fe:a9fe::]/latest/meta-data/", "169.254.169.254 (in 2002:a9fe:a9fe::) is a link-local"),
        (f"http://[64:ff9b::7f00:1]:{operator.health_port}/metrics", loopback),  # NAT64 of the operator's port
        (f"http://[2002:7f00:1::]:{operator.config_api_port}/", loopback),  # 6to4 of the operator's port
        (f"http://127.0.0.1:{operator.health_port}/metrics", loopback),
        (f"http://{cluster_ip}/", f"{cluster_ip} is in the cluster's Service network"),  # inside the allowed 10/8
        ("https://10.0.0.1/api", "10.0.0.1 is in the cluster's Service network"),  # the `kubernetes` Service
        (f"http://mine.{tenant.namespace}.svc.cluster.local/", ""),  # no cluster DNS here: fails, not a leak
    ]
    tenant.apply(blueprint("probes", tenant.namespace, probes([url for url, _ in attacks])))
    tenant("wait", "--for=condition=Ready", "--timeout=30s", "blueprint/probes")
    tenant.apply(app("prober", tenant.namespace, "probes"))
    tenant("wait", "--for=condition=Ready", "--timeout=40s", "app/prober")
    for i, (url, why) in enumerate(attacks):
        tenant.apply(action_run(f"probe-{i}", tenant.namespace, "prober", f"probe{i}"))
        status = wait_until(lambda i=i: (s := tenant.get("actionrun", f"probe-{i}").get("status") or {}).get("state")
                            in ("Succeeded", "Failed") and s, 40, f"run probe-{i} ({url})", interval=0.2)
        assert status["state"] == "Failed", (url, status)
        if why:
            assert "which http steps may not reach" in status["reason"] and why in status["reason"], (url, status)
