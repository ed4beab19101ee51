"""`RestKubeApi` against a small fake API server (HTTP): paths by discovery, verbs, errors, credentials."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pipelines.kubeapi import (
    CREDENTIALS_ENV,
    KUBECONFIG_ENV,
    KubeApiError,
    RestKubeApi,
    from_environment,
    write_credentials,
)

DISCOVERY = {
    "/api/v1": {"resources": [
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True},
        {"name": "pods", "kind": "Pod", "namespaced": True},
        {"name": "pods/log", "kind": "Pod", "namespaced": True},
        {"name": "namespaces", "kind": "Namespace", "namespaced": False},
    ]},
    "/apis/batch/v1": {"resources": [{"name": "jobs", "kind": "Job", "namespaced": True}]},
}


class FakeApi(BaseHTTPRequestHandler):
    calls: list[dict[str, Any]]
    objects: dict[str, dict[str, Any]]

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, code: int, body: Any, content_type: str = "application/json") -> None:
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body: Any = json.loads(self.rfile.read(length)) if length else None
        path, _, query = self.path.partition("?")
        self.calls.append({"method": self.command, "path": path, "query": query, "body": body,
                           "auth": self.headers.get("Authorization"), "type": self.headers.get("Content-Type")})
        if path in DISCOVERY:
            return self._answer(200, DISCOVERY[path])
        if path.endswith("/log"):
            if "limitBytes" in query:
                return self._answer(200, "abc", "text/plain")
            return self._answer(400, {"kind": "Status", "message": "container is waiting"})
        if path.endswith("/events"):
            if "/namespaces/locked/" in path:
                return self._answer(403, {"kind": "Status", "message": "events is forbidden"})
            return self._answer(200, {"items": [{"reason": "FailedCreate", "message": "m"}]})
        if self.command == "GET" and path.endswith("/configmaps"):
            return self._answer(200, {"items": [{"metadata": {"name": "a"}}]})
        if self.command == "POST":
            name = body["metadata"]["name"]
            if f"{path}/{name}" in self.objects:
                return self._answer(409, {"kind": "Status", "message": f"{name} already exists"})
            self.objects[f"{path}/{name}"] = {**body, "metadata": {**body["metadata"], "uid": "u-1"}}
            return self._answer(201, self.objects[f"{path}/{name}"])
        if self.command == "PATCH":
            self.objects[path] = body
            return self._answer(200, body)
        if self.command == "DELETE":
            if self.objects.pop(path, None) is None:
                return self._answer(404, {"kind": "Status", "message": "not found"})
            return self._answer(200, {"kind": "Status"})
        if path in self.objects:
            return self._answer(200, self.objects[path])
        return self._answer(404, {"kind": "Status", "message": "not found"})

    do_GET = do_POST = do_PATCH = do_DELETE = _handle


@pytest.fixture
def fake() -> Iterator[tuple[str, type[FakeApi]]]:
    handler = type("Handler", (FakeApi,), {"calls": [], "objects": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_verbs_and_paths(fake: tuple[str, type[FakeApi]]) -> None:
    server, handler = fake
    api = RestKubeApi(server, token="t0")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {}}
    assert api.get("v1", "ConfigMap", "ns", "c") is None
    assert api.create(cm)["metadata"]["uid"] == "u-1"
    with pytest.raises(KubeApiError) as info:
        api.create(cm)
    assert info.value.status == 409 and "already exists" in str(info.value)
    assert api.get("v1", "ConfigMap", "ns", "c") is not None
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    api.apply(job)
    patch = handler.calls[-1]
    assert patch["path"] == "/apis/batch/v1/namespaces/ns/jobs/j"
    assert patch["type"] == "application/apply-patch+yaml" and "fieldManager=stead" in patch["query"]
    assert api.delete("batch/v1", "Job", "ns", "j") is True
    assert handler.calls[-1]["body"]["propagationPolicy"] == "Background"
    assert api.delete("batch/v1", "Job", "ns", "j") is False
    assert api.list("v1", "ConfigMap", "ns", "a=b") == [{"apiVersion": "v1", "kind": "ConfigMap",
                                                          "metadata": {"name": "a"}}]
    assert "labelSelector=a%3Db" in handler.calls[-1]["query"]
    assert api.logs("ns", "p") == ""
    assert api.logs("ns", "p", limit_bytes=1024) == "abc"
    assert handler.calls[-1]["path"] == "/api/v1/namespaces/ns/pods/p/log"
    assert handler.calls[-1]["query"] == "limitBytes=1024"
    assert api.events("ns", "Job", "j") == [{"apiVersion": "v1", "kind": "Event", "reason": "FailedCreate",
                                             "message": "m"}]
    assert handler.calls[-1]["path"] == "/api/v1/namespaces/ns/events"
    assert handler.calls[-1]["query"] == "fieldSelector=involvedObject.kind%3DJob%2CinvolvedObject.name%3Dj"
    with pytest.raises(KubeApiError) as info:
        api.events("locked", "Job", "j")
    assert info.value.status == 403
    assert {c["auth"] for c in handler.calls} == {"Bearer t0"}
    # discovery once per group/version, and only for served kinds
    assert [c["path"] for c in handler.calls if c["path"] in DISCOVERY] == ["/api/v1", "/apis/batch/v1"]
    with pytest.raises(KubeApiError, match="serves no Widget"):
        api.get("batch/v1", "Widget", "ns", "w")
    with pytest.raises(KubeApiError, match="namespace is needed"):
        api.get("v1", "ConfigMap", None, "c")
    assert api.get("v1", "Namespace", None, "ns") is None
    assert handler.calls[-1]["path"] == "/api/v1/namespaces/ns"


def test_credentials_file_is_private_and_read_again_when_refreshed(
    fake: tuple[str, type[FakeApi]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, handler = fake
    path = tmp_path / "run" / "creds.json"
    write_credentials(path, server, "first")
    assert path.stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv(CREDENTIALS_ENV, str(path))
    api = from_environment()
    api.get("v1", "ConfigMap", "ns", "x")
    write_credentials(path, server, "second")
    os.utime(path, ns=(1, 1))  # a different mtime, whatever the clock's resolution
    api.get("v1", "ConfigMap", "ns", "x")
    assert [c["auth"] for c in handler.calls if "/configmaps/" in c["path"]] == ["Bearer first", "Bearer second"]


def test_from_environment_never_falls_back_to_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CREDENTIALS_ENV, raising=False)
    monkeypatch.delenv(KUBECONFIG_ENV, raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent")
    with pytest.raises(ValueError, match="no Kubernetes credentials"):
        from_environment()


def test_unreachable_server_is_a_clear_error() -> None:
    api = RestKubeApi("http://127.0.0.1:9", token="t", timeout=2)
    with pytest.raises(KubeApiError, match="cannot reach the API server"):
        api.get("v1", "ConfigMap", "ns", "x")
