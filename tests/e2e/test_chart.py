"""The Helm chart (charts/stead): it lints, renders what the operator needs, and the API server accepts it.

Rendering needs only the `helm` binary; `kubectl apply --dry-run=server` and the certificate
reuse check run against the session's local control plane. The cert-manager variant is only
linted and rendered: the local control plane has no cert-manager CRDs.
"""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from operators.cluster import Binaries, ClusterInfo
from operators.cluster.versions import KUBERNETES_VERSION

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "stead"
CRD_FILES = sorted((CHART / "files" / "crds").glob("*.yaml"))
RELEASE = "stead"
NAMESPACE = "stead-system"
# `helm template` knows no cluster: it checks kubeVersion against the version given here.
KUBE_VERSION = ["--kube-version", KUBERNETES_VERSION]
CERT_MANAGER = ["--set", "webhook.certManager.enabled=true"]

Helm = Callable[..., subprocess.CompletedProcess[str]]
Kubectl = Callable[..., subprocess.CompletedProcess[str]]
Manifest = dict[str, Any]


@pytest.fixture(scope="module")
def helm(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """`helm` with its own empty config, cache and data directories (no user repositories)."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
    }

    def run(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(binaries.helm), *args],
            env={**env, "KUBECONFIG": str(kubeconfig or home / "no-kubeconfig")},
            capture_output=True, text=True, timeout=120, check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    return run


def _template(helm: Helm, *args: str, namespace: str = NAMESPACE,
              release: str = RELEASE, kubeconfig: Path | None = None) -> str:
    return helm("template", release, str(CHART), "--namespace", namespace, *KUBE_VERSION, *args,
                kubeconfig=kubeconfig).stdout


def _objects(rendered: str) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def _of_kind(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [obj for obj in objects if obj["kind"] == kind]


def _one(objects: list[Manifest], kind: str) -> Manifest:
    found = _of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


def _crd_files() -> list[Manifest]:
    assert CRD_FILES, f"no CRD files in {CHART / 'files' / 'crds'}"
    return [yaml.safe_load(path.read_text()) for path in CRD_FILES]


# --- 1. lint ---------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize("values", [[], CERT_MANAGER, ["--set", "replicas=3", "--set", "persistence.enabled=false"]],
                         ids=["default", "cert-manager", "replicas-3-emptydir"])
def test_chart_lints(helm: Helm, strict: bool, values: list[str]) -> None:
    result = helm("lint", str(CHART), *KUBE_VERSION, *(["--strict"] if strict else []), *values)
    assert "0 chart(s) failed" in result.stdout, result.stdout


# --- 2. template -----------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("values", [[], CERT_MANAGER], ids=["default", "cert-manager"])
def test_rendered_chart_is_least_privilege_and_serves_every_crd(
    helm: Helm, values: list[str]
) -> None:
    rendered = _template(helm, *values)
    objects = _objects(rendered)
    crds = _crd_files()

    assert "cluster-admin" not in rendered
    for role in _of_kind(objects, "ClusterRole") + _of_kind(objects, "Role"):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard in {field}: {rule}"
    operator_role = next(r for r in _of_kind(objects, "ClusterRole") if r["metadata"]["name"] == RELEASE)
    granted = {(group, resource, verb) for rule in operator_role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    for crd in crds:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        assert {(group, plural, verb) for verb in ("get", "list", "watch")} <= granted
        assert (group, f"{plural}/status", "patch") in granted
        assert not {(group, plural, verb) for verb in ("create", "update", "patch", "delete")} & granted

    # CRDs: one per file, same spec, kept on uninstall.
    rendered_crds = {crd["metadata"]["name"]: crd for crd in _of_kind(objects, "CustomResourceDefinition")}
    assert set(rendered_crds) == {crd["metadata"]["name"] for crd in crds}
    for crd in crds:
        mine = rendered_crds[crd["metadata"]["name"]]
        assert mine["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert mine["spec"] == crd["spec"]

    # Webhooks: one per CRD file, the shape Stead registers in local mode, through the Service.
    service = next(s for s in _of_kind(objects, "Service") if s["spec"].get("clusterIP") != "None")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "webhook")]
    config = _one(objects, "ValidatingWebhookConfiguration")
    webhooks = {hook["name"]: hook for hook in config["webhooks"]}
    assert len(config["webhooks"]) == len(crds)
    for crd in crds:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        hook = webhooks[f"{plural}.{group}"]
        assert hook["clientConfig"]["service"] == {
            "name": service["metadata"]["name"], "namespace": NAMESPACE, "path": f"/validate-{plural}", "port": 443,
        }
        assert "url" not in hook["clientConfig"]
        [rule] = hook["rules"]
        assert rule["apiGroups"] == [group] and rule["resources"] == [plural]
        assert rule["apiVersions"] == [v["name"] for v in crd["spec"]["versions"] if v["served"]]
        assert rule["operations"] == ["CREATE", "UPDATE"]
        assert (hook["failurePolicy"], hook["sideEffects"], hook["admissionReviewVersions"]) == ("Fail", "None", ["v1"])

    # The operator: flags, replica identity, probes, hardening, its store volume and certificates.
    sts = _one(objects, "StatefulSet")
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["serviceName"] in {s["metadata"]["name"] for s in _of_kind(objects, "Service")
                                          if s["spec"].get("clusterIP") == "None"}
    pod = sts["spec"]["template"]["spec"]
    [container] = pod["containers"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"ghcr.io/stead-dev/stead:{app_version}"
    assert {"--webhook=mounted", "--webhook-listen=0.0.0.0", "--webhook-port=9443",
            "--webhook-cert-dir=/etc/stead/webhook", "--health-listen=0.0.0.0", "--health-port=8080",
            "--store=/var/lib/stead/store"} <= set(container["args"])
    env = {e["name"]: e for e in container["env"]}
    assert env["STEAD_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"webhook": 9443, "http": 8080}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
    assert security["capabilities"]["drop"] == ["ALL"] and not security["allowPrivilegeEscalation"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["store"] == "/var/lib/stead/store" and mounts["webhook-tls"] == "/etc/stead/webhook"
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["store"]
    tls_secret_name = next(v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "webhook-tls")

    if values == CERT_MANAGER:
        assert not _of_kind(objects, "Secret")
        certificate = _one(objects, "Certificate")
        assert certificate["spec"]["secretName"] == tls_secret_name
        assert f"{service['metadata']['name']}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"{NAMESPACE}/{certificate['metadata']['name']}")
        assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])
    else:
        assert not _of_kind(objects, "Certificate")
        secret = _one(objects, "Secret")
        assert secret["metadata"]["name"] == tls_secret_name and secret["type"] == "kubernetes.io/tls"
        assert all(hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"] for hook in config["webhooks"])
        ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
        leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        leaf.verify_directly_issued_by(ca)
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert f"{service['metadata']['name']}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)

    for obj in objects:
        labels = obj["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/instance") == RELEASE, obj["metadata"]["name"]
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", obj["metadata"]["name"]


@pytest.mark.e2e
def test_crds_install_false_renders_no_crds_but_still_the_webhooks(
    helm: Helm,
) -> None:
    objects = _objects(_template(helm, "--set", "crds.install=false"))
    assert not _of_kind(objects, "CustomResourceDefinition")
    assert len(_one(objects, "ValidatingWebhookConfiguration")["webhooks"]) == len(CRD_FILES)


# --- 3. the API server accepts it ------------------------------------------------------------------


@pytest.fixture
def chart_namespace(kubectl: Kubectl) -> Iterator[str]:
    """A fresh namespace with a short name: release names derived from it stay within Helm's 53."""
    name = f"chart-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.e2e
def test_rendered_chart_passes_server_side_dry_run(
    helm: Helm, kubectl: Kubectl, chart_namespace: str
) -> None:
    # A release name of its own: nothing it renders can collide with what the session installed.
    release = f"{chart_namespace}-stead"
    rendered = _template(helm, namespace=chart_namespace, release=release)
    result = kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=rendered, check=False)
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(_objects(rendered)), result.stdout


