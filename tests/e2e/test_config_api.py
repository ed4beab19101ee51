"""The configuration store end to end, through the operator process, on the real local API server.

Everything goes the ways a user goes: the examples are applied with kubectl and waited for with
`kubectl wait`; `stead config` runs as a subprocess; the HTTP API is the one `stead run` serves
over HTTPS (its CA in `$STEAD_HOME/config-api/ca.crt`), with tokens of ServiceAccounts that a
Role grants the stead.dev resources (`kubectl create token`), and with client certificates of the
cluster's client CA (the admin's kubeconfig, as kubectl uses it). Versions are recorded, published
ConfigMaps written and ConfigValues validated by the operator's reconcilers, never by the test.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cluster import ClusterInfo
from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf
from tests.e2e.conftest import ROOT, STEAD, Kubectl, OperatorProcess, free_port
from tests.polling import wait_until

P = "/api/v1/config"
EXAMPLES = [ROOT / "examples" / f"config-{name}.yaml" for name in ("environment", "component", "values")]
NODE1 = ("--env", "env-1", "--level", "node=node-1.domain.tld", "--resource", "astute")
NODE1_EFFECTIVE = {"deployment_id": 1, "debug": False, "nova": {"workers": 16, "cpu_allocation_ratio": 1.5}}


@dataclass
class Store:
    """The operator's configuration API, and what a client of it needs."""

    url: str
    cacert: Path
    namespace: str
    writer: str
    reader: str

    def http(self, method: str, path: str, token: str | None = None, body: Any = None,
             headers: dict[str, str] | None = None, cert: tuple[Path, Path] | None = None
             ) -> tuple[int, Any, Message]:
        context = ssl.create_default_context(cafile=str(self.cacert))  # read now: a restart makes a new CA
        if cert is not None:
            context.load_cert_chain(*cert)
        data = None if body is None else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        separator = "&" if "?" in path else "?"
        request = urllib.request.Request(f"{self.url}{path}{separator}namespace={self.namespace}", data=data,
                                         method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                text = response.read().decode()
                # header names case-insensitive, as HTTP's are
                return response.status, json.loads(text) if text else None, response.headers
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read().decode() or "null"), error.headers

    def cli(self, action: str, *argv: str, stdin: str = "", token: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        """`stead config ACTION ...` as a user runs it."""
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env.update(STEAD_CONFIG_SERVER=self.url, STEAD_CONFIG_CACERT=str(self.cacert))
        return subprocess.run(
            [str(STEAD), "config", action, "-n", self.namespace, "--token", token or self.writer, *argv],
            input=stdin, capture_output=True, text=True, timeout=60, env=env,
        )


def cv(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kubectl("get", "configvalues", name, "-n", namespace, "-o", "json").stdout)
    return result


def values_at(kubectl: Kubectl, namespace: str, level: dict[str, str], kind: str = "values",
              resource: str = "astute") -> dict[str, Any]:
    """The one ConfigValues object of env-1 at `level` (as kubectl lists it)."""
    items = json.loads(kubectl("get", "configvalues", "-n", namespace, "-o", "json").stdout)["items"]
    found = [i for i in items if i["spec"]["environment"] == "env-1" and i["spec"]["resource"] == resource
             and i["spec"].get("level", {}) == level and i["spec"].get("kind", "values") == kind]
    assert len(found) == 1, [i["metadata"]["name"] for i in found]
    return dict(found[0])


def wait_version(kubectl: Kubectl, namespace: str, name: str, version: int) -> dict[str, Any]:
    """Until the operator has recorded `version` of the object, and it is Ready."""
    kubectl("wait", "-n", namespace, "--timeout=60s", f"--for=jsonpath={{.status.version}}={version}",
            f"configvalues/{name}")
    kubectl("wait", "-n", namespace, "--timeout=60s", "--for=condition=Ready", f"configvalues/{name}")
    return cv(kubectl, namespace, name)


def grant(kubectl: Kubectl, namespace: str, name: str, verbs: list[str]) -> str:
    """A ServiceAccount with a Role on the stead.dev resources, and a token of it."""
    kubectl("create", "serviceaccount", name, "-n", namespace)
    kubectl("create", "role", name, "-n", namespace, f"--verb={','.join(verbs)}",
            "--resource=configvalues.stead.dev,configcomponents.stead.dev,environments.stead.dev")
    kubectl("create", "rolebinding", name, "-n", namespace, f"--role={name}", f"--serviceaccount={namespace}:{name}")
    return str(kubectl("create", "token", name, "-n", namespace).stdout.strip())


@pytest.fixture(scope="module")
def store(operator: OperatorProcess, kubectl: Kubectl) -> Iterator[Store]:
    namespace = f"config-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", namespace)
    writer = grant(kubectl, namespace, "writer", ["get", "list", "watch", "create", "update", "patch", "delete"])
    reader = grant(kubectl, namespace, "reader", ["get", "list", "watch"])
    kubectl("apply", "-n", namespace, *[arg for path in EXAMPLES for arg in ("-f", str(path))])
    # a second environment, for Fuel's "node not assigned to this environment"
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "stead.dev/v1alpha1", "kind": "Environment", "metadata": {"name": "env-2"},
        "spec": {"release": "mitaka-9.0", "components": ["fuel"],
                 "nodes": [{"name": "node-9", "fqdn": "node-9.domain.tld", "roles": ["compute"]}]}}))
    kubectl("wait", "-n", namespace, "--timeout=60s", "--for=condition=Ready",
            "environment/env-1", "environment/env-2", "configcomponent/fuel")
    kubectl("wait", "-n", namespace, "--timeout=60s", "--for=condition=Ready", "configvalues", "--all")
    cacert = operator.store.parent / "config-api" / "ca.crt"
    try:
        yield Store(f"https://127.0.0.1:{operator.config_api_port}", cacert, namespace, writer, reader)
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false")


