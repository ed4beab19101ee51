"""The Helm chart (charts/stead): it lints, renders what the operator needs, and the API server accepts it.

Rendering needs only the `helm` binary; `kubectl apply --dry-run=server` and the certificate
reuse check run against the session's local control plane. The cert-manager variant is only
linted and rendered: the local control plane has no cert-manager CRDs.

What is derived from the CRD files (RBAC, webhooks) is also rendered from copies of the chart
whose CRD files were changed, so that the derivation itself is tested, not only today's kinds.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.fernet import Fernet

from operators.cluster import Binaries, ClusterInfo
from operators.cluster.versions import KUBERNETES_VERSION
from operators.lsm.kinds import CLUSTER_LIFECYCLE_KIND
from operators.runtime.kube.crds import (
    FINALIZER_ANNOTATION,
    MUTATING_ANNOTATION,
    VALIDATING_ANNOTATION,
    shipped_objects,
)
from operators.runtime.shard.policy import shard_label_policy
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "stead"
CRD_FILES = sorted((CHART / "files" / "crds").glob("*.yaml"))
RELEASE = "stead"
NAMESPACE = "stead-system"
# `helm template` knows no cluster: it checks kubeVersion against the version given here.
KUBE_VERSION = ["--kube-version", KUBERNETES_VERSION]
CERT_MANAGER = ["--set", "webhook.certManager.enabled=true"]
CONFIG_API_OFF = ["--set", "configApi.enabled=false"]
BASIC = ["--set", "configApi.basicAuthSecret=config-basic"]
JOBS_OFF = ["--set", "actions.jobs.enabled=false"]
TRUSTED = ["--set", "actions.trustLocalNamespaces={team-*,dev}"]
CONFIG_API_PORT = 8443
# What the operator may do to Stead's own kinds beyond get/list/watch and patching their status:
# the config API's writes (operators/config/repository.py: POST, PUT, DELETE of ConfigValues,
# POST of ConfigComponents and Environments), `patch` on the kinds whose objects hold the cleanup
# finalizer (kube.py: a JSON patch of metadata.finalizers) and an App's runs (app.py: POST of its
# ActionRuns, DELETE of a stale delete run). No other `patch`: nothing sends one.
CONFIG_API_WRITES = {"configvalues": {"create", "update", "delete"},
                     "configcomponents": {"create"}, "environments": {"create"},
                     # the extensions on the same server: the service inventory and the graphs API
                     "serviceinstances": {"create", "patch"}, "serviceorders": {"create"},
                     "deploymentgraphs": {"create", "update", "patch", "delete"}, "graphruns": {"create"}}
# The service inventory and graphs APIs write as their caller (operators/runtime/api/extension.py).
IMPERSONATE = {("", "users", "impersonate"), ("", "groups", "impersonate"), ("", "serviceaccounts", "impersonate"),
               ("authentication.k8s.io", "uids", "impersonate")}
# ConfigValues' history (history.py: GET, list, POST, DELETE) and publication (reconcile.py:
# server-side apply, which is a patch that may create).
CONFIGMAP_VERBS = {"get", "list", "create", "patch", "delete"}
# An App's ActionRuns: created and, a stale delete run, deleted.
ACTIONRUN_WRITES = {"create", "delete"}
# The runner of a script Job acts as the namespace's service account, with a token the operator
# requests for it (actionrun.py: POST .../serviceaccounts/<account>/token), by name only.
TOKEN_RULE = {"apiGroups": [""], "resources": ["serviceaccounts/token"], "resourceNames": ["default"],
              "verbs": ["create"]}

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
              release: str = RELEASE, kubeconfig: Path | None = None, chart: Path = CHART) -> str:
    return helm("template", release, str(chart), "--namespace", namespace, *KUBE_VERSION, *args,
                kubeconfig=kubeconfig).stdout


def _objects(rendered: str) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def _of_kind(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [obj for obj in objects if obj["kind"] == kind]


def _one(objects: list[Manifest], kind: str) -> Manifest:
    found = _of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]


def _tls_secret(objects: list[Manifest]) -> Manifest:
    """The serving certificate's Secret (the console's session key is the other Secret)."""
    found = [obj for obj in _of_kind(objects, "Secret") if obj.get("type") == "kubernetes.io/tls"]
    assert len(found) == 1, f"expected one TLS Secret, rendered {len(found)}"
    return found[0]


def _crd_files() -> list[Manifest]:
    assert CRD_FILES, f"no CRD files in {CHART / 'files' / 'crds'}"
    return [yaml.safe_load(path.read_text()) for path in CRD_FILES]


def _mutates(crd: Manifest) -> bool:
    return (crd["metadata"].get("annotations") or {}).get(MUTATING_ANNOTATION) == "true"


def _validates(crd: Manifest) -> bool:
    return (crd["metadata"].get("annotations") or {}).get(VALIDATING_ANNOTATION) == "true"


def _finalizes(crd: Manifest) -> bool:
    return (crd["metadata"].get("annotations") or {}).get(FINALIZER_ANNOTATION) == "true"


def _named(objects: list[Manifest], kind: str, name: str) -> Manifest:
    found = [obj for obj in _of_kind(objects, kind) if obj["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, rendered {len(found)}"
    return found[0]


def _grants(role: Manifest) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule without resourceNames."""
    return {(group, resource, verb) for rule in role["rules"] if not rule.get("resourceNames")
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}


def _operator(objects: list[Manifest]) -> Manifest:
    [container] = _one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _assert_no_wildcards(objects: list[Manifest]) -> None:
    for role in _of_kind(objects, "ClusterRole") + _of_kind(objects, "Role"):
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard in {field}: {rule}"


