"""`stead cluster`: where each port comes from, the flags of `up`, `kubectl` and `kubeconfig` paths, the ports
in `status`. No control plane starts here (tests/e2e/test_cluster.py starts one beside the session's)."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import pytest

from operators.cli import _parser, main
from operators.cli.cluster import PORT_VARIABLES, local_plane_ports
from operators.cli.local import local_plane as _local_plane
from operators.cluster import build
from operators.cluster.controlplane import LocalControlPlane, PortInUse
from operators.cluster.ports import PORT_SETTINGS, PORTS_FILE, Ports, choose_ports, parse_port, remembered_ports

DEFAULTS = Ports()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of its own, and none of the `$STEAD_*_PORT` variables of whoever runs the tests."""
    monkeypatch.setenv("STEAD_HOME", str(tmp_path / "home"))
    for variable in PORT_VARIABLES.values():
        monkeypatch.delenv(variable, raising=False)
    return tmp_path / "home"


def test_each_port_comes_from_its_flag_else_its_variable_else_the_home_else_the_default() -> None:
    remembered = Ports(20001, 20002, 20003, 20004)
    assert choose_ports({}, {}, None) == DEFAULTS
    assert choose_ports({}, {}, remembered) == remembered
    environ = {"STEAD_ETCD_CLIENT_PORT": "30002", "STEAD_APISERVER_PORT": ""}  # empty: not set
    assert choose_ports({}, environ, remembered) == Ports(20001, 30002, 20003, 20004)
    given = {"apiserver": 40001, "etcd_client": 40002, "etcd_peer": None}
    assert choose_ports(given, environ, remembered) == Ports(40001, 40002, 20003, 20004)
    assert choose_ports(given, environ, None) == Ports(40001, 40002, DEFAULTS.etcd_peer, DEFAULTS.controller_manager)


def test_a_variable_that_is_no_port_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"\$STEAD_ETCD_PEER_PORT: expected a port number from 1 to 65535, got 'x'"):
        choose_ports({}, {"STEAD_ETCD_PEER_PORT": "x"}, None)
    assert [parse_port(text) for text in ("1", "65535", " 80 ")] == [1, 65535, 80]
    for text in ("0", "65536", "-1", "8o", ""):
        with pytest.raises(ValueError):
            parse_port(text)


def test_the_settings_cover_every_port_with_a_flag_and_the_variables_the_operator_reads() -> None:
    assert [s.field for s in PORT_SETTINGS] == ["apiserver", "etcd_client", "etcd_peer", "controller_manager"]
    assert [s.flag for s in PORT_SETTINGS] == ["--apiserver-port", "--etcd-port", "--etcd-peer-port",
                                               "--controller-manager-port"]
    assert PORT_VARIABLES == {"apiserver_port": "STEAD_APISERVER_PORT", "etcd_client_port": "STEAD_ETCD_CLIENT_PORT",
                              "etcd_peer_port": "STEAD_ETCD_PEER_PORT",
                              "controller_manager_port": "STEAD_CONTROLLER_MANAGER_PORT"}
    keywords = inspect.signature(LocalControlPlane).parameters
    assert all(keywords[s.argument].default == s.default for s in PORT_SETTINGS)


def test_up_takes_a_flag_per_port_and_refuses_what_is_no_port() -> None:
    args = _parser(["cluster", "up"]).parse_args(["cluster", "up", "--apiserver-port", "17443", "--etcd-port",
                                                  "17379", "--etcd-peer-port", "17380",
                                                  "--controller-manager-port", "17257"])
    assert (args.apiserver_port, args.etcd_client_port, args.etcd_peer_port, args.controller_manager_port) == (
        17443, 17379, 17380, 17257)
    assert _parser(["cluster", "up"]).parse_args(["cluster", "up"]).apiserver_port is None  # not given: see below
    for bad in ("0", "70000", "http"):
        with pytest.raises(SystemExit) as exit_info:
            main(["cluster", "up", "--etcd-port", bad])
        assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        main(["cluster", "status", "--apiserver-port", "17443"])  # only `up` chooses ports