def test_the_examples_are_ready_and_versioned_by_the_operator(store: Store, kubectl: Kubectl) -> None:
    for name, point in [("astute", "(root)"), ("astute-controller", "role=controller"),
                        ("astute-node-1-overrides", "role=controller,node=node-1.domain.tld")]:
        status = cv(kubectl, store.namespace, name)["status"]
        assert status["phase"] == "Provisioned" and status["version"] == 1 and status["point"] == point
        assert [v["version"] for v in status["versions"]] == [1]
    table = kubectl("get", "cv", "-n", store.namespace).stdout.splitlines()
    assert table[0].split()[:7] == ["NAME", "PHASE", "READY", "ENVIRONMENT", "RESOURCE", "KIND", "LEVEL"]


def test_the_seeds_use_cases_through_the_cli(store: Store, kubectl: Kubectl) -> None:
    # use case 1: all the deployment data of a node, as merged from the root down to it
    result = store.cli("get", *NODE1)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == NODE1_EFFECTIVE
    assert yaml.safe_load(store.cli("get", *NODE1, "--format", "yaml").stdout) == NODE1_EFFECTIVE
    # use case 2: one key
    result = store.cli("get", *NODE1, "--key", "deployment_id")
    assert (result.returncode, json.loads(result.stdout)) == (0, {"deployment_id": 1})
    # use case 3: Fuel's command sets the key at node-1's level (the schema makes "2" an integer) ...
    result = store.cli("set", *NODE1, "--key", "deployment_id", "--value", "2")
    assert result.returncode == 0, result.stderr
    result = store.cli("get", *NODE1, "--key", "deployment_id")
    assert json.loads(result.stdout) == {"deployment_id": 2}
    # ... into a new ConfigValues object, which the operator validates and versions
    created = values_at(kubectl, store.namespace, {"role": "controller", "node": "node-1.domain.tld"})
    assert created["spec"]["data"] == {"deployment_id": 2}
    status = wait_version(kubectl, store.namespace, created["metadata"]["name"], 1)["status"]
    assert status["point"] == "role=controller,node=node-1.domain.tld"
    # use case 4: the lookups a Hiera backend makes, each key in the node's scope
    for node, workers in [("node-1.domain.tld", 16), ("node-2.domain.tld", 4)]:
        result = store.cli("get", "--env", "env-1", "--level", f"node={node}", "--resource", "astute",
                           "--key", "nova.workers", "--format", "plain")
        assert (result.returncode, result.stdout) == (0, f"{workers}\n")
    traced = json.loads(store.cli("get", *NODE1, "--trace").stdout)
    assert traced["lookup"]["nova.workers"] == {"level": "role=controller,node=node-1.domain.tld",
                                                "kind": "overrides", "version": 1,
                                                "object": "astute-node-1-overrides"}
    # a value the schema refuses is refused, with the reason
    result = store.cli("set", *NODE1, "--key", "nova.workers", "--value", "0")
    assert result.returncode == 1 and "data.nova.workers: below the minimum 1" in result.stderr