def _expected_kind_grants(crds: list[Manifest], config_api: bool) -> set[tuple[str, str, str]]:
    """Everything the operator's ClusterRole may do to Stead's kinds, derived from the CRD files."""
    expected = set()
    plurals = {crd["spec"]["names"]["plural"] for crd in crds}
    for crd in crds:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        expected |= {(group, plural, verb) for verb in ("get", "list", "watch")}
        expected.add((group, f"{plural}/status", "patch"))
        if config_api and "configvalues" in plurals:
            expected |= {(group, plural, verb) for verb in CONFIG_API_WRITES.get(plural, ())}
        if _finalizes(crd):
            expected.add((group, plural, "patch"))
        if plural == "actionruns":
            expected |= {(group, plural, verb) for verb in ACTIONRUN_WRITES}
        if plural == "serviceinstances" and "apps" in plurals:  # an instance's App, and itself when deleted
            expected |= {(group, "apps", verb) for verb in ("create", "patch", "delete")}
            expected.add((group, plural, "delete"))
        if plural == "clusterlifecycles":  # the built-ins, created at start (patched only by name: below)
            expected.add((group, plural, "create"))
    return expected


def _token_rules(role: Manifest) -> list[Manifest]:
    """The rules on service accounts, impersonation aside (the extension APIs' writes: IMPERSONATE)."""
    return [rule for rule in role["rules"] if any(r.startswith("serviceaccounts") for r in rule["resources"])
            and rule["verbs"] != ["impersonate"]]


def _chart_copy(tmp_path: Path, edit: Callable[[dict[str, Manifest]], None]) -> Path:
    """A copy of the chart whose CRD files (by plural) `edit` changed, added or deleted."""
    chart = tmp_path / "stead"
    shutil.copytree(CHART, chart)
    crds_dir = chart / "files" / "crds"
    crds = {path.stem: yaml.safe_load(path.read_text()) for path in crds_dir.glob("*.yaml")}
    edit(crds)
    for path in crds_dir.glob("*.yaml"):
        path.unlink()
    for plural, crd in crds.items():
        (crds_dir / f"{plural}.yaml").write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def _leaf_names(secret: Manifest) -> tuple[set[str], set[str]]:
    """The DNS names and IP addresses of the certificate in a generated TLS Secret, checked against its CA."""
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (set(names.get_values_for_type(x509.DNSName)),
            {str(ip) for ip in names.get_values_for_type(x509.IPAddress)})


def _service_names(service: str, namespace: str = NAMESPACE) -> set[str]:
    return {f"{service}.{namespace}.svc", service, f"{service}.{namespace}",
            f"{service}.{namespace}.svc.cluster.local"}


