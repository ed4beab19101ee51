"""The CLI's light client (`operators.runtime.kube.light`, issue 27 friction 6): the kubeconfig's forms read
as the `kubernetes` loader reads them, the ones it does not read handed to that loader, exec plugins, and
HTTPS with a client certificate against a loopback server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.runtime.kube.api import ApiError, ApiUnreachable
from operators.runtime.kube.kubeconfig import KubeconfigError
from operators.runtime.kube.light import LightClient, light_access, load_cluster_access
from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf


def write_kubeconfig(path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:9",
                                                          "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("form", ["token", "token-file", "ca-file", "ca-data", "bearer-prefixed"])
def test_the_light_reader_finds_what_the_kubernetes_loader_finds(tmp_path: Path, form: str) -> None:
    from operators.runtime.kube.client import load_access

    ca = make_ca("cluster")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "token").write_text("from-file\n")
    user, cluster = {
        "token": ({"token": "t0k"}, None),
        "token-file": ({"tokenFile": "token"}, None),
        "ca-file": ({"token": "t"}, {"server": "https://127.0.0.1:9/", "certificate-authority": "ca.crt"}),
        "ca-data": ({"token": "t"}, {"server": "https://127.0.0.1:9", "certificate-authority-data": b64(ca.cert_pem)}),
        "bearer-prefixed": ({"token": "Bearer abc"}, None),
    }[form]
    config = write_kubeconfig(tmp_path / "kubeconfig", user, cluster)
    light, full = light_access(config), load_access(config)
    assert light is not None
    assert (light.server, light.headers) == (full.server, full.headers)
    assert (light.ssl_context.verify_mode, light.ssl_context.check_hostname) == (
        full.ssl_context.verify_mode, full.ssl_context.check_hostname)
    if form.startswith("ca-"):
        assert light.ssl_context.get_ca_certs() == full.ssl_context.get_ca_certs() != []


def test_the_forms_only_the_kubernetes_loader_reads_go_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, {"auth-provider": {"name": "oidc", "config": {}}})
    assert light_access(config) is None
    write_kubeconfig(config, {"username": "u", "password": "p"})
    assert light_access(config) is None
    write_kubeconfig(config, {"token": "t"}, {"server": "https://127.0.0.1:9", "certificate-authority": "absent.crt"})
    assert light_access(config) is None  # that loader's message says what is wrong, as before
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # a Pod: its service account
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert light_access(None) is None
    assert light_access(config) is None  # the same file, refused for its CA file, even when named
    with pytest.raises(KubeconfigError, match=r"^Invalid kube-config file\. No configuration found\.$"):
        load_cluster_access(tmp_path / "missing")


PLUGIN = """#!/bin/sh
printf '%s' "$KUBERNETES_EXEC_INFO" > exec-info.json
echo "$EXTRA" > extra.txt
if [ "$1" = fail ]; then echo "boom: log in first" >&2; exit 3; fi
printf '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "%s"}}' "$1"
"""


def test_an_exec_plugin_gives_the_token_and_its_failure_is_one_line(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(PLUGIN)
    plugin.chmod(0o755)
    exec_config = {"apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin.sh", "args": ["minted"],
                   "env": [{"name": "EXTRA", "value": "given"}], "provideClusterInfo": True}
    config = write_kubeconfig(tmp_path / "kubeconfig", {"exec": exec_config})
    access = light_access(config)
    assert access is not None and access.headers == {"Authorization": "Bearer minted"}
    info = json.loads((tmp_path / "exec-info.json").read_text())  # run beside the kubeconfig, as kubectl runs it
    assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "https://127.0.0.1:9"
    assert (tmp_path / "extra.txt").read_text() == "given\n"
    write_kubeconfig(config, {"exec": {**exec_config, "args": ["fail"]}})
    with pytest.raises(KubeconfigError, match=r"^exec: process returned 3\. boom: log in first$"):
        light_access(config)


def _pair(tmp_path: Path, name: str, pair: KeyPair) -> tuple[Path, Path]:
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    return cert, key


class _Api(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive, as the API server's
    seen: list[tuple[str, str, dict[str, str], bytes]]
    connections: list[int]

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path, dict(self.headers), body))
        found = self.path.startswith("/apis/stead.dev/v1alpha1/namespaces/team/actionruns/r")
        payload = json.dumps({"kind": "ActionRun", "metadata": {"name": "r"}} if found else
                             {"kind": "Status", "message": 'actionruns "x" not found'}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        if "close=1" in self.path:  # the server drops the kept-alive connection without saying so
            self.close_connection = True

    do_GET = do_POST = _answer

    def setup(self) -> None:
        super().setup()
        self.connections.append(1)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def api_server(tmp_path: Path, client_ca: KeyPair) -> Iterator[tuple[int, type[_Api], KeyPair]]:
    """A loopback HTTPS server that only serves clients with a certificate of `client_ca`."""
    serving_ca = make_ca("serving")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*_pair(tmp_path, "server", make_leaf(serving_ca, "api", hosts=["127.0.0.1"])))
    context.load_verify_locations(cadata=client_ca.cert_pem.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    handler = type("Api", (_Api,), {"seen": [], "connections": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1]), handler, serving_ca
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_requests_over_https_with_an_inline_client_certificate(tmp_path: Path) -> None:
    client_ca = make_ca("users")
    client = make_leaf(client_ca, "me", server=False, client=True)
    with api_server(tmp_path, client_ca) as (port, handler, serving_ca):
        config = write_kubeconfig(tmp_path / "kubeconfig", {
            "token": "t", "client-certificate-data": b64(client.cert_pem), "client-key-data": b64(client.key_pem)},
            {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": b64(serving_ca.cert_pem)})
        access = light_access(config)
        assert access is not None
        assert not list(tmp_path.glob("stead-*"))  # the inline PEMs' files are gone again

        async def calls() -> None:
            async with LightClient(access) as kube:
                path = "/apis/stead.dev/v1alpha1/namespaces/team/actionruns/r"
                assert (await kube.request("GET", path))["metadata"] == {"name": "r"}
                await kube.request("POST", path, {"spec": {"abort": True}}, params={"close": "1"})
                assert (await kube.request("GET", path))["kind"] == "ActionRun"  # on a new connection
                with pytest.raises(ApiError) as missing:
                    await kube.request("GET", "/apis/stead.dev/v1alpha1/namespaces/team/actionruns/x")
                assert (missing.value.status, missing.value.message) == (404, 'actionruns "x" not found')

        asyncio.run(calls())
        assert len(handler.connections) == 2  # kept alive, but for the one the server closed
        method, path, headers, body = handler.seen[1]
        assert (method, path, json.loads(body)) == ("POST", "/apis/stead.dev/v1alpha1/namespaces/team/actionruns/r"
                                                    "?close=1", {"spec": {"abort": True}})
        assert headers["Authorization"] == "Bearer t" and headers["Content-Type"] == "application/json"
        assert headers["User-Agent"].startswith("stead")
        stranger = write_kubeconfig(tmp_path / "other", {"token": "t"}, {
            "server": f"https://127.0.0.1:{port}", "certificate-authority-data": b64(make_ca("x").cert_pem)})
        other = light_access(stranger)
        assert other is not None
        with pytest.raises(ApiUnreachable, match=rf"GET /x: API server unreachable: cannot connect to host "
                                                 rf"127\.0\.0\.1:{port}: certificate verify failed"):
            asyncio.run(LightClient(other).request("GET", "/x"))


def test_an_api_server_that_is_not_there_names_its_address(tmp_path: Path) -> None:
    access = light_access(write_kubeconfig(tmp_path / "kubeconfig", {"token": "t"}, {"server": "https://127.0.0.1:1"}))
    assert access is not None
    with pytest.raises(ApiUnreachable, match=r"^0: GET /api: API server unreachable: cannot connect to host "
                                             r"127\.0\.0\.1:1: Connection refused$"):
        asyncio.run(LightClient(access).request("GET", "/api"))


def test_a_command_runs_to_its_end_without_an_event_loop() -> None:
    from operators.runtime.cli.commands import pause, run_to_end

    async def command() -> int:
        await pause(0)
        return 3

    assert run_to_end(command()) == 3

    async def suspends() -> int:
        await asyncio.sleep(0)  # an event loop's wait: nothing here would ever resume it
        return 0

    with pytest.raises(RuntimeError, match="awaited an event loop's future"):
        run_to_end(suspends())