def test_the_http_api_reads_writes_and_effective_values(store: Store, kubectl: Kubectl) -> None:
    node2 = f"{P}/environments/env-1/roles/compute/nodes/node-2.domain.tld/resources/astute/values"
    # a node's whole resource, and one key
    status, body, _ = store.http("GET", node2 + "?effective", token=store.reader)
    assert (status, body) == (200, {"deployment_id": 1, "debug": False,
                                    "nova": {"workers": 4, "cpu_allocation_ratio": 1.5}})
    assert store.http("GET", node2 + "?effective&key=nova.cpu_allocation_ratio", token=store.reader)[:2] == (200, 1.5)
    # set one key at the role level, read it back, and see it in the ConfigValues object
    compute = f"{P}/environments/env-1/roles/compute/resources/astute/values"
    status, body, headers = store.http("PUT", compute + "?key=nova.workers", token=store.writer, body=6)
    assert (status, body) == (200, {"nova": {"workers": 6}})
    name = headers["X-Stead-Object"]
    assert store.http("GET", compute + "?key=nova.workers", token=store.reader)[:2] == (200, 6)
    assert cv(kubectl, store.namespace, name)["spec"] == {
        "environment": "env-1", "resource": "astute", "kind": "values", "level": {"role": "compute"},
        "data": {"nova": {"workers": 6}}}
    wait_version(kubectl, store.namespace, name, 1)
    # the role's value now reaches node-2; an override at node-2's level beats it
    assert store.http("GET", node2 + "?effective&key=nova.workers", token=store.reader)[:2] == (200, 6)
    override = node2.removesuffix("/values") + "/overrides?key=nova.workers"
    assert store.http("PUT", override, token=store.writer, body=3)[0] == 200
    assert store.http("GET", node2 + "?effective&key=nova.workers", token=store.reader)[:2] == (200, 3)
    status, traced, _ = store.http("GET", node2 + "?effective&trace&key=nova.workers", token=store.reader)
    assert traced["lookup"]["nova.workers"]["level"] == "role=compute,node=node-2.domain.tld"
    # Fuel's `.../nodes/<fqdn>/...` path names the same point (node-2 has one role)
    seed_path = f"{P}/environments/env-1/nodes/node-2.domain.tld/resources/astute/values?effective&key=nova.workers"
    assert store.http("GET", seed_path, token=store.reader)[:2] == (200, 3)
    # a second write to the role: version 2, recorded by the operator
    assert store.http("PUT", compute + "?key=nova.workers", token=store.writer, body=7)[0] == 200
    assert [v["version"] for v in wait_version(kubectl, store.namespace, name, 2)["status"]["versions"]] == [1, 2]
    # If-Match: a write based on a stale read is refused
    _, _, headers = store.http("GET", compute, token=store.reader)
    etag = headers["ETag"]
    status, _, _ = store.http("PUT", compute + "?key=debug", token=store.writer, body=True, headers={"If-Match": etag})
    assert status == 200
    status, body, _ = store.http("PUT", compute + "?key=debug", token=store.writer, body=False,
                                 headers={"If-Match": etag})
    assert status == 409 and body["error"] == "Conflict"


def test_a_gitops_change_shows_in_the_api(store: Store, kubectl: Kubectl) -> None:
    kubectl("patch", "cv", "astute", "-n", store.namespace, "--type", "merge",
            "-p", '{"spec":{"data":{"deployment_id":1,"debug":true,"nova":{"workers":4,"cpu_allocation_ratio":1.5}}}}')
    wait_version(kubectl, store.namespace, "astute", 2)
    path = f"{P}/environments/env-1/nodes/node-3.domain.tld/resources/astute/values?effective&key=debug"
    # the API's cache follows the objects by watching them: a change made with kubectl shows within moments
    wait_until(lambda: store.http("GET", path, token=store.reader)[:2] == (200, True), 10, "the change in the API")


