"""A renewed webhook certificate is served without a restart."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from operators.runtime.serving.certs import make_ca, make_leaf
from operators.runtime.serving.tls import reload_certificate


async def _served_serial(port: int, ca_pem: bytes) -> int:
    client = ssl.create_default_context(cadata=ca_pem.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der).serial_number


def test_renewed_certificate_is_loaded_into_the_live_context(tmp_path: Path) -> None:
    ca = make_ca("test-ca")
    first, second = (make_leaf(ca, "webhook", hosts=["127.0.0.1"]) for _ in range(2))
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first.cert_pem)
    key.write_bytes(first.key_pem)

    async def scenario() -> tuple[int, int]:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        reloader = asyncio.create_task(reload_certificate(context, cert, key, every=0.02))
        before = await _served_serial(port, ca.cert_pem)
        cert.write_bytes(second.cert_pem)
        key.write_bytes(second.key_pem)
        later = os.stat(cert).st_mtime + 1  # a renewal is a newer file, even within one clock tick
        os.utime(cert, (later, later))
        os.utime(key, (later, later))
        after = before
        for _ in range(250):
            after = await _served_serial(port, ca.cert_pem)
            if after != before:
                break
            await asyncio.sleep(0.02)
        reloader.cancel()
        server.close()
        return before, after

    before, after = asyncio.run(scenario())
    assert before == first.certificate.serial_number
    assert after == second.certificate.serial_number


def test_a_private_key_is_written_0600_from_its_first_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No window where the key is readable by others: the mode is given when the file is created."""
    from operators.runtime.serving import tls

    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def spying_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        opened.append((str(path), flags, mode))
        return real_open(path, flags, mode)

    chmods: list[object] = []
    monkeypatch.setattr(tls.os, "open", spying_open)
    monkeypatch.setattr(os, "chmod", lambda *a, **k: chmods.append(a))
    monkeypatch.setattr(Path, "chmod", lambda *a, **k: chmods.append(a))
    key = tmp_path / "tls.key"
    key.write_bytes(b"old")
    tls.write_private(key, b"-----BEGIN PRIVATE KEY-----")
    assert key.read_bytes() == b"-----BEGIN PRIVATE KEY-----"
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert [mode for _, flags, mode in opened if flags & os.O_CREAT] == [0o600]
    assert chmods == []


def test_the_config_api_serves_a_renewed_mounted_certificate(tmp_path: Path) -> None:
    from operators.config.server import ConfigApiServer

    ca = make_ca("test-ca")
    first, second = (make_leaf(ca, "config-api", hosts=["127.0.0.1"]) for _ in range(2))
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first.cert_pem)
    key.write_bytes(first.key_pem)

    async def scenario() -> tuple[int, int]:
        import contextlib
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = ConfigApiServer(listen="127.0.0.1", port=port, tls_dir=tmp_path, mounted=True, cache=False,
                                 cert_reload_seconds=0.02)
        async with contextlib.AsyncExitStack() as stack:
            await server.serve(object(), stack)  # type: ignore[arg-type]  # no request reaches the API here
            before = await _served_serial(port, ca.cert_pem)
            cert.write_bytes(second.cert_pem)
            key.write_bytes(second.key_pem)
            later = os.stat(cert).st_mtime + 1
            os.utime(cert, (later, later))
            os.utime(key, (later, later))
            after = before
            for _ in range(250):
                after = await _served_serial(port, ca.cert_pem)
                if after != before:
                    break
                await asyncio.sleep(0.02)
        return before, after

    before, after = asyncio.run(scenario())
    assert (before, after) == (first.certificate.serial_number, second.certificate.serial_number)