def test_the_plane_of_a_home_uses_the_flags_then_the_variables_then_the_ports_it_last_started_on(
    home: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert remembered_ports(home) is None
    assert _local_plane().ports == DEFAULTS
    home.mkdir()
    (home / PORTS_FILE).write_text(json.dumps({"apiserver": 21443, "etcd_client": 21379, "etcd_peer": 21380,
                                               "controller_manager": 21257}))
    assert _local_plane().ports == Ports(21443, 21379, 21380, 21257)  # `stead operator --local auto` finds it again
    monkeypatch.setenv("STEAD_APISERVER_PORT", "22443")
    assert _local_plane().ports == Ports(22443, 21379, 21380, 21257)
    assert _local_plane({"apiserver_port": 23443, "etcd_peer_port": None}).ports == Ports(23443, 21379, 21380, 21257)
    assert local_plane_ports({}, {}, home) == Ports(21443, 21379, 21380, 21257)
    (home / PORTS_FILE).write_text("{not json")
    assert remembered_ports(home) is None


def test_up_with_a_port_in_use_names_the_flag_that_chooses_another(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    chosen: list[Ports] = []

    def up(plane: LocalControlPlane) -> None:
        chosen.append(plane.ports)
        raise PortInUse("port 12379 (etcd client) is in use by pid 1 (etcd); stop it or choose another port",
                        "etcd_client")

    monkeypatch.setattr(LocalControlPlane, "up", up)
    assert main(["cluster", "up", "--apiserver-port", "17443"]) == 1
    assert chosen == [Ports(17443, DEFAULTS.etcd_client, DEFAULTS.etcd_peer, DEFAULTS.controller_manager)]
    assert capsys.readouterr().err.strip() == (
        "stead cluster up: port 12379 (etcd client) is in use by pid 1 (etcd); stop it or choose another port: "
        "--etcd-port N (or $STEAD_ETCD_CLIENT_PORT)")
    assert main(["cluster", "up", "--apiserver-port", "17443", "--etcd-port", "17443"]) == 1
    assert "must differ" in capsys.readouterr().err


def test_status_shows_the_ports(home: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STEAD_APISERVER_PORT", "24443")
    assert main(["cluster", "status"]) == 3  # not running
    out = capsys.readouterr().out
    assert "ports:" in out and "kube-apiserver 24443, etcd client 12379" in out
    assert f"home:                    {home}" in out


def test_kubeconfig_and_kubectl_print_paths(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "kubeconfig"]) == 0
    assert capsys.readouterr().out == f"{home / 'kubeconfig'}\n"

    cache = tmp_path / "cache"
    monkeypatch.setenv("STEAD_CACHE", str(cache))
    assert main(["cluster", "kubectl"]) == 1
    assert f"kubectl {build.KUBERNETES.version} is not built yet; `stead cluster build` builds it" in (
        capsys.readouterr().err)
    for directory in ("kubernetes-v1.33.0-0123abcd", build.KUBERNETES.directory_name, "kubernetes-v1.99.0-ffffffff"):
        (cache / directory).mkdir(parents=True)
        (cache / directory / "kubectl").write_text("#!/bin/sh\n")
        os.chmod(cache / directory / "kubectl", 0o755)
    assert main(["cluster", "kubectl"]) == 0  # of the several cached versions, the one the code pins
    assert capsys.readouterr().out == f"{cache / build.KUBERNETES.directory_name / 'kubectl'}\n"
    assert build.cached_kubectl(cache) == cache / build.KUBERNETES.directory_name / "kubectl"

    assert main(["cluster", "helm"]) == 1
    assert f"helm {build.HELM.version} is not built yet" in capsys.readouterr().err
    (cache / build.HELM.directory_name).mkdir()
    (cache / build.HELM.directory_name / "helm").write_text("#!/bin/sh\n")
    os.chmod(cache / build.HELM.directory_name / "helm", 0o755)
    assert main(["cluster", "helm"]) == 0
    assert capsys.readouterr().out == f"{cache / build.HELM.directory_name / 'helm'}\n"