@pytest.mark.parametrize("path,what,text", [
    ("/environments/env-9/nodes/node-1/resources/astute/values", "environment", 'environment "env-9" not found'),
    ("/environments/env-1/nodes/node-1/resources/nope/values", "resource",
     'resource "nope" is not defined by any component enabled in environment "env-1" (enabled components: fuel)'),
    ("/environments/env-1/nodes/ghost.domain.tld/resources/astute/values", "node",
     'node "ghost.domain.tld" not found'),
    ("/environments/env-1/nodes/node-9.domain.tld/resources/astute/values", "node",
     'node "node-9.domain.tld" is not assigned to environment "env-1"'),
    ("/environments/env-1/roles/compute/nodes/node-1/resources/astute/values", "node",
     'node "node-1" does not have role "compute"'),
    ("/environments/env-1/resources/astute/values?version=7", "version",
     'version 7 of the values of resource "astute" at (root) in environment "env-1" not found (kept: 1'),
    ("/environments/env-1/resources/globals/values?version=1", "version",
     "no values were ever stored there"),
    ("/environments/env-1/racks/r1/resources/astute/values", "level", 'environment "env-1" has no level "racks"'),
    ("/environments/env-1/roles/compute/resources/globals/values", "values",
     'no values of resource "globals" at role=compute'),
    ("/environments/env-1/roles/controler/resources/astute/values?effective", "role",  # a typo: not the root's
     'environment "env-1" has no node with role "controler" (roles: compute, controller)'),
    ("/environments/env-1/resources/astute/values?key=nova.nope", "key", '"nope"'),
    ("/components/nope", "component", 'component "nope" not found'),
    ("/nothing/here", "route", "no such route"),
])
def test_every_404_names_what_was_not_found(store: Store, path: str, what: str, text: str) -> None:
    status, body, _ = store.http("GET", P + path, token=store.reader)
    assert status == 404 and body["notFound"] == what and text in body["message"], body


def test_a_mistyped_role_in_the_cli_is_an_error_naming_the_roles(store: Store) -> None:
    result = store.cli("get", "--env", "env-1", "--level", "role=controler", "--resource", "astute")
    assert result.returncode == 1 and result.stdout == ""
    assert 'no node with role "controler" (roles: compute, controller)' in result.stderr


def test_the_apis_root_lists_its_routes(store: Store) -> None:
    for path in ("/", "/api/v1", P):
        status, body, _ = store.http("GET", path, token=store.reader)
        assert status == 200 and {"method": "GET", "path": P + "/environments", "does": "list the environments"
                                  } in body["routes"], body


def client_certificate(cluster: ClusterInfo, directory: Path, user: str, groups: tuple[str, ...] = ()
                       ) -> tuple[Path, Path]:
    """A certificate of the cluster's client CA (the local control plane's, in its home)."""
    ca = KeyPair((cluster.home / "pki" / "client-ca.crt").read_bytes(), (cluster.home / "pki" / "client-ca.key"
                                                                        ).read_bytes())
    leaf = make_leaf(ca, user, organizations=groups, server=False, client=True)
    cert, key = directory / f"{user}.crt", directory / f"{user}.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    key.chmod(0o600)
    return cert, key


