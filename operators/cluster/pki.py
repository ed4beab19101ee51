"""Which certificates and keys the local control plane needs, where they live, and their renewal.

The certificates themselves are made by ``operators.runtime.serving.certs``; only the service-account key
pair (RSA, no certificate) is made here.

Kubernetes authenticates everything with X.509 here, as envtest does: a *serving* CA signs the
kube-apiserver's (and controller-manager's) TLS certificates, a separate *client* CA signs the
certificates users present (the admin's ``O=system:masters`` one, the controller-manager's), and
an RSA key pair signs and verifies service-account tokens. A third CA, *webhook client*, signs only
the certificate the API server presents to admission webhooks (``--admission-control-config-file``),
so that a webhook that trusts this CA knows a review came from the API server and not from
anything else that reaches its port. (The operator makes its own webhook *serving* CA each time it
starts in local mode.)

The files persist in ``<home>/pki``: CAs and the service-account key are made once (replacing
them would invalidate the kubeconfig, tokens and caBundles handed out), leaf certificates are
remade when missing, close to expiry, not matching their key or no longer signed by their CA.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from operators.cluster.atomicwrite import write_file_atomically
from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf, private_key_pem

LEAF_VALID_DAYS: Final = 365
"""Shorter than a CA's: ``ensure_pki`` renews leaves on every ``up`` anyway."""
RENEW_BEFORE: Final = datetime.timedelta(days=7)

ADMIN_USER: Final = "stead-admin"
ADMIN_GROUP: Final = "system:masters"
CONTROLLER_MANAGER_USER: Final = "system:kube-controller-manager"
"""The user the bootstrap RBAC policy grants the controller-manager's permissions to."""
KUBELET_CLIENT_USER: Final = "kube-apiserver-kubelet-client"
"""Who the API server is to a kubelet (logs, exec, port-forward): the kubelet authenticates it by
this certificate and asks the API server whether it may (``system:kubelet-api-admin``, bound by the
local node when it starts)."""

SERVICE_IP: Final = "10.0.0.1"
"""First address of ``--service-cluster-ip-range=10.0.0.0/24``: the ``kubernetes`` Service."""

APISERVER_HOSTS: Final = (
    "localhost",
    "127.0.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    SERVICE_IP,
)
LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1")
WEBHOOK_CLIENT_USER: Final = "kube-apiserver-webhook-client"
"""Who the API server is to an admission webhook (the CN of the certificate it presents)."""


def make_rsa_key_pair(bits: int = 2048) -> tuple[bytes, bytes]:
    """(private PEM, public PEM) for signing and verifying service-account tokens.

    RSA because kube-apiserver's token signer defaults to RS256.
    """
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_key_pem(key), public


@dataclass(frozen=True)
class PkiFiles:
    """Where each certificate and key of one control plane lives (all under ``<home>/pki``)."""

    directory: Path

    def _path(self, name: str) -> Path:
        return self.directory / name

    @property
    def serving_ca_cert(self) -> Path:
        return self._path("serving-ca.crt")

    @property
    def serving_ca_key(self) -> Path:
        return self._path("serving-ca.key")

    @property
    def apiserver_cert(self) -> Path:
        return self._path("apiserver.crt")

    @property
    def apiserver_key(self) -> Path:
        return self._path("apiserver.key")

    @property
    def controller_manager_serving_cert(self) -> Path:
        return self._path("controller-manager-serving.crt")

    @property
    def controller_manager_serving_key(self) -> Path:
        return self._path("controller-manager-serving.key")

    @property
    def client_ca_cert(self) -> Path:
        return self._path("client-ca.crt")

    @property
    def client_ca_key(self) -> Path:
        return self._path("client-ca.key")

    @property
    def admin_cert(self) -> Path:
        return self._path("admin.crt")

    @property
    def admin_key(self) -> Path:
        return self._path("admin.key")

    @property
    def controller_manager_client_cert(self) -> Path:
        return self._path("controller-manager.crt")

    @property
    def controller_manager_client_key(self) -> Path:
        return self._path("controller-manager.key")

    @property
    def apiserver_kubelet_client_cert(self) -> Path:
        return self._path("apiserver-kubelet-client.crt")

    @property
    def apiserver_kubelet_client_key(self) -> Path:
        return self._path("apiserver-kubelet-client.key")

    @property
    def webhook_client_ca_cert(self) -> Path:
        return self._path("webhook-client-ca.crt")

    @property
    def webhook_client_ca_key(self) -> Path:
        return self._path("webhook-client-ca.key")

    @property
    def apiserver_webhook_client_cert(self) -> Path:
        return self._path("apiserver-webhook-client.crt")

    @property
    def apiserver_webhook_client_key(self) -> Path:
        return self._path("apiserver-webhook-client.key")

    @property
    def service_account_key(self) -> Path:
        return self._path("service-account.key")

    @property
    def service_account_public_key(self) -> Path:
        return self._path("service-account.pub")


