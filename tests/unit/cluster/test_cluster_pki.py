"""The local control plane's certificates: which ones, their names and usages, files, renewal, a real handshake."""

from __future__ import annotations

import base64
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from operators.cluster import pki
from operators.cluster.planeconfig import render_admission_config, render_kubeconfig, render_webhook_client_kubeconfig
from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(names.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return dns, ips


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> pki.PkiFiles:
    return pki.ensure_pki(tmp_path_factory.mktemp("pki"))


def _subject(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(attribute.value) for attribute in cert.subject.get_attributes_for_oid(oid)]


def test_the_apiserver_cert_is_signed_by_the_serving_ca_for_every_name_of_the_apiserver(
    files: pki.PkiFiles,
) -> None:
    cert = _cert(files.apiserver_cert.read_bytes())

    cert.verify_directly_issued_by(_cert(files.serving_ca_cert.read_bytes()))
    dns, ips = _sans(cert)
    assert {"localhost", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} <= dns
    assert {"127.0.0.1", pki.SERVICE_IP} <= ips
    assert _usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH}
    assert KeyPair(files.apiserver_cert.read_bytes(), files.apiserver_key.read_bytes()).matches()


def test_the_controller_manager_serves_on_loopback_with_a_serving_ca_cert(files: pki.PkiFiles) -> None:
    cert = _cert(files.controller_manager_serving_cert.read_bytes())

    cert.verify_directly_issued_by(_cert(files.serving_ca_cert.read_bytes()))
    assert _sans(cert) == ({"localhost"}, {"127.0.0.1"})
    assert _usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH}


@pytest.mark.parametrize(
    ("cert_name", "user", "groups"),
    [("admin_cert", pki.ADMIN_USER, [pki.ADMIN_GROUP]),
     ("controller_manager_client_cert", pki.CONTROLLER_MANAGER_USER, [])],
)
def test_client_certs_are_signed_by_the_client_ca_and_name_the_user_and_groups(
    files: pki.PkiFiles, cert_name: str, user: str, groups: list[str]
) -> None:
    cert = _cert(getattr(files, cert_name).read_bytes())

    cert.verify_directly_issued_by(_cert(files.client_ca_cert.read_bytes()))
    assert _subject(cert, NameOID.COMMON_NAME) == [user]
    assert _subject(cert, NameOID.ORGANIZATION_NAME) == groups
    assert _usages(cert) == {ExtendedKeyUsageOID.CLIENT_AUTH}


def test_the_two_cas_are_distinct(files: pki.PkiFiles) -> None:
    cas = [files.serving_ca_cert, files.client_ca_cert]
    subjects = {_cert(path.read_bytes()).subject.rfc4514_string() for path in cas}
    assert subjects == {"CN=stead-serving-ca", "CN=stead-client-ca"}


def test_the_api_servers_webhook_certificate_has_a_ca_of_its_own_named_in_the_admission_config(
    files: pki.PkiFiles, tmp_path: Path,
) -> None:
    """Issue 25, finding 2: a webhook that trusts this CA trusts the API server alone, not the
    users whose certificates the client CA signs; the API server presents it to every webhook."""
    cert = _cert(files.apiserver_webhook_client_cert.read_bytes())
    cert.verify_directly_issued_by(_cert(files.webhook_client_ca_cert.read_bytes()))
    assert _subject(cert, NameOID.COMMON_NAME) == [pki.WEBHOOK_CLIENT_USER]
    assert _usages(cert) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    cas = {_cert(p.read_bytes()).subject for p in (files.client_ca_cert, files.webhook_client_ca_cert)}
    assert len(cas) == 2
    kubeconfig = yaml.safe_load(render_webhook_client_kubeconfig(b"CERT", b"KEY"))
    assert kubeconfig["users"] == [{"name": "*", "user": {"client-certificate-data": base64.b64encode(b"CERT").decode(),
                                                          "client-key-data": base64.b64encode(b"KEY").decode()}}]
    config = yaml.safe_load(render_admission_config(tmp_path / "webhook.kubeconfig"))
    assert {p["name"]: p["configuration"]["kubeConfigFile"] for p in config["plugins"]} == {
        "ValidatingAdmissionWebhook": str(tmp_path / "webhook.kubeconfig"),
        "MutatingAdmissionWebhook": str(tmp_path / "webhook.kubeconfig")}


