"""Which clients the webhook server serves (issue 25, finding 2), without a cluster: the CA found
for `--webhook-client-ca`, and a TLS handshake on loopback with and without its certificate."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from operators.runtime.kopfwiring import WEBHOOK_CLIENT_CA_CONFIGMAP, _require_client_certificates, webhook_client_ca
from operators.runtime.serving.certs import make_ca, make_leaf
from operators.runtime.serving.tls import server_context
from tests.unit.fakeapi import FakeApi

CM_PATH = f"/api/v1/namespaces/kube-system/configmaps/{WEBHOOK_CLIENT_CA_CONFIGMAP}"


def test_auto_takes_the_local_planes_ca_and_is_off_without_one(tmp_path: Path) -> None:
    kube = FakeApi()
    assert asyncio.run(webhook_client_ca(kube, "auto", tmp_path)) is None  # no ConfigMap: served to anyone
    ca = make_ca("webhook-client")
    kube.add(CM_PATH, {"apiVersion": "v1", "kind": "ConfigMap", "data": {"ca.crt": ca.cert_pem.decode()}})
    found = asyncio.run(webhook_client_ca(kube, "auto", tmp_path))
    assert found is not None and found.read_bytes() == ca.cert_pem
    assert asyncio.run(webhook_client_ca(kube, "off", tmp_path)) is None
    assert asyncio.run(webhook_client_ca(kube, str(found), tmp_path)) == found


def test_a_configmap_without_a_certificate_fails_the_start_naming_it(tmp_path: Path) -> None:
    kube = FakeApi()
    kube.add(CM_PATH, {"apiVersion": "v1", "kind": "ConfigMap", "data": {"ca.crt": "not a certificate"}})
    with pytest.raises(ValueError, match=r"kube-system/stead-webhook-client-ca: data.ca.crt"):
        asyncio.run(webhook_client_ca(kube, "auto", tmp_path))


@contextlib.contextmanager
def serving(context: ssl.SSLContext, attempts: int) -> Iterator[int]:
    """A loopback TLS server that completes (or refuses) `attempts` handshakes, then stops."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def accept() -> None:
        for _ in range(attempts):
            with contextlib.suppress(OSError), listener.accept()[0] as conn, \
                    context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        thread.join(timeout=10)
        listener.close()


def handshake(port: int, cert: tuple[Path, Path] | None) -> bytes:
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        client.load_cert_chain(*cert)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            client.wrap_socket(raw) as tls:
        return tls.recv(2)


def test_only_a_certificate_of_the_client_ca_completes_a_handshake(tmp_path: Path) -> None:
    serving_ca, client_ca, other_ca = make_ca("serving"), make_ca("webhook-client"), make_ca("users")
    files: dict[str, tuple[Path, Path]] = {}
    for name, pair in {"server": make_leaf(serving_ca, "webhook", hosts=["127.0.0.1"]),
                       "apiserver": make_leaf(client_ca, "kube-apiserver-webhook-client", server=False, client=True),
                       "user": make_leaf(other_ca, "eve", server=False, client=True)}.items():
        files[name] = (tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
        files[name][0].write_bytes(pair.cert_pem)
        files[name][1].write_bytes(pair.key_pem)
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    context = server_context(*files["server"])
    _require_client_certificates(context, tmp_path / "client-ca.crt")
    forgers: list[tuple[Path, Path] | None] = [None, files["user"]] * 3  # bounded
    with serving(context, len(forgers) + 1) as port:
        for cert in forgers:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                handshake(port, cert)
        assert handshake(port, files["apiserver"]) == b"ok"