def test_the_local_kubeconfigs_client_certificate_reads_without_any_rbac_setup(
        store: Store, operator: OperatorProcess, tmp_path: Path) -> None:
    """The newcomer's path: `make run`'s kubeconfig (the admin's client certificate, O=system:masters)
    and `stead config get`; no ServiceAccount, no ClusterRole, no binding, no token."""
    env = {k: v for k, v in os.environ.items() if k not in ("STEAD_CONFIG_TOKEN", "STEAD_CONFIG_SERVER")}
    env.update(KUBECONFIG=str(operator.cluster.kubeconfig), STEAD_CONFIG_URL=store.url,
               STEAD_CONFIG_CACERT=str(store.cacert))
    result = subprocess.run([str(STEAD), "config", "get", "-n", store.namespace, *NODE1, "--key",
                             "nova.cpu_allocation_ratio"], capture_output=True, text=True, timeout=60, env=env)
    assert (result.returncode, result.stderr) == (0, "") and json.loads(result.stdout) == {
        "nova.cpu_allocation_ratio": 1.5}
    # a user of the same CA whom RBAC grants nothing: authenticated, then forbidden
    nobody = client_certificate(operator.cluster, tmp_path, f"nobody-{uuid.uuid4().hex[:6]}")
    status, body, _ = store.http("GET", f"{P}/environments/env-1", cert=nobody)
    assert status == 403 and f'user "{nobody[0].stem}" may not get environments' in body["message"], body
    # ... and the same through the CLI, from a kubeconfig holding that certificate inline
    config = tmp_path / "nobody.kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "nobody"}}],
        "clusters": [{"name": "c", "cluster": {"server": operator.cluster.server}}],
        "users": [{"name": "nobody", "user": {
            "client-certificate-data": base64.b64encode(nobody[0].read_bytes()).decode(),
            "client-key-data": base64.b64encode(nobody[1].read_bytes()).decode()}}]}))
    result = subprocess.run([str(STEAD), "config", "get", "-n", store.namespace, *NODE1],
                            capture_output=True, text=True, timeout=60, env={**env, "KUBECONFIG": str(config)})
    assert result.returncode == 1 and "may not get configvalues" in result.stderr, result.stderr
    # a certificate of another CA never gets as far as a request
    stranger = make_leaf(make_ca("another-cluster"), "system:admin", organizations=("system:masters",),
                         server=False, client=True)
    (tmp_path / "stranger.crt").write_bytes(stranger.cert_pem)
    (tmp_path / "stranger.key").write_bytes(stranger.key_pem)
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        store.http("GET", f"{P}/environments/env-1", cert=(tmp_path / "stranger.crt", tmp_path / "stranger.key"))


def test_401_without_credentials_403_without_permission(store: Store) -> None:
    path = f"{P}/environments/env-1/nodes/node-1/resources/astute/values?effective"
    for token in (None, "not-a-token", store.writer[:-4] + "AAAA"):
        status, body, headers = store.http("GET", path, token=token)
        assert status == 401
        assert body == {"code": 401, "error": "Unauthorized", "message": "valid credentials are required"}
        assert "Bearer" in headers["WWW-Authenticate"]
    assert store.http("GET", f"{P}/environments/nope/resources/x/values")[0] == 401  # learns nothing
    result = store.cli("get", *NODE1, token="not-a-token")
    assert result.returncode == 1 and "valid credentials are required" in result.stderr
    status, body, _ = store.http("PUT", f"{P}/environments/env-1/resources/globals/values", token=store.reader,
                                 body={"a": 1})
    assert status == 403 and "may not create configvalues" in body["message"]  # nothing there yet: a create
    status, body, _ = store.http("PUT", f"{P}/environments/env-1/resources/astute/values", token=store.reader,
                                 body={"a": 1})
    assert status == 403 and "may not update configvalues" in body["message"]
    # A name from the URL never reaches an API-server path as more than a name (%3F was a query).
    status, body, _ = store.http("GET", f"{P}/environments/env-1%3Fwatch%3D1", token=store.reader)
    assert status == 404 and body["notFound"] == "environment", body