# --- 1. lint ---------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize("values", [[], CERT_MANAGER, ["--set", "persistence.enabled=false"],
                                    CONFIG_API_OFF, [*CERT_MANAGER, *BASIC], [*JOBS_OFF, *TRUSTED]],
                         ids=["default", "cert-manager", "emptydir", "config-api-off",
                              "cert-manager-basic", "jobs-off-trusted"])
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
    _assert_no_wildcards(objects)
    operator_role = _named(objects, "ClusterRole", RELEASE)
    granted = _grants(operator_role)
    groups = {crd["spec"]["group"] for crd in crds}
    # Stead's kinds: exactly get/list/watch, status patches, finalizer patches, an App's runs and
    # the config API's writes.
    assert {g for g in granted if g[0] in groups} == _expected_kind_grants(crds, config_api=True)
    finalized = {crd["spec"]["names"]["plural"] for crd in crds if _finalizes(crd)}
    assert finalized == {"apps", "blueprints", "serviceinstances"}
    assert {g[1] for g in granted if g[0] in groups and g[2] == "patch"} == (
        finalized | {f"{crd['spec']['names']['plural']}/status" for crd in crds} | {"deploymentgraphs"})
    # The built-in ClusterLifecycles: patched (server-side apply) under their own names only.
    [shipped_rule] = [rule for rule in operator_role["rules"] if "clusterlifecycles" in rule["resources"]
                      and rule.get("resourceNames")]
    assert shipped_rule["verbs"] == ["patch"]
    assert sorted(shipped_rule["resourceNames"]) == sorted(
        o["metadata"]["name"] for o in shipped_objects(CLUSTER_LIFECYCLE_KIND))
    # Script Jobs (actions.jobs.enabled by default): tokens of the namespaces' service account, by name.
    assert _token_rules(operator_role) == [TOKEN_RULE]
    assert not {g for g in granted if g[1].startswith("serviceaccounts") and g[2] != "impersonate"}
    # The extension APIs' writes impersonate their caller (issue 25, finding 12): that verb, nothing else.
    assert {g for g in granted if g[2] == "impersonate"} == IMPERSONATE
    assert {g for g in granted if g[:2] == ("", "configmaps")} == {("", "configmaps", v) for v in CONFIGMAP_VERBS}

    # CRDs: one per file, same spec, kept on uninstall.
    rendered_crds = {crd["metadata"]["name"]: crd for crd in _of_kind(objects, "CustomResourceDefinition")}
    assert set(rendered_crds) == {crd["metadata"]["name"] for crd in crds}
    for crd in crds:
        mine = rendered_crds[crd["metadata"]["name"]]
        assert mine["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert mine["spec"] == crd["spec"]

    # Webhooks: one per CRD file that asks for one, the shape Stead registers in local mode, through the Service.
    service = _named(objects, "Service", f"{RELEASE}-webhook")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "webhook")]
    config = _one(objects, "ValidatingWebhookConfiguration")
    webhooks = {hook["name"]: hook for hook in config["webhooks"]}
    validating = [crd for crd in crds if _validates(crd)]
    assert validating and len(validating) < len(crds)  # the Environment's checks are all in its schema
    assert set(webhooks) == {f"{c['spec']['names']['plural']}.{c['spec']['group']}" for c in validating}
    for crd in validating:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        hook = webhooks[f"{plural}.{group}"]
        assert hook["clientConfig"]["service"] == {
            "name": service["metadata"]["name"], "namespace": NAMESPACE, "path": f"/validate-{plural}", "port": 443,
        }
        assert "url" not in hook["clientConfig"]
        [rule] = hook["rules"]
        assert rule["apiGroups"] == [group] and rule["resources"] == [plural]
        assert rule["apiVersions"] == [v["name"] for v in crd["spec"]["versions"] if v["served"]]
        admits_delete = (crd["metadata"].get("annotations") or {}).get("stead.dev/admit-delete") == "true"
        assert rule["operations"] == ["CREATE", "UPDATE", *(["DELETE"] if admits_delete else [])]
        assert (hook["failurePolicy"], hook["sideEffects"], hook["admissionReviewVersions"]) == ("Fail", "None", ["v1"])

    # Mutating webhooks: only for the CRDs annotated stead.dev/mutating-webhook: "true".
    mutating_crds = [crd for crd in crds if _mutates(crd)]
    assert mutating_crds, "no CRD file asks for a mutating webhook (stead crds writes the annotation)"
    mutation = _one(objects, "MutatingWebhookConfiguration")
    assert mutation["metadata"]["name"] == f"{RELEASE}-mutation"
    assert [hook["name"] for hook in mutation["webhooks"]] == [
        f"{crd['spec']['names']['plural']}.{crd['spec']['group']}" for crd in mutating_crds]
    for crd, hook in zip(mutating_crds, mutation["webhooks"], strict=True):
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        validating = webhooks[f"{plural}.{group}"]
        assert hook["clientConfig"]["service"] == {**validating["clientConfig"]["service"], "path": f"/mutate-{plural}"}
        assert hook["clientConfig"].get("caBundle") == validating["clientConfig"].get("caBundle")
        # the same rules, but DELETE, which only validation sees (kinds that may refuse a delete)
        assert hook["rules"] == [{**rule, "operations": ["CREATE", "UPDATE"]} for rule in validating["rules"]]
        assert hook["sideEffects"] == "NoneOnDryRun"
        for field in ("failurePolicy", "matchPolicy", "timeoutSeconds", "admissionReviewVersions"):
            assert hook[field] == validating[field], field

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
    assert env["STEAD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "webhook": 9443, "http": 8080, "config-api": CONFIG_API_PORT}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
    assert security["capabilities"]["drop"] == ["ALL"] and not security["allowPrivilegeEscalation"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["store"] == "/var/lib/stead/store" and mounts["webhook-tls"] == "/etc/stead/webhook"
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["store"]
    tls_secret_name = next(v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "webhook-tls")

    # One certificate serves the webhook and the config API: the names of both Services, and
    # localhost/127.0.0.1 for `kubectl port-forward`.
    config_api_service = _named(objects, "Service", f"{RELEASE}-config-api")
    wanted_dns = (_service_names(service["metadata"]["name"]) | _service_names(config_api_service["metadata"]["name"])
                  | {"localhost"})
    if values == CERT_MANAGER:
        assert not [s for s in _of_kind(objects, "Secret") if s.get("type") == "kubernetes.io/tls"]
        certificate = _one(objects, "Certificate")
        assert certificate["spec"]["secretName"] == tls_secret_name
        assert certificate["spec"]["commonName"] == f"{service['metadata']['name']}.{NAMESPACE}.svc"
        assert set(certificate["spec"]["dnsNames"]) == wanted_dns
        assert certificate["spec"]["ipAddresses"] == ["127.0.0.1"]
        for configuration in (config, mutation):
            assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
                f"{NAMESPACE}/{certificate['metadata']['name']}")
            assert all("caBundle" not in hook["clientConfig"] for hook in configuration["webhooks"])
    else:
        assert not _of_kind(objects, "Certificate")
        secret = _tls_secret(objects)
        assert secret["metadata"]["name"] == tls_secret_name and secret["type"] == "kubernetes.io/tls"
        for configuration in (config, mutation):
            assert all(hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
                       for hook in configuration["webhooks"])
        assert _leaf_names(secret) == (wanted_dns, {"127.0.0.1"})

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
    assert len(_one(objects, "ValidatingWebhookConfiguration")["webhooks"]) == sum(map(_validates, _crd_files()))
    assert len(_one(objects, "MutatingWebhookConfiguration")["webhooks"]) == sum(map(_mutates, _crd_files()))


@pytest.mark.e2e
def test_shipped_objects_off_passes_the_flag_and_grants_no_writes_of_them(helm: Helm) -> None:
    objects = _objects(_template(helm, "--set", "shippedObjects.install=false"))
    assert "--no-shipped-objects" in _operator(objects)["args"]
    rules = _named(objects, "ClusterRole", RELEASE)["rules"]
    writes = {verb for rule in rules if "clusterlifecycles" in rule["resources"] for verb in rule["verbs"]}
    assert writes == {"get", "list", "watch"}
    assert "--no-shipped-objects" not in _operator(_objects(_template(helm)))["args"]


# --- 3. derived from the CRD files ------------------------------------------------------------------


@pytest.mark.e2e
def test_mutating_webhooks_follow_the_crd_annotation(helm: Helm, tmp_path: Path) -> None:
    def none_annotated(crds: dict[str, Manifest]) -> None:
        for crd in crds.values():
            (crd["metadata"].get("annotations") or {}).pop(MUTATING_ANNOTATION, None)

    objects = _objects(_template(helm, chart=_chart_copy(tmp_path / "none", none_annotated)))
    assert not _of_kind(objects, "MutatingWebhookConfiguration")
    assert len(_one(objects, "ValidatingWebhookConfiguration")["webhooks"]) == sum(map(_validates, _crd_files()))

    def also_environments(crds: dict[str, Manifest]) -> None:
        crds["environments"]["metadata"].setdefault("annotations", {})[MUTATING_ANNOTATION] = "true"
        crds["configvalues"]["metadata"].setdefault("annotations", {})[MUTATING_ANNOTATION] = "false"

    objects = _objects(_template(helm, chart=_chart_copy(tmp_path / "more", also_environments)))
    hooks = {hook["name"]: hook for hook in _one(objects, "MutatingWebhookConfiguration")["webhooks"]}
    expected = {f"{crd['spec']['names']['plural']}.{crd['spec']['group']}" for crd in _crd_files() if _mutates(crd)}
    assert set(hooks) == expected | {"environments.stead.dev"}
    assert hooks["environments.stead.dev"]["clientConfig"]["service"]["path"] == "/mutate-environments"
    assert hooks["environments.stead.dev"]["sideEffects"] == "NoneOnDryRun"


@pytest.mark.e2e
def test_config_api_rbac_needs_the_configvalues_crd(helm: Helm, tmp_path: Path) -> None:
    """Without the ConfigValues kind there are no ConfigMap verbs and no config API writes on any kind;
    the config API itself (and its auth-delegator binding) stays, as the operator still serves it."""
    def without_configvalues(crds: dict[str, Manifest]) -> None:
        del crds["configvalues"]

    chart = _chart_copy(tmp_path, without_configvalues)
    objects = _objects(_template(helm, chart=chart))
    crds = [yaml.safe_load(path.read_text()) for path in sorted((chart / "files" / "crds").glob("*.yaml"))]
    granted = _grants(_named(objects, "ClusterRole", RELEASE))
    assert {g for g in granted if g[0] == "stead.dev"} == _expected_kind_grants(crds, config_api=True)
    assert not {g for g in granted if g[0] == "stead.dev" and g[2] in ("create", "update", "delete")
                and g[1] not in ("actionruns", "apps", "serviceinstances",  # an App's runs, an instance's App
                                 "clusterlifecycles")}  # the built-ins
    assert not {g for g in granted if g[1] == "configmaps"}
    _named(objects, "ClusterRoleBinding", f"{RELEASE}-auth-delegator")


# --- 4. the config API -----------------------------------------------------------------------------


@pytest.mark.e2e
def test_config_api_args_ports_service_and_rbac(helm: Helm) -> None:
    objects = _objects(_template(helm, *BASIC, "--set", "configApi.port=9000",
                                 "--set", "configApi.service.type=LoadBalancer", "--set", "configApi.workers=2"))
    container = _operator(objects)
    args = container["args"]
    assert {"--config-api-listen=0.0.0.0", "--config-api-port=9000", "--config-api-cert-dir=/etc/stead/webhook",
            f"--config-api-basic-secret={NAMESPACE}/config-basic", "--config-api-workers=2"} <= set(args)
    default_args = _operator(_objects(_template(helm)))["args"]
    assert not [arg for arg in default_args if arg.startswith("--config-api-workers")]  # 0: the operator serves
    assert not [arg for arg in args if arg.startswith("--config-api-port=") and arg != "--config-api-port=9000"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["webhook-tls"] == "/etc/stead/webhook"
    assert {"name": "config-api", "containerPort": 9000, "protocol": "TCP"} in container["ports"]

    # A Service of its own: exposing the config API never exposes the webhook.
    service = _named(objects, "Service", f"{RELEASE}-config-api")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["selector"] == _one(objects, "StatefulSet")["spec"]["selector"]["matchLabels"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(9000, "config-api")]
    assert _named(objects, "Service", f"{RELEASE}-webhook")["spec"]["type"] == "ClusterIP"

    # TokenReview and SubjectAccessReview through the built-in role, bound to the operator only.
    binding = _named(objects, "ClusterRoleBinding", f"{RELEASE}-auth-delegator")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "system:auth-delegator"}
    sa = _one(objects, "StatefulSet")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    _assert_no_wildcards(objects)

    # The Basic Secret: get, by name, in the release namespace; nothing else names it.
    role = _named(objects, "Role", RELEASE)
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert named == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["config-basic"],
                      "verbs": ["get"]}]
    for cluster_role in _of_kind(objects, "ClusterRole"):
        assert not {g for g in _grants(cluster_role) if g[1] == "secrets"}, cluster_role["metadata"]["name"]


