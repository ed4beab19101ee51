"""`stead config`'s credentials and server settings: every kind a kubeconfig holds, the variables,
their order, the error that names what was tried, and client certificates through the TLS relay."""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.config.api import ConfigApi
from operators.config.cli import add_config_commands
from operators.config.cli_run import run_config
from operators.runtime.api.auth import Access, Identity
from operators.runtime.cli.client import UsageError, credentials
from operators.runtime.cli.client import connect as _connection
from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf
from operators.runtime.serving.clientca import ClientCa
from operators.runtime.serving.http import HttpServer
from tests.unit.config.test_config_api import FakeAuth, make_repo

BASE = ("--env", "2", "--level", "node=node-7", "--resource", "astute")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stead")
    add_config_commands(parser.add_subparsers())
    return parser.parse_args(["config", *argv])


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No variable of the developer's shell leaks in: an empty home, no kubeconfig, no token."""
    for name in ("STEAD_CONFIG_TOKEN", "STEAD_CONFIG_URL", "STEAD_CONFIG_SERVER", "STEAD_CONFIG_CACERT",
                 "STEAD_CONFIG_PASSWORD", "KUBECONFIG", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STEAD_HOME", str(tmp_path / "stead-home"))


def kubeconfig(path: Path, user: dict[str, Any], namespace: str | None = None) -> Path:
    context: dict[str, Any] = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "contexts": [{"name": "ctx", "context": context}], "users": [{"name": "u", "user": user}]}))
    return path


def found(*argv: str) -> Any:
    return _connection(parse("get", *BASE, "--server", "http://127.0.0.1:1", *argv)).credentials


def test_the_order_token_variable_basic_then_the_kubeconfigs_token_then_its_certificate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", {"token": "from-kubeconfig", "client-certificate": "c.crt",
                                                  "client-key": "c.key"})
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.setenv("STEAD_CONFIG_TOKEN", "from-variable")
    monkeypatch.setenv("STEAD_CONFIG_PASSWORD", "pw")
    assert found("--token", "given", "--user", "hiera").authorization == "Bearer given"
    assert found("--user", "hiera").authorization == "Bearer from-variable"
    monkeypatch.delenv("STEAD_CONFIG_TOKEN")
    assert found("--user", "hiera").authorization == "Basic " + base64.b64encode(b"hiera:pw").decode()
    token = found()
    assert token.authorization == "Bearer from-kubeconfig" and token.source.startswith("the token of ")
    kubeconfig(config, {"client-certificate": "c.crt", "client-key": "c.key"})
    certificate = credentials(parse("get", *BASE), *_user(config))
    assert certificate.authorization is None
    assert (certificate.certificate, certificate.key) == (tmp_path / "c.crt", tmp_path / "c.key")  # beside it


def _user(config: Path) -> tuple[Any, str]:
    from operators.runtime.kube.kubeconfig import current_user

    user = current_user([config])
    assert user is not None
    return user, user.describe()


def test_a_token_file_relative_to_the_kubeconfig_and_the_namespace_of_its_context(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("from-file\n")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "absent"), str(
        kubeconfig(tmp_path / "kubeconfig", {"tokenFile": "token"}, namespace="team-a"))]))
    connection = _connection(parse("get", *BASE, "--server", "http://127.0.0.1:1"))
    assert connection.credentials.authorization == "Bearer from-file"
    assert connection.namespace == "team-a"
    assert _connection(parse("get", *BASE, "--server", "http://127.0.0.1:1", "-n", "x")).namespace == "x"


def test_no_credentials_names_everything_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError) as nothing:
        found()
    message = str(nothing.value)
    for tried in ("--token (not given)", "$STEAD_CONFIG_TOKEN (not set)", "--user (not given)",
                  f"a kubeconfig (none at {tmp_path}/home/.kube/config, {tmp_path}/stead-home/kubeconfig)"):
        assert tried in message, message
    assert "Pass --token" in message
    config = kubeconfig(tmp_path / "kubeconfig", {"exec": {"command": "aws"}})
    with pytest.raises(UsageError, match="credentials come from an exec plugin, which stead config does not run"):
        found("--kubeconfig", str(config))
    kubeconfig(config, {"client-certificate": "c.crt"})
    with pytest.raises(UsageError, match="no client-key beside it"):
        found("--kubeconfig", str(config))
    kubeconfig(config, {"tokenFile": "missing-token"})
    with pytest.raises(UsageError, match="missing-token: No such file or directory"):
        found("--kubeconfig", str(config))
    config.write_text("current-context: [")
    with pytest.raises(UsageError, match="not valid YAML"):
        found("--kubeconfig", str(config))


def test_the_local_control_planes_kubeconfig_when_nothing_else_is_there(tmp_path: Path) -> None:
    home = tmp_path / "stead-home"
    home.mkdir()
    kubeconfig(home / "kubeconfig", {"token": "local-admin"})
    assert found().authorization == "Bearer local-admin"


def test_the_url_variable_and_its_earlier_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse("get", *BASE).server == "https://127.0.0.1:8443"
    monkeypatch.setenv("STEAD_CONFIG_SERVER", "https://old:1")
    assert parse("get", *BASE).server == "https://old:1"
    monkeypatch.setenv("STEAD_CONFIG_URL", "https://new:2")
    assert parse("get", *BASE).server == "https://new:2"
    assert parse("get", *BASE, "--url", "https://flag:3").server == "https://flag:3"


