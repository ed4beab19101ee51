"""Issue 25, finding 16: the sharding labels a tenant may write, judged by the API server itself.

A tenant (a ServiceAccount that may edit Stead's kinds in its own namespace only) tries to place an
object in the cluster-scoped pseudo-project or another namespace's project by label, and to give it
a bucket no replica selects, with the operator's webhooks on and then removed: the
ValidatingAdmissionPolicy `stead-shard-labels` (installed with the CRDs) refuses each, naming the
label, either way.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Kubectl, OperatorProcess, env_manifest, wait_until
from tests.e2e.test_tenancy import webhooks_removed

BAD_BUCKETS = ["4096", "99999", "", "0042", "x"]
ALLOWED_BUCKETS = ["0", "4095"]


@pytest.fixture
def tenant(kubectl: Kubectl, namespace: str) -> Iterator[Kubectl]:
    """kubectl as a ServiceAccount of `namespace` with `edit` there and Stead's kinds, nothing elsewhere."""
    kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    kubectl("create", "rolebinding", "tenant-edit", "--clusterrole=edit", f"--serviceaccount={namespace}:tenant",
            "-n", namespace)
    kubectl("create", "role", "tenant-stead", "--verb=get,list,create,update,patch,delete",
            "--resource=environments.stead.dev,blueprints.stead.dev", "-n", namespace)
    kubectl("create", "rolebinding", "tenant-stead", "--role=tenant-stead", f"--serviceaccount={namespace}:tenant",
            "-n", namespace)

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl("--as", f"system:serviceaccount:{namespace}:tenant", *args, input=input, check=check)

    yield run


def labelled(name: str, namespace: str, labels: dict[str, str]) -> str:
    body = json.loads(env_manifest(name, namespace))
    body["metadata"]["labels"] = labels
    return json.dumps(body)


def attempts(namespace: str, victim: str) -> list[tuple[dict[str, str], str]]:
    """(labels, the refusal's start) for each forbidden placement."""
    bucket = "metadata.labels[stead.dev/shard-bucket]: must be a bucket number from 0 to 4095"
    project = "metadata.labels[stead.dev/project]: {} is not a project of namespace " + namespace
    return ([({"stead.dev/shard-bucket": value}, bucket) for value in BAD_BUCKETS]
            + [({"stead.dev/project": value}, project.format(value))
               for value in ("stead-cluster-scoped", victim, f"{victim}.web", "default", f"x{namespace}")])


def test_a_tenant_cannot_choose_a_project_or_a_bucket_by_label_with_or_without_the_webhook(
    operator: OperatorProcess, kubectl: Kubectl, tenant: Kubectl, namespace: str,
) -> None:
    victim = f"t-victim-{uuid.uuid4().hex[:6]}"  # another tenant's namespace (it need not exist to be aimed at)
    # the policy takes effect once the API server has loaded it: poll with the first attempt
    labels, refusal = attempts(namespace, victim)[0]

    def refused() -> bool:
        result = tenant("create", "-f", "-", input=labelled("probe", namespace, labels), check=False)
        if result.returncode == 0:
            kubectl("delete", "environment", "probe", "-n", namespace, "--wait=true", "--timeout=30s")
            return False
        return refusal in result.stderr

    wait_until(refused, 30, "the shard-label policy to refuse a bad bucket")

    def attack(phase: str) -> None:
        for index, (labels, refusal) in enumerate(attempts(namespace, victim)):  # bounded: one try each
            result = tenant("create", "-f", "-", input=labelled(f"bad-{phase}-{index}", namespace, labels),
                            check=False)
            assert result.returncode != 0, (phase, labels)
            assert refusal in result.stderr, (phase, labels, result.stderr)
        # what is allowed still is: the namespace's own project, a project of its own, a valid bucket
        for index, labels in enumerate([{"stead.dev/project": namespace}, {"stead.dev/project": f"{namespace}.web"},
                                        *({"stead.dev/shard-bucket": value} for value in ALLOWED_BUCKETS)]):
            tenant("create", "-f", "-", input=labelled(f"ok-{phase}-{index}", namespace, labels))
        # ... and relabelling an admitted object is judged the same way
        result = tenant("label", "environment", f"ok-{phase}-0", "-n", namespace,
                        "stead.dev/project=stead-cluster-scoped", "--overwrite", check=False)
        assert result.returncode != 0 and "is not a project of namespace" in result.stderr, result.stderr

    attack("webhook")
    with webhooks_removed(kubectl):
        attack("bypassed")
    found = json.loads(kubectl("get", "environments", "-n", namespace, "-o", "json").stdout)["items"]
    assert sorted(item["metadata"]["name"] for item in found if item["metadata"]["name"].startswith("bad-")) == []
