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


class Renewal:
    """Certificate files as cert-manager keeps them: a first leaf, renewed in place by a second."""

    def __init__(self, directory: Path, name: str) -> None:
        self.ca = make_ca("test-ca")
        self.first, self.second = (make_leaf(self.ca, name, hosts=["127.0.0.1"]) for _ in range(2))
        self.cert, self.key = directory / "tls.crt", directory / "tls.key"
        self.cert.write_bytes(self.first.cert_pem)
        self.key.write_bytes(self.first.key_pem)

    async def served_serial(self, port: int) -> int:
        client = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1")
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der).serial_number

    async def serials_around_renewal(self, port: int) -> tuple[int, int]:
        """The serial served before the renewal, and the first different one after (polled, 5 s at most)."""
        before = await self.served_serial(port)
        self.cert.write_bytes(self.second.cert_pem)
        self.key.write_bytes(self.second.key_pem)
        later = os.stat(self.cert).st_mtime + 1  # a renewal is a newer file, even within one clock tick
        os.utime(self.cert, (later, later))
        os.utime(self.key, (later, later))
        after = before
        for _ in range(250):
            after = await self.served_serial(port)
            if after != before:
                break
            await asyncio.sleep(0.02)
        return before, after

    def expected(self) -> tuple[int, int]:
        return self.first.certificate.serial_number, self.second.certificate.serial_number


def test_renewed_certificate_is_loaded_into_the_live_context(tmp_path: Path) -> None:
    files = Renewal(tmp_path, "webhook")

    async def scenario() -> tuple[int, int]:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(files.cert, files.key)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        reloader = asyncio.create_task(reload_certificate(context, files.cert, files.key, every=0.02))
        serials = await files.serials_around_renewal(port)
        reloader.cancel()
        server.close()
        return serials

    assert asyncio.run(scenario()) == files.expected()


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

    files = Renewal(tmp_path, "config-api")

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
            return await files.serials_around_renewal(port)

    assert asyncio.run(scenario()) == files.expected()