def test_revert_to_an_earlier_version(store: Store, kubectl: Kubectl) -> None:
    level = ("--env", "env-1", "--level", "role=controller", "--resource", "globals")
    for value in ("one", "two"):
        assert store.cli("set", *level, "--key", "release", "--value", value).returncode == 0
    name = values_at(kubectl, store.namespace, {"role": "controller"}, resource="globals")["metadata"]["name"]
    assert wait_version(kubectl, store.namespace, name, 2)["spec"]["data"] == {"release": "two"}
    # every version is an immutable ConfigMap owned by the ConfigValues
    maps = json.loads(kubectl("get", "configmaps", "-n", store.namespace, "-l", f"stead.dev/config-values={name}",
                              "-o", "json").stdout)["items"]
    assert sorted(m["metadata"]["name"] for m in maps) == [f"{name}-v1", f"{name}-v2"]
    assert all(m["immutable"] is True and m["metadata"]["ownerReferences"][0]["name"] == name for m in maps)
    edit = kubectl("patch", "configmap", f"{name}-v1", "-n", store.namespace, "--type", "merge",
                   "-p", '{"data":{"data.json":"{}"}}', check=False)
    assert edit.returncode != 0 and "immutable" in edit.stderr
    # history, and a kept version read back
    result = store.cli("history", *level, "--format", "plain")
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == ["1", "2*"]
    result = store.cli("get", *level, "--no-effective", "--version", "1")
    assert json.loads(result.stdout) == {"release": "one"}
    # revert with the CLI: version 1's data in force again, recorded as version 3
    result = store.cli("revert", *level, "--to-version", "1")
    assert result.returncode == 0, result.stderr
    assert store.cli("get", *level, "--key", "release", "--format", "plain").stdout == "one\n"
    reverted = wait_version(kubectl, store.namespace, name, 3)
    assert reverted["spec"]["data"] == {"release": "one"} and reverted["status"]["versions"][-1]["source"] == "spec"
    # revert the GitOps way: spec.revertTo, recorded as version 4
    kubectl("patch", "cv", name, "-n", store.namespace, "--type", "merge", "-p", '{"spec":{"revertTo":2}}')
    assert wait_version(kubectl, store.namespace, name, 4)["status"]["revertedTo"] == 2
    wait_until(lambda: store.cli("get", *level, "--key", "release", "--format", "plain").stdout == "two\n",
               10, "the API to serve the reverted data")
    # a revertTo naming a version that is not kept stalls, with the reason
    kubectl("patch", "cv", name, "-n", store.namespace, "--type", "merge", "-p", '{"spec":{"revertTo":99}}')
    kubectl("wait", "-n", store.namespace, "--timeout=60s", "--for=condition=Stalled", f"cv/{name}")
    stalled = cv(kubectl, store.namespace, name)["status"]["conditions"]
    assert any(c["type"] == "Stalled" and c["reason"] == "RevertUnavailable" for c in stalled)
    # retention: keep 2; deleting the values takes the history with them
    kubectl("patch", "cv", name, "-n", store.namespace, "--type", "merge",
            "-p", '{"spec":{"revertTo":null,"historyLimit":2,"data":{"release":"five"}}}')
    assert [v["version"] for v in wait_version(kubectl, store.namespace, name, 5)["status"]["versions"]] == [4, 5]
    assert store.cli("delete", *level).returncode == 0
    wait_until(lambda: kubectl("get", "configmap", f"{name}-v5", "-n", store.namespace, check=False).returncode != 0,
               60, "the versions to be garbage-collected")


def test_the_operator_publishes_effective_values_into_a_configmap(store: Store, kubectl: Kubectl) -> None:
    kubectl("apply", "-n", store.namespace, "-f", "-", input=json.dumps({
        "apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues", "metadata": {"name": "node-3-astute"},
        "spec": {"environment": "env-1", "resource": "astute", "level": {"node": "node-3"},
                 "data": {"nova": {"workers": 2}},
                 "publish": {"configMap": "node-3-astute", "format": "yaml"}}}))  # key: values.yaml by default
    kubectl("wait", "-n", store.namespace, "--timeout=60s", "--for=condition=Ready", "cv/node-3-astute")
    assert cv(kubectl, store.namespace, "node-3-astute")["status"]["point"] == "role=compute,node=node-3.domain.tld"

    def published() -> Any:
        cm = kubectl("get", "configmap", "node-3-astute", "-n", store.namespace, "-o", "json", check=False)
        return json.loads(cm.stdout)["data"]["values.yaml"] if cm.returncode == 0 else None

    assert "workers: 2" in wait_until(published, 30, "the published ConfigMap")
    # a change at the root reaches the node's ConfigMap when the operator reconciles the root
    status, _, _ = store.http("PUT", f"{P}/environments/env-1/resources/astute/values?key=deployment_id",
                              token=store.writer, body=5)
    assert status == 200
    wait_until(lambda: "deployment_id: 5" in (published() or ""), 30, "the root's change to be republished")


