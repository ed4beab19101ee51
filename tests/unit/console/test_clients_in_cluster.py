"""The console in its Pod (the chart's Deployment): where the API server is and its CA, with no token file."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from operators.console.clients import kube_access


def _ca(path: Path) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_in_a_pod_the_address_comes_from_the_environment_and_the_ca_from_its_file_without_a_token(
        tmp_path: Path) -> None:
    ca = _ca(tmp_path / "ca.crt")  # alone in its directory, as the chart mounts it: no token beside it
    access = kube_access(None, {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, ca)
    assert access.server == "https://10.96.0.1:443"
    assert access.headers == {}
    assert [c["subject"] for c in access.ssl_context.get_ca_certs()] == [((("commonName", "kubernetes"),),)]
    v6 = kube_access(None, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, ca)
    assert v6.server == "https://[fd00::1]:6443"
