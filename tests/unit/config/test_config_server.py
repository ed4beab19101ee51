"""What the operator hands a config API worker: everything it serves by, and nothing secret."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from operators.runtime.api.server import ApiServer as ConfigApiServer


def test_a_worker_serves_as_the_operator_would_from_the_certificates_made_for_it(tmp_path: Path) -> None:
    server = ConfigApiServer(listen="0.0.0.0", port=9000, tls_dir=tmp_path / "tls", mounted=False,
                             basic_secret=("stead-system", "config-basic"), default_namespace="team-a",
                             cache=False, kubeconfig=tmp_path / "kubeconfig", workers=2,
                             runs_state_dir=tmp_path / "store-runs")
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.DEBUG)
    try:
        worker, level = ConfigApiServer.for_worker(server.worker_argument())
    finally:
        root.setLevel(before)
    assert level == logging.DEBUG
    assert worker.mounted  # the operator made the certificate once; every worker loads that one
    assert worker.workers == 0  # a worker serves; it does not start workers of its own
    for name in ("listen", "port", "tls_dir", "basic_secret", "default_namespace", "name", "cache", "kubeconfig",
                 "runs_state_dir"):
        assert getattr(worker, name) == getattr(server, name), name


def test_the_worker_argument_names_the_secret_but_never_holds_credentials(tmp_path: Path) -> None:
    argument = ConfigApiServer(listen="127.0.0.1", port=8443, tls_dir=tmp_path,
                               basic_secret=("ns", "config-basic")).worker_argument()
    assert "config-basic" in argument
    assert not {"password", "token", "BEGIN"} & set(argument.replace('"', " ").split())
    worker, _ = ConfigApiServer.for_worker(argument)
    assert worker.kubeconfig is None  # then the worker finds the operator's access as the operator did


def test_the_client_ca_comes_from_the_clusters_configmap_a_file_or_nowhere(tmp_path: Path) -> None:
    import asyncio

    from operators.runtime.api.server import read_client_ca
    from operators.runtime.kube.client import ApiError, core_path
    from tests.unit.fakeapi import FakeApi

    configmap = core_path("configmaps", "kube-system", "extension-apiserver-authentication")
    kube = FakeApi()
    kube.add(configmap, {"data": {"client-ca-file": "-----BEGIN CERTIFICATE-----\n..."}})
    assert asyncio.run(read_client_ca(kube, "auto")) == b"-----BEGIN CERTIFICATE-----\n..."
    kube.objects[configmap] = {"data": {"requestheader-client-ca-file": "x"}}  # no client-ca-file
    assert asyncio.run(read_client_ca(kube, "auto")) is None
    del kube.objects[configmap]
    assert asyncio.run(read_client_ca(kube, "auto")) is None  # absent: certificates are not asked for
    denied = FakeApi()
    denied.fail_with(ApiError(403, "configmaps is forbidden"))
    assert asyncio.run(read_client_ca(denied, "auto")) is None
    broken = FakeApi()
    broken.fail_with(ApiError(500, "etcd is down"))
    with pytest.raises(ApiError):
        asyncio.run(read_client_ca(broken, "auto"))
    bundle = tmp_path / "ca.crt"
    bundle.write_bytes(b"PEM")
    assert asyncio.run(read_client_ca(kube, str(bundle))) == b"PEM"
    assert asyncio.run(read_client_ca(kube, "off")) is None
    with pytest.raises(OSError):
        asyncio.run(read_client_ca(kube, str(tmp_path / "missing.crt")))


def test_a_worker_gets_the_client_ca_setting(tmp_path: Path) -> None:
    server = ConfigApiServer(listen="127.0.0.1", port=8443, tls_dir=tmp_path, client_ca="auto")
    assert ConfigApiServer.for_worker(server.worker_argument())[0].client_ca == "auto"