def test_a_users_configmap_of_the_same_name_is_never_overwritten(store: Store, kubectl: Kubectl) -> None:
    kubectl("create", "configmap", "users-own", "-n", store.namespace, "--from-literal=values.yaml=mine")
    kubectl("apply", "-n", store.namespace, "-f", "-", input=json.dumps({
        "apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues", "metadata": {"name": "takes-over"},
        "spec": {"environment": "env-1", "resource": "astute", "level": {"node": "node-2"},
                 "data": {"nova": {"workers": 3}}, "publish": {"configMap": "users-own", "format": "yaml"}}}))
    kubectl("wait", "-n", store.namespace, "--timeout=60s", "--for=condition=Stalled", "cv/takes-over")
    stalled = next(c for c in cv(kubectl, store.namespace, "takes-over")["status"]["conditions"]
                   if c["type"] == "Stalled")
    assert stalled["reason"] == "ConfigMapNotOwned" and "ConfigMap users-own exists" in stalled["message"]
    mine = json.loads(kubectl("get", "configmap", "users-own", "-n", store.namespace, "-o", "json").stdout)
    assert mine["data"] == {"values.yaml": "mine"} and not mine["metadata"].get("ownerReferences")
    kubectl("delete", "cv", "takes-over", "-n", store.namespace)
    assert kubectl("get", "configmap", "users-own", "-n", store.namespace, check=False).returncode == 0


def test_bad_objects_are_refused_at_apply_time_naming_the_field(store: Store, kubectl: Kubectl) -> None:
    def apply(spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return kubectl("apply", "-n", store.namespace, "-f", "-", check=False, input=json.dumps({
            "apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues", "metadata": {"name": "bad"},
            "spec": {"environment": "env-1", "resource": "astute", **spec}}))

    result = apply({"kind": "override"})  # the CRD schema
    assert result.returncode != 0 and "spec.kind" in result.stderr
    result = apply({"level": {"role": "compute", "node": "node-1"}})  # the operator's admission webhook
    assert result.returncode != 0 and 'spec.level.role: node "node-1" does not have role "compute"' in result.stderr
    result = apply({"data": {"nova": {"workers": "many"}}})
    assert result.returncode != 0 and "spec.data.nova.workers: expected integer, got string" in result.stderr
    assert kubectl("get", "cv", "bad", "-n", store.namespace, check=False).returncode != 0


@dataclass
class WorkersOperator:
    """A second `stead run` whose API is served by two worker processes and also takes HTTP Basic."""

    process: subprocess.Popen[bytes]
    api: Store
    log: Path
    health_port: int

    def workers(self) -> list[int]:
        """The pids of the operator's config API workers now."""
        pids = []
        for pid in Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split():
            with contextlib.suppress(FileNotFoundError):  # a child that is just gone
                if b"operators.apiworker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(int(pid))
        return pids

    def ready(self) -> bool:
        """/readyz: every worker is serving (one answering is not enough)."""
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


@pytest.fixture(scope="module")
def workers_operator(store: Store, operator: OperatorProcess, kubectl: Kubectl,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkersOperator]:
    """Watching only an empty namespace, without webhooks, so it leaves the session's operator alone;
    its API serves every namespace, `store`'s among them."""
    kubectl("create", "secret", "generic", "config-basic", "-n", store.namespace,
            "--from-literal=username=hiera", "--from-literal=password=correct horse")
    quiet = f"quiet-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", quiet)
    work = tmp_path_factory.mktemp("workers-operator")
    port, health = free_port(), free_port()
    home = work / "home"
    log = work / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(STEAD), "run", "--kubeconfig", str(operator.cluster.kubeconfig), "--store", str(home / "store"),
             "--webhook", "off", "--namespace", quiet, "--health-port", str(health), "--replica", "stead-workers",
             "--config-api-port", str(port), "--config-api-basic-secret", f"{store.namespace}/config-basic",
             "--config-api-workers", "2"],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "STEAD_HOME": str(home)})
    second = WorkersOperator(proc, Store(f"https://127.0.0.1:{port}", home / "config-api" / "ca.crt",
                                         store.namespace, store.writer, store.reader), log, health)
    try:
        wait_until(second.ready, 60, "the second operator's readiness")
        yield second
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        kubectl("delete", "namespace", quiet, "--wait=false")
        shutil.rmtree(home / "store", ignore_errors=True)