def _read_pair(cert_path: Path, key_path: Path) -> KeyPair | None:
    """The pair in the files, or None when one is missing or the key is not the certificate's."""
    try:
        pair = KeyPair(cert_path.read_bytes(), key_path.read_bytes())
    except OSError:
        return None
    return pair if pair.matches() else None


def _write_pair(cert_path: Path, key_path: Path, pair: KeyPair) -> None:
    write_file_atomically(key_path, pair.key_pem, 0o600)
    write_file_atomically(cert_path, pair.cert_pem)


def _ensure_ca(cert_path: Path, key_path: Path, common_name: str) -> KeyPair:
    """The CA in the files; made only when there is none (or half of one, from a cut-short write)."""
    existing = _read_pair(cert_path, key_path)
    if existing is not None:
        return existing
    made = make_ca(common_name)
    _write_pair(cert_path, key_path, made)
    return made


def leaf_is_current(cert_path: Path, key_path: Path, ca: KeyPair) -> bool:
    """True when the leaf and its key exist, match, are signed by ``ca`` and are not about to expire."""
    leaf = _read_pair(cert_path, key_path)
    if leaf is None:
        return False
    try:
        leaf.certificate.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return leaf.certificate.not_valid_after_utc - RENEW_BEFORE > datetime.datetime.now(datetime.UTC)


def _ensure_leaf(
    cert_path: Path,
    key_path: Path,
    ca: KeyPair,
    common_name: str,
    *,
    hosts: Sequence[str] = (),
    organizations: Sequence[str] = (),
    client: bool = False,
) -> None:
    """(Re)make the leaf unless it is current: a serving certificate for ``hosts``, or a client one."""
    if leaf_is_current(cert_path, key_path, ca):
        return
    leaf = make_leaf(ca, common_name, hosts=hosts, organizations=organizations, server=not client,
                     client=client, days=LEAF_VALID_DAYS)
    _write_pair(cert_path, key_path, leaf)


def ensure_client_certificate(
    files: PkiFiles, cert_path: Path, key_path: Path, user: str, groups: Sequence[str] = ()
) -> None:
    """A client certificate of the plane's client CA for ``user`` in ``groups`` (the local node's
    kubelet and scheduler), remade when missing or stale like the plane's own."""
    ca = _read_pair(files.client_ca_cert, files.client_ca_key)
    if ca is None:
        raise FileNotFoundError(f"no client CA in {files.directory}: start the control plane first")
    _ensure_leaf(cert_path, key_path, ca, user, organizations=groups, client=True)


def ensure_pki(directory: Path) -> PkiFiles:
    """Create whatever certificates and keys are missing or stale under ``directory``."""
    files = PkiFiles(directory)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    serving_ca = _ensure_ca(files.serving_ca_cert, files.serving_ca_key, "stead-serving-ca")
    client_ca = _ensure_ca(files.client_ca_cert, files.client_ca_key, "stead-client-ca")

    _ensure_leaf(files.apiserver_cert, files.apiserver_key, serving_ca, "kube-apiserver",
                 hosts=APISERVER_HOSTS)
    _ensure_leaf(files.controller_manager_serving_cert, files.controller_manager_serving_key,
                 serving_ca, "kube-controller-manager", hosts=LOOPBACK_HOSTS)
    _ensure_leaf(files.admin_cert, files.admin_key, client_ca, ADMIN_USER,
                 organizations=[ADMIN_GROUP], client=True)
    _ensure_leaf(files.controller_manager_client_cert, files.controller_manager_client_key,
                 client_ca, CONTROLLER_MANAGER_USER, client=True)
    _ensure_leaf(files.apiserver_kubelet_client_cert, files.apiserver_kubelet_client_key,
                 client_ca, KUBELET_CLIENT_USER, client=True)
    webhook_client_ca = _ensure_ca(files.webhook_client_ca_cert, files.webhook_client_ca_key,
                                   "stead-webhook-client-ca")
    _ensure_leaf(files.apiserver_webhook_client_cert, files.apiserver_webhook_client_key,
                 webhook_client_ca, WEBHOOK_CLIENT_USER, client=True)

    if not (files.service_account_key.exists() and files.service_account_public_key.exists()):
        private, public = make_rsa_key_pair()
        write_file_atomically(files.service_account_key, private, 0o600)
        write_file_atomically(files.service_account_public_key, public)
    return files
