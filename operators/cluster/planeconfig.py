"""What the control plane's processes are told: their command lines and the files they read.

`LocalControlPlane` (controlplane.py) decides when etcd, kube-apiserver and kube-controller-manager
start and stop; this module holds what it hands them, as pure functions of the plane's ports, paths
and certificates: the kubeconfigs (admin, controller-manager, the local node's components), the
audit policy, the admission configuration and each process's flags. Kept apart so that the flags,
each with the reason it is set, can be read and tested without starting anything.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from operators.cluster.build import Binaries
from operators.cluster.pki import PkiFiles
from operators.cluster.ports import Ports
from operators.cluster.processes import LOOPBACK

SERVICE_CLUSTER_IP_RANGE: Final = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
CLUSTER_NAME: Final = "stead"

DISABLED_CONTROLLERS: Final = (
    "cloud-node-lifecycle-controller",
    "node-route-controller",
    "service-lb-controller",
    "node-ipam-controller",
)
"""Controllers that need a cloud provider or node CIDR allocation, neither of which exists here."""

AUDIT_POLICY: Final = """\
# Written by stead: every request at level Metadata, except the noise of leader-election leases,
# events reads and health probes. RequestReceived is omitted, so each request is logged once (at
# ResponseComplete; long-running watches also at ResponseStarted).
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    verbs: ["get", "list", "watch"]
    resources:
      - group: "coordination.k8s.io"
        resources: ["leases"]
      - group: ""
        resources: ["events"]
      - group: "events.k8s.io"
        resources: ["events"]
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
  - level: Metadata
"""


def render_kubeconfig(
    server: str,
    ca_cert_pem: bytes,
    client_cert_pem: bytes,
    client_key_pem: bytes,
    user: str,
    cluster: str = CLUSTER_NAME,
) -> str:
    """A self-contained kubeconfig (certificates embedded) with one cluster, user and context."""

    def encode(pem: bytes) -> str:
        return base64.b64encode(pem).decode("ascii")

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster,
             "cluster": {"server": server, "certificate-authority-data": encode(ca_cert_pem)}},
        ],
        "users": [
            {"name": user,
             "user": {"client-certificate-data": encode(client_cert_pem),
                      "client-key-data": encode(client_key_pem)}},
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }
    return yaml.safe_dump(document, sort_keys=False)


def render_webhook_client_kubeconfig(cert_pem: bytes, key_pem: bytes) -> str:
    """The kubeconfig the API server reads for the credentials it presents to admission webhooks:
    one user, `*` (every webhook, whatever its host), with the webhook client certificate."""
    def encode(pem: bytes) -> str:
        return base64.b64encode(pem).decode("ascii")

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [{"name": "*", "user": {"client-certificate-data": encode(cert_pem),
                                          "client-key-data": encode(key_pem)}}],
    }
    return yaml.safe_dump(document, sort_keys=False)


def render_admission_config(webhook_client_kubeconfig: Path) -> str:
    """An AdmissionConfiguration naming that kubeconfig for both webhook admission plugins."""
    plugins = [
        {"name": name, "configuration": {
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(webhook_client_kubeconfig)}}
        for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
    ]
    document = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration", "plugins": plugins}
    return yaml.safe_dump(document, sort_keys=False)


@dataclass(frozen=True)
class JwtIssuer:
    """An OIDC issuer whose id_tokens the API server accepts as users' credentials (a JWT authenticator of
    its AuthenticationConfiguration): `aud` must be one of `audiences`, and the user is `username_prefix`
    followed by the `username_claim` claim (a prefix keeps an issuer's users apart from every other's)."""

    url: str
    audiences: tuple[str, ...]
    certificate_authority: str = ""
    """PEM of the CA the issuer's HTTPS is trusted by (empty: the system's)."""
    username_claim: str = "sub"
    username_prefix: str = "oidc:"
    groups_claim: str = ""
    """A claim whose strings become the user's groups, each prefixed with `username_prefix` (empty: none)."""

    def __post_init__(self) -> None:
        if not self.url.startswith("https://"):
            raise ValueError(f"JwtIssuer.url: {self.url!r} is not https:// (the API server refuses any other)")
        if not self.audiences:
            raise ValueError("JwtIssuer.audiences: at least one")