@pytest.mark.e2e
def test_generated_certificate_is_reused_when_its_secret_exists(
    helm: Helm, kubectl: Kubectl, cluster: ClusterInfo, chart_namespace: str
) -> None:
    """`lookup` finds the Secret of the previous release: an upgrade keeps the certificate."""
    release = f"{chart_namespace}-stead"
    def secret(*args: str, kubeconfig: Path | None = None) -> Manifest:
        rendered = _template(helm, *args, namespace=chart_namespace, release=release, kubeconfig=kubeconfig)
        return _one(_objects(rendered), "Secret")

    first = secret()
    assert secret()["data"] != first["data"], "without a cluster to look in, every render generates anew"

    kubectl("apply", "-f", "-", input=yaml.safe_dump(first))
    # --dry-run=server lets `helm template` reach the cluster, so `lookup` sees the Secret.
    again = _objects(_template(helm, "--dry-run=server", namespace=chart_namespace, release=release,
                               kubeconfig=cluster.kubeconfig))
    assert _one(again, "Secret")["data"] == first["data"]
    hooks = _one(again, "ValidatingWebhookConfiguration")["webhooks"]
    assert all(hook["clientConfig"]["caBundle"] == first["data"]["ca.crt"] for hook in hooks)


# --- 4. values.schema.json -------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("replicas=-1", "/replicas"),
        ("replicaCount=2", "replicaCount"),
        ("webhook.failurePolicy=Sometimes", "/webhook/failurePolicy"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("persistence.size=lots", "/persistence/size"),
        ("webhook.certManager.issuerRef.kind=Cluster", "/webhook/certManager/issuerRef/kind"),
    ],
)
def test_schema_rejects_bad_values_naming_them(
    helm: Helm, setting: str, named: str
) -> None:
    result = helm("template", RELEASE, str(CHART), *KUBE_VERSION, "--set", setting, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert named in result.stderr, result.stderr


def test_template_without_kube_version_uses_the_pinned_capabilities(helm: Helm) -> None:
    """The helm build carries the local plane's Kubernetes version as its default capabilities."""
    result = helm("template", RELEASE, str(CHART), check=False)
    assert result.returncode == 0, result.stderr
