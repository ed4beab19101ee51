"""A Kubernetes substrate may apply objects of the App's namespace only, judged as rendered.

The attacker is a tenant with `edit` (and Stead's kinds) in its namespace. The namespace's service
account, which the runner acts as, was granted cluster-wide rights on CertificateSigningRequests,
ValidatingAdmissionPolicies and ClusterRoles (as an admin may, for something else): RBAC would let
the objects in, so only Stead's own check stands between the tenant and the cluster. Each attack is a
blueprint whose manifest the check before the run cannot judge: a cluster-scoped kind no fixed list
names, or a manifest that is YAML only once a secret variable is rendered into it at run time.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from operators.cluster import Binaries, ClusterInfo
from tests.e2e.conftest import AuditLog, Kubectl, OperatorProcess
from tests.e2e.tenant_accounts import tenant_kubectl
from tests.e2e.test_apps import app, apply, blueprint, run_state
from tests.e2e.test_calm_substrates import kubernetes_spec, runner_role

CLUSTER_RESOURCES = ("certificatesigningrequests", "validatingadmissionpolicies", "clusterroles")


def csr_request() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tenant-wants-a-client-cert")])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode()


def csr_manifest(name: str) -> str:
    return (f"apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: {name}\n"
            f"spec:\n  signerName: kubernetes.io/kube-apiserver-client\n  usages: [client auth]\n"
            f"  request: {csr_request()}\n")


def vap_manifest(name: str) -> str:
    return (f"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n"
            f"  name: {name}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules:\n"
            "    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}\n"
            "  validations: [{expression: \"false\"}]\n")


@pytest.fixture
def wide_account(kubectl: Kubectl, namespace: str) -> Iterator[str]:
    """The namespace's default service account, allowed configmaps there and CSRs, VAPs and ClusterRoles
    cluster-wide."""
    runner_role(kubectl, namespace)
    name = f"{namespace}-cluster-objects"
    kubectl("create", "clusterrole", name, "--verb=get,list,create,patch,update,delete",
            "--resource=certificatesigningrequests.certificates.k8s.io",
            "--resource=validatingadmissionpolicies.admissionregistration.k8s.io",
            "--resource=clusterroles.rbac.authorization.k8s.io")
    kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}", f"--serviceaccount={namespace}:default")
    try:
        yield f"system:serviceaccount:{namespace}:default"
    finally:
        kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found", check=False)


def test_a_kubernetes_substrate_cannot_create_cluster_scoped_objects_however_the_manifest_hides_them(
    operator: OperatorProcess, kubectl: Kubectl, cluster: ClusterInfo, binaries: Binaries, namespace: str,
    tmp_path: Path, audit: AuditLog, wide_account: str,
) -> None:
    tenant = tenant_kubectl(kubectl, cluster, binaries, namespace, tmp_path)
    tag = uuid.uuid4().hex[:6]
    # a kind the check before the run knows, in a manifest it cannot parse: "#...: [" once rendered, a comment
    rendered_only = (f"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: hidden-{tag}\n"
                     "rules: []\n@@{tail}@@: [\n")
    attacks: dict[str, tuple[str, str, dict[str, Any]]] = {
        "csr": (csr_manifest(f"csr-{tag}"), f"certificatesigningrequest/csr-{tag}", {}),
        "vap": (vap_manifest(f"vap-{tag}"), f"validatingadmissionpolicy/vap-{tag}", {}),
        "rendered": (rendered_only, f"clusterrole/hidden-{tag}",
                     {"variables": [{"name": "tail", "type": "secret", "secret": {"value": "#-made-valid"}}]}),
    }
    mark = audit.mark()
    try:
        for name, (manifest, made, extra) in attacks.items():
            apply(tenant, blueprint(name, namespace, {**kubernetes_spec(manifest), **extra}))
            tenant("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", f"blueprint/{name}")
            apply(tenant, app(name, namespace, name))
            run = run_state(tenant, namespace, f"{name}-create", "Succeeded", "Failed", seconds=60)
            assert kubectl("get", made, check=False).returncode != 0, f"{name}: {made} was created"
            assert run["state"] == "Failed", (name, run)
            assert "is cluster-scoped; this step may only touch objects in namespace " + namespace \
                in json.dumps(run), (name, run)
        sent = [e for e in audit.since(mark) if e.user == wide_account and e.resource in CLUSTER_RESOURCES]
        assert sent == [], "requests for cluster-scoped objects reached the API server"
    finally:
        for _, made, _ in attacks.values():
            kubectl("delete", made, "--ignore-not-found", check=False)