def render_authentication_config(issuers: Sequence[JwtIssuer] = ()) -> str:
    """kube-apiserver's AuthenticationConfiguration (`--authentication-config`): one JWT authenticator per
    issuer. With none it only says so: service-account tokens and client certificates are not of this file
    and keep working either way."""
    jwt = []
    for issuer in issuers:
        spec: dict[str, object] = {"url": issuer.url, "audiences": list(issuer.audiences)}
        if issuer.certificate_authority:
            spec["certificateAuthority"] = issuer.certificate_authority
        mappings: dict[str, object] = {"username": {"claim": issuer.username_claim, "prefix": issuer.username_prefix}}
        if issuer.groups_claim:
            mappings["groups"] = {"claim": issuer.groups_claim, "prefix": issuer.username_prefix}
        jwt.append({"issuer": spec, "claimMappings": mappings})
    document = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthenticationConfiguration", "jwt": jwt}
    return yaml.safe_dump(document, sort_keys=False)


def etcd_argv(etcd: Path, ports: Ports, data_dir: Path) -> list[str]:
    """etcd's command line: one member on loopback, its data in `data_dir`."""
    client = f"http://{LOOPBACK}:{ports.etcd_client}"
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        str(etcd),
        f"--name={CLUSTER_NAME}",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={CLUSTER_NAME}={peer}",
        # A throw-away development store: skipping fsync makes every write (and the
        # tests) much faster; a machine crash may lose the last writes, nothing else.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]

def apiserver_argv(
    binaries: Binaries, pki: PkiFiles, ports: Ports, *, audit_policy: Path, audit_log: Path, admission_config: Path,
    authentication_config: Path | None = None,
) -> list[str]:
    """kube-apiserver's command line: loopback only, the plane's certificates, audit, admission and, when given,
    the AuthenticationConfiguration of its JWT (OIDC) issuers, which it reloads whenever the file changes."""
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.client_ca_cert}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_public_key}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--audit-policy-file={audit_policy}",
        f"--audit-log-path={audit_log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",
        # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints reject;
        # nothing routes Service IPs here anyway, so leave them unmanaged.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        # Kubelets (the local node, node.py): the API server dials them at their InternalIP
        # (the node's bridge address; any node name works), with a client certificate the
        # kubelet authenticates (no anonymous access to a kubelet).
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client_cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client_key}",
        # Webhooks and aggregated APIs are dialled at their Service's endpoints (Pod IPs on
        # the node's bridge) rather than the ClusterIP: there is no kube-proxy here.
        "--enable-aggregator-routing=true",
        # A kubelet may only touch its own Node and the Pods bound to it, as in any cluster.
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        # Admission webhooks get the API server's webhook client certificate, so that they can
        # refuse reviews that do not come from it (a forged review is an attack, issue 25).
        f"--admission-control-config-file={admission_config}",
        *([f"--authentication-config={authentication_config}"] if authentication_config else []),
    ]

def controller_manager_argv(
    binaries: Binaries, pki: PkiFiles, ports: Ports, *, kubeconfig: Path, volume_plugin_dir: Path,
) -> list[str]:
    """No delegated authentication: only the always-allowed health paths are served, and the
    apiserver has no front-proxy (requestheader) CA for it to look up."""
    controllers = ",".join(["*", *(f"-{name}" for name in DISABLED_CONTROLLERS)])
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        f"--tls-cert-file={pki.controller_manager_serving_cert}",
        f"--tls-private-key-file={pki.controller_manager_serving_key}",
        f"--controllers={controllers}",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.serving_ca_cert}",
        "--use-service-account-credentials=true",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--cluster-name={CLUSTER_NAME}",
        "--leader-elect=false",
        "--profiling=false",
        # Its default is a system directory, which it creates at every start.
        f"--flex-volume-plugin-dir={volume_plugin_dir}",
    ]