def test_the_service_account_key_pair_signs_and_verifies() -> None:
    private_pem, public_pem = pki.make_rsa_key_pair()
    private = serialization.load_pem_private_key(private_pem, password=None)
    public = serialization.load_pem_public_key(public_pem)
    assert isinstance(private, rsa.RSAPrivateKey)
    assert isinstance(public, rsa.RSAPublicKey)

    signature = private.sign(b"token", padding.PKCS1v15(), SHA256())
    public.verify(signature, b"token", padding.PKCS1v15(), SHA256())


def test_ensure_pki_creates_every_file_once_with_private_keys_unreadable_to_others(
    tmp_path: Path,
) -> None:
    files = pki.ensure_pki(tmp_path / "pki")
    paths = [getattr(files, name) for name in dir(pki.PkiFiles) if not name.startswith("_")
             and isinstance(getattr(pki.PkiFiles, name), property)]
    before = {path: path.read_bytes() for path in paths}

    again = pki.ensure_pki(tmp_path / "pki")

    assert again == files
    assert {path: path.read_bytes() for path in paths} == before
    assert files.serving_ca_cert.parent == tmp_path / "pki"
    for path in paths:
        if path.suffix == ".key":
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_ensure_pki_reissues_leaves_when_their_ca_is_replaced(tmp_path: Path) -> None:
    files = pki.ensure_pki(tmp_path)
    files.serving_ca_cert.unlink()

    pki.ensure_pki(tmp_path)

    new_ca = _cert(files.serving_ca_cert.read_bytes())
    _cert(files.apiserver_cert.read_bytes()).verify_directly_issued_by(new_ca)
    _cert(files.controller_manager_serving_cert.read_bytes()).verify_directly_issued_by(new_ca)


def test_ensure_pki_reissues_a_leaf_whose_key_is_not_its_certificates(tmp_path: Path) -> None:
    """A write cut short between the key and the certificate leaves a pair that cannot work."""
    files = pki.ensure_pki(tmp_path)
    files.admin_key.write_bytes(files.controller_manager_client_key.read_bytes())

    pki.ensure_pki(tmp_path)

    assert KeyPair(files.admin_cert.read_bytes(), files.admin_key.read_bytes()).matches()


def test_ensure_pki_keeps_the_cas_and_current_leaves(tmp_path: Path) -> None:
    files = pki.ensure_pki(tmp_path)
    ca, leaf = files.client_ca_cert.read_bytes(), files.admin_cert.read_bytes()

    pki.ensure_pki(tmp_path)

    assert files.client_ca_cert.read_bytes() == ca
    assert files.admin_cert.read_bytes() == leaf


def test_a_leaf_close_to_expiry_is_not_current(tmp_path: Path) -> None:
    ca = make_ca("serving")
    soon = make_leaf(ca, "server", hosts=["localhost"], days=pki.RENEW_BEFORE.days - 1)
    later = make_leaf(ca, "server", hosts=["localhost"], days=pki.RENEW_BEFORE.days + 1)
    for name, pair in (("soon", soon), ("later", later)):
        (tmp_path / f"{name}.crt").write_bytes(pair.cert_pem)
        (tmp_path / f"{name}.key").write_bytes(pair.key_pem)

    assert not pki.leaf_is_current(tmp_path / "soon.crt", tmp_path / "soon.key", ca)
    assert pki.leaf_is_current(tmp_path / "later.crt", tmp_path / "later.key", ca)
    assert not pki.leaf_is_current(tmp_path / "later.crt", tmp_path / "later.key", make_ca("serving"))