@pytest.mark.e2e
def test_config_api_client_certificates_are_opt_in_with_the_role_to_read_the_client_ca(helm: Helm) -> None:
    default = _objects(_template(helm))
    assert "--config-api-client-ca=off" in _operator(default)["args"]  # the relay halves the API's throughput
    assert not [o for o in default if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == "kube-system"]
    objects = _objects(_template(helm, "--set", "configApi.clientCertificates=true"))
    assert "--config-api-client-ca=auto" in _operator(objects)["args"]
    binding = _named(objects, "RoleBinding", f"{RELEASE}-client-ca-reader")
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "extension-apiserver-authentication-reader"}


def test_webhook_client_ca_is_required_when_given_and_off_saying_so_when_not(helm: Helm) -> None:
    """Issue 25, finding 2: with webhook.clientCA the operator requires the API server's client
    certificate (a ConfigMap of the CA, mounted); without it, it is told `off` (and warns)."""
    default = _objects(_template(helm))
    assert "--webhook-client-ca=off" in _operator(default)["args"]
    assert not [o for o in default if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-client-ca")]
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    objects = _objects(_template(helm, "--set-string", f"webhook.clientCA={pem}"))
    operator = _operator(objects)
    assert "--webhook-client-ca=/etc/stead/webhook-client-ca/ca.crt" in operator["args"]
    assert {"name": "webhook-client-ca", "mountPath": "/etc/stead/webhook-client-ca", "readOnly": True} in \
        operator["volumeMounts"]
    assert _named(objects, "ConfigMap", f"{RELEASE}-webhook-client-ca")["data"] == {"ca.crt": pem}


def test_shard_label_policy_is_the_codes(helm: Helm) -> None:
    """Issue 25, finding 16: the chart renders the same ValidatingAdmissionPolicy as the operator's
    --install-crds, under the release's name, bound with Deny."""
    objects = _objects(_template(helm))
    policy = _named(objects, "ValidatingAdmissionPolicy", f"{RELEASE}-shard-labels")
    expected, _ = shard_label_policy()
    assert policy["spec"] == expected["spec"]
    binding = _named(objects, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-shard-labels")
    assert binding["spec"] == {"policyName": f"{RELEASE}-shard-labels", "validationActions": ["Deny"]}


@pytest.mark.e2e
@pytest.mark.parametrize("values", [[], CERT_MANAGER], ids=["generated", "cert-manager"])
def test_config_api_disabled_renders_none_of_it(helm: Helm, values: list[str]) -> None:
    objects = _objects(_template(helm, *CONFIG_API_OFF, *BASIC, *values))
    args = _operator(objects)["args"]
    assert "--config-api-port=0" in args
    assert not [arg for arg in args if arg.startswith("--config-api-") and arg != "--config-api-port=0"]
    assert "config-api" not in {p["name"] for p in _operator(objects)["ports"]}
    assert {s["metadata"]["name"] for s in _of_kind(objects, "Service")} == {
        f"{RELEASE}-webhook", f"{RELEASE}-headless", f"{RELEASE}-console"}
    assert not [b for b in _of_kind(objects, "ClusterRoleBinding") if b["roleRef"]["name"] == "system:auth-delegator"]
    crds = _crd_files()
    granted = _grants(_named(objects, "ClusterRole", RELEASE))
    assert {g for g in granted if g[0] == "stead.dev"} == _expected_kind_grants(crds, config_api=False)
    # The history and the publication of ConfigValues are the operator's, with or without the API.
    assert {g for g in granted if g[1] == "configmaps"} == {("", "configmaps", v) for v in CONFIGMAP_VERBS}
    assert not [rule for rule in _named(objects, "Role", RELEASE)["rules"] if rule.get("resourceNames")]
    # The certificate names the webhook Service only.
    wanted = _service_names(f"{RELEASE}-webhook")
    if values == CERT_MANAGER:
        certificate = _one(objects, "Certificate")["spec"]
        assert set(certificate["dnsNames"]) == wanted and "ipAddresses" not in certificate
    else:
        assert _leaf_names(_tls_secret(objects)) == (wanted, set())


# --- 5. actions: script Jobs and trusted namespaces -------------------------------------------------


@pytest.mark.e2e
def test_actions_run_scripts_as_jobs_by_default_and_trust_no_namespace(helm: Helm) -> None:
    args = _operator(_objects(_template(helm)))["args"]
    assert {"--exec-in-jobs", "--job-image=python:3.11-slim", "--job-service-account=default"} <= set(args)
    assert "--trust-local-namespaces" not in args  # without it (and without --local) no namespace is trusted

    objects = _objects(_template(helm, "--set", "actions.jobs.image=registry.example/py:3.12",
                                 "--set", "actions.jobs.serviceAccount=stead-runner", *TRUSTED))
    args = _operator(objects)["args"]
    assert {"--exec-in-jobs", "--job-image=registry.example/py:3.12", "--job-service-account=stead-runner"} <= set(args)
    at = args.index("--trust-local-namespaces")
    assert args[at + 1:at + 3] == ["team-*", "dev"]
    assert args.count("--trust-local-namespaces") == 1
    assert _token_rules(_named(objects, "ClusterRole", RELEASE)) == [{**TOKEN_RULE, "resourceNames": ["stead-runner"]}]
    _assert_no_wildcards(objects)


@pytest.mark.e2e
def test_actions_jobs_disabled_passes_no_job_flags_and_grants_no_tokens(helm: Helm) -> None:
    objects = _objects(_template(helm, *JOBS_OFF))
    args = _operator(objects)["args"]
    assert not [arg for arg in args if arg.startswith(("--exec-in-jobs", "--job-", "--trust-local-namespaces"))]
    role = _named(objects, "ClusterRole", RELEASE)
    assert not _token_rules(role)
    for cluster_role in _of_kind(objects, "ClusterRole"):
        assert not {g for g in _grants(cluster_role) if g[1].startswith("serviceaccounts") and g[2] != "impersonate"}
    # An App's runs and the finalizers do not depend on where scripts run.
    granted = _grants(role)
    assert {g for g in granted if g[0] == "stead.dev"} == _expected_kind_grants(_crd_files(), config_api=True)

    args = _operator(_objects(_template(helm, *JOBS_OFF, *TRUSTED)))["args"]
    assert not [arg for arg in args if arg.startswith(("--exec-in-jobs", "--job-"))]
    assert args[args.index("--trust-local-namespaces") + 1:][:2] == ["team-*", "dev"]


@pytest.mark.e2e
def test_egress_allows_nothing_private_by_default_and_reads_the_service_cidrs(helm: Helm) -> None:
    objects = _objects(_template(helm))
    args = _operator(objects)["args"]
    assert not [arg for arg in args if arg.startswith(("--http-allow-networks", "--ssh-allow", "--service-cidr"))]
    role = _named(objects, "ClusterRole", RELEASE)
    assert ("networking.k8s.io", "servicecidrs", "list") in _grants(role)  # read at start-up: ClusterIPs refused

    args = _operator(_objects(_template(
        helm, "--set", "actions.http.allowNetworks={10.20.0.0/16,fd00:20::/64}",
        "--set", "actions.serviceCIDRs={10.96.0.0/12}", "--set", "actions.ssh.allow={10.30.0.0/16}")))["args"]
    at = args.index("--http-allow-networks")
    assert args[at + 1:at + 3] == ["10.20.0.0/16", "fd00:20::/64"]
    assert {"--service-cidr=10.96.0.0/12", "--ssh-allow=10.30.0.0/16"} <= set(args)
    for setting, named in (("actions.http.allowNetworks={everything}", "/actions/http/allowNetworks"),
                           ("actions.serviceCIDRs={cluster}", "/actions/serviceCIDRs")):
        result = helm("template", RELEASE, str(CHART), *KUBE_VERSION, "--set", setting, check=False)
        assert result.returncode != 0 and named in result.stderr, result.stderr


@pytest.mark.e2e
def test_finalizer_and_actionrun_rbac_follow_the_crd_files(helm: Helm, tmp_path: Path) -> None:
    """`patch` follows the stead.dev/finalizer annotation; without the ActionRun kind there are no
    writes on runs and no token rule, even with actions.jobs.enabled."""
    def moved(crds: dict[str, Manifest]) -> None:
        crds["apps"]["metadata"]["annotations"].pop(FINALIZER_ANNOTATION)
        crds["environments"]["metadata"].setdefault("annotations", {})[FINALIZER_ANNOTATION] = "true"
        crds["configvalues"]["metadata"].setdefault("annotations", {})[FINALIZER_ANNOTATION] = "false"
        del crds["actionruns"]

    chart = _chart_copy(tmp_path, moved)
    objects = _objects(_template(helm, chart=chart))
    crds = [yaml.safe_load(path.read_text()) for path in sorted((chart / "files" / "crds").glob("*.yaml"))]
    role = _named(objects, "ClusterRole", RELEASE)
    granted = _grants(role)
    assert {g for g in granted if g[0] == "stead.dev"} == _expected_kind_grants(crds, config_api=True)
    assert {g[1] for g in granted if g[2] == "patch" and g[0] == "stead.dev" and "/" not in g[1]} == {
        "blueprints", "environments", "serviceinstances", "apps",  # apps: a ServiceInstance patches its App's inputs
        "deploymentgraphs"}  # the graphs API's PATCH
    assert not {g for g in granted if g[1].startswith("actionruns")}
    assert not _token_rules(role)
    assert "--exec-in-jobs" in _operator(objects)["args"]


# --- 5b. the web console ----------------------------------------------------------------------------

CONSOLE = f"{RELEASE}-console"
INGRESS = ["--set", "console.ingress.enabled=true", "--set", "console.ingress.host=stead.example.com",
           "--set", "console.ingress.className=nginx", "--set", "console.ingress.tls.secretName=stead-example-tls",
           "--set", "console.ingress.annotations.cert-manager\\.io/cluster-issuer=letsencrypt"]


def _console(objects: list[Manifest]) -> tuple[Manifest, Manifest]:
    """The console's pod spec and its one container."""
    pod = _named(objects, "Deployment", CONSOLE)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    return pod, container


def _selects(selector: Manifest, labels: Manifest) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.e2e
def test_the_console_has_no_credentials_only_the_cas_and_its_session_key(helm: Helm) -> None:
    """The console acts with its users' tokens only (issue 29): its ServiceAccount is bound to nothing
    and mounts no token; it gets the API server's CA (the kube-root-ca.crt ConfigMap, where a
    ServiceAccount's ca.crt would be), the config API's CA (ca.crt of the serving certificate's Secret,
    never its key) and the session key, a Fernet key the chart generated."""
    objects = _objects(_template(helm))
    account = _named(objects, "ServiceAccount", CONSOLE)
    assert account["automountServiceAccountToken"] is False
    for binding in _of_kind(objects, "RoleBinding") + _of_kind(objects, "ClusterRoleBinding"):
        assert CONSOLE not in {subject["name"] for subject in binding.get("subjects") or []}, binding
    pod, container = _console(objects)
    assert pod["serviceAccountName"] == CONSOLE and pod["automountServiceAccountToken"] is False
    assert container["image"] == _operator(objects)["image"]  # the same image
    assert container["args"] == [
        "console", "--listen=0.0.0.0", "--port=8090",
        f"--stead-api=https://{RELEASE}-config-api.{NAMESPACE}.svc:{CONFIG_API_PORT}",
        "--stead-api-ca=/etc/stead/stead-api-ca/ca.crt", "--session-key-file=/var/run/stead-console/key"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert volumes["kube-api-ca"]["projected"]["sources"] == [
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    assert mounts["kube-api-ca"]["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert volumes["stead-api-ca"]["secret"] == {"secretName": f"{RELEASE}-webhook-tls",
                                                 "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert volumes["session-key"]["secret"]["secretName"] == f"{RELEASE}-console-session"
    assert all(m["readOnly"] for name, m in mounts.items() if name != "tmp")
    assert {n for n, v in volumes.items() if "secret" in v} == {"stead-api-ca", "session-key"}
    key = base64.b64decode(_named(objects, "Secret", f"{RELEASE}-console-session")["data"]["key"])
    Fernet(key)  # 32 bytes in URL-safe base64: refused otherwise
    assert len(key) == 44
    # Probes, hardening and resources as the operator's.
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/console/healthz", "port": "http"}
    assert container["securityContext"] == _operator(objects)["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"] == _one(objects, "StatefulSet")["spec"]["template"]["spec"]["securityContext"]
    assert container["resources"]["limits"]["memory"]
    # Its Service selects its pods and no operator's; no operator Service selects a console pod.
    service = _named(objects, "Service", CONSOLE)
    console_labels = _named(objects, "Deployment", CONSOLE)["spec"]["template"]["metadata"]["labels"]
    operator_labels = _one(objects, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert _selects(service["spec"]["selector"], console_labels)
    assert not _selects(service["spec"]["selector"], operator_labels)
    for other in _of_kind(objects, "Service"):
        if other is not service:
            assert not _selects(other["spec"]["selector"], console_labels), other["metadata"]["name"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8090, "http")]
    assert not _of_kind(objects, "Ingress")


@pytest.mark.e2e
def test_the_console_ingress_secret_and_stead_api_follow_the_values(helm: Helm) -> None:
    objects = _objects(_template(helm, *INGRESS, "--set", "console.sessionKey.existingSecret=my-key"))
    ingress = _one(objects, "Ingress")
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["stead.example.com"], "secretName": "stead-example-tls"}]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "stead.example.com"
    assert rule["http"]["paths"] == [{"path": "/", "pathType": "Prefix", "backend": {
        "service": {"name": CONSOLE, "port": {"name": "http"}}}}]
    # A session key of one's own: the chart renders none, and mounts that one.
    assert not [s for s in _of_kind(objects, "Secret") if s["metadata"]["name"].endswith("-console-session")]
    pod, _ = _console(objects)
    assert {"name": "session-key", "secret": {"secretName": "my-key", "defaultMode": 0o440,
                                              "items": [{"key": "key", "path": "key"}]}} in pod["volumes"]
    # No config API: no --stead-api, no CA of it.
    pod, container = _console(_objects(_template(helm, *CONFIG_API_OFF)))
    assert not [a for a in container["args"] if a.startswith("--stead-api")]
    assert "stead-api-ca" not in {v["name"] for v in pod["volumes"]}
    # An Ingress without a host is refused, naming the value.
    result = helm("template", RELEASE, str(CHART), *KUBE_VERSION, "--set", "console.ingress.enabled=true", check=False)
    assert result.returncode != 0 and "console.ingress.enabled needs console.ingress.host" in result.stderr
    # console.enabled=false: nothing of it.
    off = _objects(_template(helm, "--set", "console.enabled=false"))
    assert not [o for o in off if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "console"]
    assert not [o for o in off if o["metadata"]["name"].startswith(CONSOLE)]


# --- 6. the API server accepts it ------------------------------------------------------------------


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
@pytest.mark.parametrize("values", [[], CONFIG_API_OFF, BASIC, [*JOBS_OFF, *TRUSTED], INGRESS],
                         ids=["default", "config-api-off", "basic", "jobs-off-trusted", "console-ingress"])
def test_rendered_chart_passes_server_side_dry_run(
    helm: Helm, kubectl: Kubectl, chart_namespace: str, values: list[str]
) -> None:
    # A release name of its own: nothing it renders can collide with what the session installed.
    release = f"{chart_namespace}-stead"
    objects = _objects(_template(helm, *values, namespace=chart_namespace, release=release))
    # No hooks: the built-in ClusterLifecycles are the operator's to install (apply_shipped), not Helm's.
    assert not [o for o in objects if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    rendered = yaml.safe_dump_all(objects)
    result = kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=rendered, check=False)
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(objects), result.stdout


@pytest.mark.e2e
def test_generated_certificate_and_session_key_are_reused_when_their_secrets_exist(
    helm: Helm, kubectl: Kubectl, cluster: ClusterInfo, chart_namespace: str
) -> None:
    """`lookup` finds the Secrets of the previous release: an upgrade keeps the certificate, and the
    console's session key (nobody is signed out)."""
    release = f"{chart_namespace}-stead"
    def secrets(*args: str, kubeconfig: Path | None = None) -> tuple[Manifest, Manifest]:
        objects = _objects(_template(helm, *args, namespace=chart_namespace, release=release, kubeconfig=kubeconfig))
        return _tls_secret(objects), _named(objects, "Secret", f"{release}-console-session")

    first, first_key = secrets()
    again, again_key = secrets()
    assert again["data"] != first["data"], "without a cluster to look in, every render generates anew"
    assert again_key["data"] != first_key["data"]

    kubectl("apply", "-f", "-", input=yaml.safe_dump_all([first, first_key]))
    # --dry-run=server lets `helm template` reach the cluster, so `lookup` sees the Secrets.
    again = _objects(_template(helm, "--dry-run=server", namespace=chart_namespace, release=release,
                               kubeconfig=cluster.kubeconfig))
    assert _tls_secret(again)["data"] == first["data"]
    assert _named(again, "Secret", f"{release}-console-session")["data"] == first_key["data"]
    hooks = _one(again, "ValidatingWebhookConfiguration")["webhooks"] + _one(
        again, "MutatingWebhookConfiguration")["webhooks"]
    assert all(hook["clientConfig"]["caBundle"] == first["data"]["ca.crt"] for hook in hooks)


@pytest.mark.e2e
def test_generated_certificate_is_replaced_when_made_for_other_names(
    helm: Helm, kubectl: Kubectl, cluster: ClusterInfo, chart_namespace: str
) -> None:
    """A Secret of an older chart (no config API names, no stead.dev/tls-sans annotation) or of the
    other configApi setting is not reused: the certificate must name every Service that serves it."""
    release = f"{chart_namespace}-stead"

    def render(*args: str, kubeconfig: Path | None = None) -> list[Manifest]:
        return _objects(_template(helm, *args, namespace=chart_namespace, release=release, kubeconfig=kubeconfig))

    older = _tls_secret(render(*CONFIG_API_OFF))
    del older["metadata"]["annotations"]
    kubectl("apply", "-f", "-", input=yaml.safe_dump(older))
    objects = render("--dry-run=server", kubeconfig=cluster.kubeconfig)
    secret = _tls_secret(objects)
    assert secret["data"] != older["data"]
    dns, ips = _leaf_names(secret)
    assert f"{release}-config-api.{chart_namespace}.svc" in dns and ips == {"127.0.0.1"}
    assert all(hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
               for hook in _one(objects, "ValidatingWebhookConfiguration")["webhooks"])

    # The same names again: reused; switching the config API off: replaced.
    kubectl("apply", "-f", "-", input=yaml.safe_dump(secret))
    assert _tls_secret(render("--dry-run=server", kubeconfig=cluster.kubeconfig))["data"] == secret["data"]
    off = _tls_secret(render(*CONFIG_API_OFF, "--dry-run=server", kubeconfig=cluster.kubeconfig))
    assert off["data"] != secret["data"]
    assert _leaf_names(off) == (_service_names(f"{release}-webhook", chart_namespace), set())


# --- 7. values.schema.json -------------------------------------------------------------------------


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
        ("configApi.enabled=maybe", "/configApi/enabled"),
        ("configApi.port=9443", "/configApi/port"),
        ("configApi.port=70000", "/configApi/port"),
        ("configApi.basicAuthSecret=Not_A_Name", "/configApi/basicAuthSecret"),
        ("configApi.workers=-1", "/configApi/workers"),
        ("configApi.service.type=ExternalName", "/configApi/service/type"),
        ("configApi.tls=true", "/configApi"),
        ("actions.jobs.enabled=maybe", "/actions/jobs/enabled"),
        ("actions.jobs.image=", "/actions/jobs/image"),
        ("actions.jobs.serviceAccount=Not_A_Name", "/actions/jobs/serviceAccount"),
        ("actions.trustLocalNamespaces=team-*", "/actions/trustLocalNamespaces"),
        ("actions.local=true", "/actions"),
        ("console.enabled=maybe", "/console/enabled"),
        ("console.service.type=ExternalName", "/console/service/type"),
        ("console.sessionKey.existingSecret=Not_A_Name", "/console/sessionKey/existingSecret"),
        ("console.ingress.host=not a host", "/console/ingress/host"),
        ("console.ingress.tls=true", "/console/ingress/tls"),
    ],
)
def test_schema_rejects_bad_values_naming_them(
    helm: Helm, setting: str, named: str
) -> None:
    result = helm("template", RELEASE, str(CHART), *KUBE_VERSION, "--set", setting, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert named in result.stderr, result.stderr


@pytest.mark.e2e
def test_the_operator_identity_cannot_change_or_delete_a_users_configmap(
    helm: Helm, kubectl: Kubectl, chart_namespace: str
) -> None:
    """The chart's ValidatingAdmissionPolicy, in the real API server: the operator's service account
    (impersonated) may change its own ConfigMaps, never a user's, whatever RBAC grants it."""
    release = f"{chart_namespace}-stead"
    objects = _objects(_template(helm, namespace=chart_namespace, release=release))
    [policy] = [o for o in _of_kind(objects, "ValidatingAdmissionPolicy")
                if o["metadata"]["name"].endswith("-own-configmaps")]
    [binding] = [o for o in _of_kind(objects, "ValidatingAdmissionPolicyBinding")
                 if o["metadata"]["name"].endswith("-own-configmaps")]
    account = _one(objects, "StatefulSet")["spec"]["template"]["spec"]["serviceAccountName"]
    as_operator = f"--as=system:serviceaccount:{chart_namespace}:{account}"
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all([policy, binding]))
    try:
        kubectl("create", "role", "cm", "-n", chart_namespace, "--verb=get,patch,update,delete",
                "--resource=configmaps")
        kubectl("create", "rolebinding", "cm", "-n", chart_namespace, "--role=cm",
                f"--serviceaccount={chart_namespace}:{account}")
        kubectl("create", "configmap", "users", "-n", chart_namespace, "--from-literal=k=mine")
        # a real owner: the garbage collector deletes a ConfigMap whose owner does not exist
        kubectl("apply", "-f", str(REPO / "crds" / "configvalues.yaml"))
        kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/configvalues.stead.dev")
        values = {"apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues", "metadata": {
            "name": "cv", "namespace": chart_namespace}, "spec": {"environment": "none", "resource": "r",
                                                                   "level": {}, "data": {}}}
        owner = json.loads(kubectl("create", "-o", "json", "-f", "-", input=json.dumps(values)).stdout)
        owned = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "steads", "namespace": chart_namespace, "ownerReferences": [{
                "apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues", "name": "cv", "controller": True,
                "uid": owner["metadata"]["uid"]}]}, "data": {"k": "v1"}}
        kubectl("create", "-f", "-", input=json.dumps(owned))

        patch = ["patch", "configmap", "users", "--type=merge", "-p", '{"data":{"k":"stead"}}']

        def enforced() -> bool:  # the binding takes a moment to reach admission: probe with dry runs
            result = kubectl(*patch, "--dry-run=server", as_operator, "-n", chart_namespace, check=False)
            return result.returncode != 0 and "ValidatingAdmissionPolicy" in result.stderr

        wait_until(enforced, 30, "the policy to be enforced")
        for args in (patch, ["delete", "configmap", "users"]):
            result = kubectl(*args, as_operator, "-n", chart_namespace, check=False)
            assert result.returncode != 0 and "only the ConfigMaps it created" in result.stderr, result.stderr
        mine = json.loads(kubectl("get", "configmap", "users", "-n", chart_namespace, "-o", "json").stdout)
        assert mine["data"] == {"k": "mine"}
        kubectl("patch", "configmap", "steads", "--type=merge", "-p", '{"data":{"k":"v2"}}', as_operator,
                "-n", chart_namespace)
        kubectl("delete", "configmap", "steads", as_operator, "-n", chart_namespace)
        kubectl("patch", "configmap", "users", "--type=merge", "-p", '{"data":{"k":"me"}}', "-n", chart_namespace)
    finally:
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                policy["metadata"]["name"], check=False)


