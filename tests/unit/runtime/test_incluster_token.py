"""The operator in a Pod authenticates with its ServiceAccount token, as the `kubernetes` package loads it.

The package's in-cluster loader stores the token as ``"bearer <jwt>"`` (lower case) and its
kubeconfig loader as ``"Bearer <jwt>"``: both must reach the API server as ``Bearer <jwt>``. The
loader runs for real here, on a token file and a CA on disk, through the package's own paths.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client as kclient
from kubernetes.config import incluster_config

from operators.runtime.kube.client import bearer_token, load_access, load_configuration

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6c3RlYWQtc3lzdGVtOnN0ZWFkIn0.c2ln"


@pytest.fixture
def in_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Pod's view: KUBERNETES_SERVICE_* set, the projected token and CA at the package's paths."""
    from operators.runtime.serving.certs import make_ca

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(JWT)
    ca.write_bytes(make_ca("in-pod test CA").cert_pem)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return token


def test_the_in_cluster_loader_keeps_a_lower_case_scheme(in_pod: Path) -> None:
    """What made the bug: if the package ever stops doing this, the other tests here still hold."""
    cfg = kclient.Configuration()
    incluster_config.load_incluster_config(client_configuration=cfg)
    assert cfg.api_key["BearerToken"] == f"bearer {JWT}"


def test_in_cluster_requests_carry_the_bare_token(in_pod: Path) -> None:
    cfg = load_configuration()
    assert cfg.host == "https://10.0.0.1:443"
    assert bearer_token(cfg) == JWT
    access = load_access()
    assert access.headers == {"Authorization": f"Bearer {JWT}"}
    assert access.server == "https://10.0.0.1:443"


@pytest.mark.parametrize("stored", [f"Bearer {JWT}", f"bearer {JWT}", f"BEARER  {JWT}\n", JWT])
def test_any_case_of_the_scheme_is_stripped(stored: str) -> None:
    cfg = kclient.Configuration()
    cfg.api_key["authorization"] = stored
    assert bearer_token(cfg) == JWT


def test_no_token_is_none() -> None:
    assert bearer_token(kclient.Configuration()) is None