# --- over TLS: the CA stead run writes, client certificates through the relay --------------------


class Pki:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.server_ca = make_ca("config-api-ca")
        leaf = make_leaf(self.server_ca, "config-api", hosts=["127.0.0.1"])
        self.tls = (directory / "tls.crt", directory / "tls.key")
        self.tls[0].write_bytes(leaf.cert_pem)
        self.tls[1].write_bytes(leaf.key_pem)
        self.client_ca = make_ca("cluster-client-ca")


class CertificateAuth(FakeAuth):
    """As FakeAuth, and the certificate user alice may read."""

    async def authorize(self, identity: Identity, access: Access) -> bool:
        if identity.scheme == "x509":
            return identity.user == "alice" and access.verb in ("get", "list")
        return await super().authorize(identity, access)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Pki]]:
    """The API over TLS with client certificates (through the relay), in a thread."""
    pki = Pki(tmp_path)
    loop = asyncio.new_event_loop()
    repo = make_repo()
    repo.values.clear()
    api = ConfigApi(repo, CertificateAuth())
    http = HttpServer(api, errors=api.problem)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(http.start("127.0.0.1", 0, pki.tls, client_ca=ClientCa(pki.client_ca.cert_pem)))
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield f"https://127.0.0.1:{http.port}", pki
    asyncio.run_coroutine_threadsafe(http.stop(grace=1), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = parse(*argv)
    import contextlib

    with contextlib.redirect_stderr(err):
        code = run_config(args, stdin=io.StringIO(""), stdout=out)
    return code, out.getvalue(), err.getvalue()


def inline_user(pair: KeyPair) -> dict[str, str]:
    return {"client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
            "client-key-data": base64.b64encode(pair.key_pem).decode()}


def test_the_ca_stead_run_writes_is_trusted_by_default_and_inline_certificates_authenticate(
        tls_server: tuple[str, Pki], tmp_path: Path) -> None:
    url, pki = tls_server
    alice = make_leaf(pki.client_ca, "alice", organizations=["dev"], server=False, client=True)
    config = kubeconfig(tmp_path / "kubeconfig", inline_user(alice))
    # without the server's CA anywhere: refused, and told what to do
    code, _, err = cli("get", *BASE, "--server", url, "--kubeconfig", str(config))
    assert code == 1 and "cannot verify the certificate" in err and "--cacert" in err
    # the CA `stead run` writes next to its store: trusted without --cacert
    (tmp_path / "stead-home" / "config-api").mkdir(parents=True)
    (tmp_path / "stead-home" / "config-api" / "ca.crt").write_bytes(pki.server_ca.cert_pem)
    code, out, err = cli("get", "--env", "2", "--resource", "astute", "--server", url, "--kubeconfig", str(config))
    assert (code, json.loads(out or "null")) == (0, {}), err
    # alice may read, not write: RBAC (here the fake) decides for certificate users as for tokens
    code, _, err = cli("set", *BASE, "--key", "a", "--value", "1", "--server", url, "--kubeconfig", str(config))
    assert code == 1 and 'user "alice" may not' in err


def test_a_certificate_of_another_ca_is_refused_with_a_message_that_says_so(
        tls_server: tuple[str, Pki], tmp_path: Path) -> None:
    url, pki = tls_server
    stranger = make_leaf(make_ca("another-cluster"), "alice", server=False, client=True)
    (tmp_path / "ca.crt").write_bytes(pki.server_ca.cert_pem)
    config = kubeconfig(tmp_path / "kubeconfig", inline_user(stranger))
    code, _, err = cli("get", *BASE, "--server", url, "--cacert", str(tmp_path / "ca.crt"),
                       "--kubeconfig", str(config))
    assert code == 1 and "refused the client certificate of" in err and "pass --token" in err, err


def test_inline_certificate_data_is_written_private_and_removed_once_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from operators.runtime.kube import kubeconfig as module

    pair = make_leaf(make_ca("ca"), "alice", server=False, client=True)
    config = kubeconfig(tmp_path / "kubeconfig", inline_user(pair))
    created: list[tuple[str, int]] = []
    real_open = os.open

    def spying_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            created.append((str(path), mode))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(module.os, "open", spying_open)
    connection = _connection(parse("get", *BASE, "--server", "https://127.0.0.1:1", "--kubeconfig", str(config)))
    assert connection.context is not None and connection.credentials.certificate == pair.cert_pem
    assert sorted(Path(path).name for path, _ in created) == ["client.crt", "client.key"]
    assert {mode for _, mode in created} == {0o600}
    directory = Path(created[0][0]).parent
    assert not directory.exists()  # removed as soon as the context had loaded them


def test_help_is_written_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("--help",), ("get", "--help"), ("set", "--help")):
        with pytest.raises(SystemExit):
            parse(*argv)
        text = capsys.readouterr().out
        assert "check_args" not in text and "pure function" not in text
    with pytest.raises(SystemExit):
        parse("--help")
    text = capsys.readouterr().out
    for said in ("$STEAD_CONFIG_TOKEN", "client certificate", "--level role=controller", "Exit status"):
        assert said in text, said