def test_the_generated_material_completes_a_mutual_tls_handshake(tmp_path: Path) -> None:
    """What kube-apiserver and kubectl will do: the server checks the client against the client
    CA, the client checks the server's name (an IP and a DNS name) against the serving CA."""
    files = pki.ensure_pki(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(files.apiserver_cert, files.apiserver_key)
    server_context.load_verify_locations(files.client_ca_cert)
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context(cafile=str(files.serving_ca_cert))
    client_context.load_cert_chain(files.admin_cert, files.admin_key)

    for server_name in ("127.0.0.1", "localhost"):
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            peers: list[str] = []

            def serve(listener: socket.socket = listener, peers: list[str] = peers) -> None:
                connection, _ = listener.accept()
                with server_context.wrap_socket(connection, server_side=True) as tls:
                    peer = tls.getpeercert(binary_form=True)
                    assert peer is not None
                    subject = x509.load_der_x509_certificate(peer).subject
                    peers.append(str(subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value))
                    tls.sendall(b"ok")

            thread = threading.Thread(target=serve, daemon=True)
            thread.start()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                    client_context.wrap_socket(raw, server_hostname=server_name) as tls:
                assert tls.recv(2) == b"ok"
            thread.join(10)
            assert peers == ["stead-admin"]


def test_the_kubeconfig_embeds_the_server_ca_and_client_credentials() -> None:
    ca_pem = make_ca("serving").cert_pem
    admin = make_leaf(make_ca("clients"), "stead-admin", server=False, client=True)
    cert_pem, key_pem = admin.cert_pem, admin.key_pem

    text = render_kubeconfig("https://127.0.0.1:16443", ca_pem, cert_pem, key_pem, "stead-admin")
    document = yaml.safe_load(text)

    assert document["apiVersion"] == "v1"
    assert document["kind"] == "Config"
    context_name = document["current-context"]
    context = next(c["context"] for c in document["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in document["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in document["users"] if u["name"] == context["user"])
    assert cluster["server"] == "https://127.0.0.1:16443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == ca_pem
    assert base64.b64decode(user["client-certificate-data"]) == cert_pem
    assert base64.b64decode(user["client-key-data"]) == key_pem


def test_the_authentication_config_names_each_jwt_issuer_and_the_api_server_is_started_with_it(
        tmp_path: Path) -> None:
    from operators.cluster.build import Binaries
    from operators.cluster.planeconfig import JwtIssuer, apiserver_argv, render_authentication_config
    from operators.cluster.ports import Ports

    assert yaml.safe_load(render_authentication_config()) == {
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthenticationConfiguration", "jwt": []}
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    config = yaml.safe_load(render_authentication_config(
        [JwtIssuer("https://127.0.0.1:9443", ("stead-console",), pem, groups_claim="groups")]))
    assert config["jwt"] == [{
        "issuer": {"url": "https://127.0.0.1:9443", "audiences": ["stead-console"], "certificateAuthority": pem},
        "claimMappings": {"username": {"claim": "sub", "prefix": "oidc:"},
                          "groups": {"claim": "groups", "prefix": "oidc:"}}}]
    with pytest.raises(ValueError, match="not https://"):
        JwtIssuer("http://127.0.0.1:9443", ("c",))
    binaries = Binaries(*(tmp_path / name for name in ("apiserver", "cm", "kubectl", "etcd", "helm")))
    argv = apiserver_argv(binaries, pki.PkiFiles(tmp_path), Ports(1, 2, 3, 4), audit_policy=tmp_path / "a",
                          audit_log=tmp_path / "l", admission_config=tmp_path / "ad",
                          authentication_config=tmp_path / "authn.yaml")
    assert f"--authentication-config={tmp_path / 'authn.yaml'}" in argv