def test_basic_credentials_from_a_secret(workers_operator: WorkersOperator) -> None:
    """`--config-api-basic-secret` (here served by workers: each reads the Secret itself)."""
    basic = workers_operator.api
    good = "Basic " + base64.b64encode(b"hiera:correct horse").decode()
    for _ in range(4):  # a connection each: the kernel spreads them over both workers
        status, body, _ = basic.http("GET", f"{P}/environments/env-1/nodes/node-1.domain.tld/resources/astute/values"
                                     "?effective&key=deployment_id", headers={"Authorization": good})
        assert (status, body) == (200, 2)  # as use case 3 set it
    wrong = "Basic " + base64.b64encode(b"hiera:wrong").decode()
    assert basic.http("GET", f"{P}/environments", headers={"Authorization": wrong})[0] == 401
    assert basic.http("GET", f"{P}/environments", token=basic.reader)[0] == 200  # tokens still work


def test_client_certificates_in_worker_processes(workers_operator: WorkersOperator, operator: OperatorProcess,
                                                 tmp_path: Path) -> None:
    """Each worker terminates TLS itself (the relay of its process): a certificate is the user there too."""
    admin = client_certificate(operator.cluster, tmp_path, "worker-admin", ("system:masters",))
    nobody = client_certificate(operator.cluster, tmp_path, "worker-nobody")
    api = workers_operator.api
    for _ in range(4):  # a connection each: the kernel spreads them over both workers
        assert api.http("GET", f"{P}/environments/env-1", cert=admin)[0] == 200
        assert api.http("GET", f"{P}/environments/env-1", cert=nobody)[0] == 403
    assert api.http("GET", f"{P}/environments", token=api.reader)[0] == 200  # tokens through the relay


def test_api_workers_write_through_survive_a_crash_and_stop_with_the_operator(
        workers_operator: WorkersOperator, kubectl: Kubectl) -> None:
    """`--config-api-workers 2`: two processes serve the port; a write goes to the ConfigValues
    object; a killed worker is replaced while the other keeps answering; SIGTERM ends them all."""
    api = workers_operator.api
    first = workers_operator.workers()
    assert len(first) == 2
    compute = f"{P}/environments/env-1/roles/compute/resources/astute/values"
    status, _, headers = api.http("PUT", compute + "?key=nova.scheduler", token=api.writer, body="filter")
    assert status == 200
    assert cv(kubectl, api.namespace, headers["X-Stead-Object"])["spec"]["data"]["nova"]["scheduler"] == "filter"

    os.kill(first[0], signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{first[0]}").exists(), 30, "the operator to reap the killed worker")
    assert api.http("GET", f"{P}/environments", token=api.reader)[0] == 200  # the survivor answers meanwhile
    wait_until(lambda: len(workers_operator.workers()) == 2 and first[0] not in workers_operator.workers(), 60,
               "a new worker in place of the killed one")
    assert first[1] in workers_operator.workers()
    wait_until(lambda: all(api.http("GET", compute + "?key=nova.scheduler", token=api.reader)[:2] == (200, "filter")
                           for _ in range(4)), 30, "every worker to read the write")
    assert "worker 0 (pid" in workers_operator.log.read_text()  # the operator said what happened

    now = workers_operator.workers()
    workers_operator.process.send_signal(signal.SIGTERM)
    assert workers_operator.process.wait(timeout=60) == 0
    assert not [pid for pid in now if Path(f"/proc/{pid}").exists()]


def test_an_anonymous_body_is_refused_on_its_head_before_a_byte_of_it_is_read(store: Store) -> None:
    """Issue 25, finding 3, against the operator's own server: a write's head without credentials is answered
    401 (and the connection closed) with no byte of its announced body sent, 20 times; so is a chunked one
    (411), credentials or not."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(store.url)
    context = ssl.create_default_context(cafile=str(store.cacert))
    heads = [(b"Content-Length: 60000\r\n", b"401"), (b"Transfer-Encoding: chunked\r\n", b"411"),
             (f"Authorization: Bearer {store.writer}\r\nTransfer-Encoding: chunked\r\n".encode(), b"411")]
    for extra, status in heads:
        for _ in range(20 if status == b"401" else 5):
            with socket.create_connection((url.hostname, url.port), timeout=10) as raw, \
                    context.wrap_socket(raw, server_hostname=url.hostname) as sock:
                sock.sendall(b"PUT " + url.path.encode() + b"/environments/env-1/resources/astute/values?namespace="
                             + store.namespace.encode() + b" HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n")
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 " + status), answer