@pytest.mark.e2e
def test_more_than_one_replica_needs_sharding_and_a_shared_runs_volume_saying_why(helm: Helm) -> None:
    result = helm("template", RELEASE, str(CHART), *KUBE_VERSION, "--set", "replicas=2", check=False)
    assert result.returncode != 0
    assert "replicas: 2 refused without sharding.enabled" in result.stderr, result.stderr
    result = helm("template", RELEASE, str(CHART), *KUBE_VERSION, "--set", "replicas=2",
                  "--set", "sharding.enabled=true", check=False)
    assert result.returncode != 0 and "refused without sharding.runsClaim" in result.stderr, result.stderr


@pytest.mark.e2e
def test_sharded_replicas_claim_projects_share_the_runs_volume_and_have_a_budget(helm: Helm) -> None:
    objects = _objects(_template(helm, "--set", "replicas=3", "--set", "sharding.enabled=true",
                                 "--set", "sharding.runsClaim=stead-runs", "--set", "sharding.leaseSeconds=10"))
    assert _one(objects, "StatefulSet")["spec"]["replicas"] == 3
    args = _operator(objects)["args"]
    assert {"--sharding=leases", "--replica-id=$(STEAD_REPLICA)", "--lease-seconds=10",
            "--pipelines-state=/var/lib/stead/runs"} <= set(args)
    volumes = _one(objects, "StatefulSet")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "runs", "persistentVolumeClaim": {"claimName": "stead-runs"}} in volumes
    assert _one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    role = _named(objects, "Role", RELEASE)
    [leases] = [r for r in role["rules"] if "leases" in r["resources"]]
    assert leases["apiGroups"] == ["coordination.k8s.io"] and {"get", "create", "update"} <= set(leases["verbs"])
    # every namespaced kind's objects get their bucket label from the mutating webhook, and the
    # operator may patch them (the label of objects from before sharding)
    crds = [crd for crd in _crd_files() if crd["spec"]["scope"] == "Namespaced"]
    mutation = _one(objects, "MutatingWebhookConfiguration")
    assert {hook["name"] for hook in mutation["webhooks"]} == {
        f"{crd['spec']['names']['plural']}.{crd['spec']['group']}" for crd in crds}
    patched = {resource for rule in _named(objects, "ClusterRole", RELEASE)["rules"]
               if rule["verbs"] == ["patch"] for resource in rule["resources"]}
    assert {crd["spec"]["names"]["plural"] for crd in crds} <= patched
    single = _objects(_template(helm))
    assert not [a for a in _operator(single)["args"] if a.startswith("--sharding")]
    assert len(_one(single, "MutatingWebhookConfiguration")["webhooks"]) < len(crds)


@pytest.mark.e2e
def test_runs_keep_their_state_on_the_store_volume(helm: Helm) -> None:
    objects = _objects(_template(helm))
    container = _operator(objects)
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [state] = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--pipelines-state=")]
    [store] = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--store=")]
    volume = next(path for path in mounts if store == path or store.startswith(path + "/"))
    assert state.startswith(volume + "/") and not mounts[volume].get("readOnly")


def test_template_without_kube_version_uses_the_pinned_capabilities(helm: Helm) -> None:
    """The helm build carries the local plane's Kubernetes version as its default capabilities."""
    result = helm("template", RELEASE, str(CHART), check=False)
    assert result.returncode == 0, result.stderr
