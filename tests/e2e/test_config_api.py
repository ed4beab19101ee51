"""The configuration API end to end on the real local API server, without the operator process.

The API runs in this test process over HTTPS with the real dependencies: `KubeConfigRepository`
(writes are ConfigValues objects), `TokenReviewAuthenticator` (ServiceAccount tokens from
`kubectl create token`, RBAC through SubjectAccessReview) and `BasicAuthenticator` against a
Secret. What the operator would do after a write (validate, record the version, publish) is
done by calling the kind's real pipeline steps (`reconcile` below), so the version history is
exercised as immutable ConfigMaps on the real API server.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import ssl
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from operators.cluster import ClusterInfo
from operators.config import KINDS, reconcile
from operators.config.api import create_app
from operators.config.auth import BasicAuthenticator, ChainAuthenticator, TokenReviewAuthenticator, secret_loader
from operators.config.cli import add_config_commands, run_config
from operators.config.repository import KubeConfigRepository
from operators.runtime import crdgen
from operators.runtime.certs import make_ca, make_leaf
from operators.runtime.kube import KubeClient, load_access
from operators.runtime.pipeline import Observed, StepContext
from tests.e2e.conftest import ROOT, Kubectl, free_port, wait_until

P = "/api/v1/config"
ASTUTE = {"deployment_id": 1, "uid": "1", "fqdn": "node-1.domain.tld", "nova": {"debug": False, "workers": 4}}


@dataclass
class ConfigServer:
    url: str
    cacert: Path
    namespace: str
    writer: str
    reader: str
    loop: asyncio.AbstractEventLoop
    kube: KubeClient

    def run(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (its KubeClient lives there)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def http(self, method: str, path: str, token: str | None = None, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        context = ssl.create_default_context(cafile=str(self.cacert))
        data = None if body is None else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read().decode() or "null")

    def cli(self, *argv: str, stdin: str = "", token: str | None = None) -> tuple[int, str]:
        import argparse

        parser = argparse.ArgumentParser()
        add_config_commands(parser.add_subparsers())
        args = parser.parse_args(["config", argv[0], "--server", self.url, "--cacert", str(self.cacert),
                                  "--token", token or self.writer, "-n", self.namespace, *argv[1:]])
        out = io.StringIO()
        return run_config(args, stdin=io.StringIO(stdin), stdout=out), out.getvalue()


def _apply(kubectl: Kubectl, obj: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(obj))


@pytest.fixture(scope="module")
def config_server(cluster: ClusterInfo, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[ConfigServer]:
    kubectl("apply", "-f", str(ROOT / "crds" / "environments.yaml"))
    for kind in KINDS:
        _apply(kubectl, crdgen.crd_for(kind))
    kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/environments.stead.dev",
            *[f"crd/{k.crd_name}" for k in KINDS])
    namespace = f"config-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", namespace)
    wait_until(lambda: all(kubectl("get", plural, "-n", namespace, check=False).returncode == 0
                           for plural in ("configvalues", "configcomponents", "environments")),
               60, "the new CRDs to be served")
    for name, verbs in [("writer", ["get", "list", "create", "update", "delete"]), ("reader", ["get", "list"])]:
        kubectl("create", "serviceaccount", name, "-n", namespace)
        kubectl("create", "role", name, "-n", namespace, f"--verb={','.join(verbs)}",
                "--resource=configvalues.stead.dev,configcomponents.stead.dev,environments.stead.dev")
        kubectl("create", "rolebinding", name, "-n", namespace, f"--role={name}",
                f"--serviceaccount={namespace}:{name}")
    kubectl("create", "secret", "generic", "config-basic", "-n", namespace,
            "--from-literal=username=hiera", "--from-literal=password=correct horse")
    writer = kubectl("create", "token", "writer", "-n", namespace).stdout.strip()
    reader = kubectl("create", "token", "reader", "-n", namespace).stdout.strip()

    work = tmp_path_factory.mktemp("config-tls")
    ca = make_ca("stead-config-test-ca")
    leaf = make_leaf(ca, "stead-config", hosts=["127.0.0.1"])
    (work / "ca.crt").write_bytes(ca.cert_pem)
    (work / "tls.crt").write_bytes(leaf.cert_pem)
    (work / "tls.key").write_bytes(leaf.key_pem)
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(work / "tls.crt", work / "tls.key")

    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        kube = KubeClient(load_access(cluster.kubeconfig))
        await kube.__aenter__()
        auth = ChainAuthenticator(TokenReviewAuthenticator(kube, ttl=1),
                                  BasicAuthenticator(secret_loader(kube, namespace, "config-basic"), ttl=1))
        runner = web.AppRunner(create_app(KubeConfigRepository(kube), auth, default_namespace=namespace))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=server_ssl).start()
        holder.update(kube=kube, runner=runner)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(30)
    server = ConfigServer(f"https://127.0.0.1:{port}", work / "ca.crt", namespace, writer, reader, loop,
                          holder["kube"])

    _apply(kubectl, {"apiVersion": "stead.dev/v1alpha1", "kind": "ConfigComponent",
                     "metadata": {"name": "fuel", "namespace": namespace},
                     "spec": {"resources": [
                         {"name": "astute", "schema": {"type": "object",
                                                       "properties": {"deployment_id": {"type": "integer"}}}},
                         {"name": "globals"}, {"name": "override/plugins"}]}})
    for env, levels, nodes in [
        ("1", ["node"], [{"name": "node-1", "fqdn": "node-1.domain.tld", "roles": ["controller"]},
                         {"name": "node-2", "fqdn": "node-2.domain.tld", "roles": ["compute"]}]),
        ("2", ["role", "node"], [{"name": "node-9", "fqdn": "node-9.domain.tld", "roles": ["compute"]}]),
    ]:
        _apply(kubectl, {"apiVersion": "stead.dev/v1alpha1", "kind": "Environment",
                         "metadata": {"name": env, "namespace": namespace},
                         "spec": {"release": "mitaka-9.0", "hierarchyLevels": levels, "components": ["fuel"],
                                  "nodes": nodes}})
    try:
        yield server
    finally:
        async def stop() -> None:
            await holder["runner"].cleanup()
            await holder["kube"].__aexit__(None, None, None)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        kubectl("delete", "namespace", namespace, "--wait=false")


def reconcile_values(server: ConfigServer, kubectl: Kubectl, name: str) -> dict[str, Any]:
    """What the operator does for one ConfigValues: its real steps, then one status write."""
    body = json.loads(kubectl("get", "configvalues", name, "-n", server.namespace, "-o", "json").stdout)
    obj = Observed.from_body(body)
    services = SimpleNamespace(kube=server.kube)

    async def steps() -> dict[str, Any]:
        facts: dict[str, Any] = {}
        for step in (reconcile.validate_values, reconcile.record_version, reconcile.publish):
            facts.update(await step(StepContext(obj=obj, facts=facts, services=services)))
        await server.kube.patch_status("configvalues", server.namespace, name, {**facts, "phase": "Provisioned"})
        return facts

    facts: dict[str, Any] = server.run(steps())
    return facts


def values_name(server: ConfigServer, kubectl: Kubectl, resource: str, env: str, level: dict[str, str]) -> str:
    items = json.loads(kubectl("get", "configvalues", "-n", server.namespace, "-o", "json").stdout)["items"]
    names = [i["metadata"]["name"] for i in items if i["spec"]["resource"] == resource
             and i["spec"]["environment"] == env and i["spec"].get("level", {}) == level
             and i["spec"]["kind"] == "values"]
    assert len(names) == 1, names
    return str(names[0])


NODE = ("--env", "1", "--level", "node=node-1.domain.tld")


def test_the_seeds_use_cases_through_the_cli_over_https(config_server: ConfigServer, kubectl: Kubectl) -> None:
    s = config_server
    assert s.cli("set", *NODE, "--resource", "astute", stdin=json.dumps(ASTUTE)) == (0, "")
    # the write is a ConfigValues object: Kubernetes is the source of truth
    name = values_name(s, kubectl, "astute", "1", {"node": "node-1.domain.tld"})
    stored = json.loads(kubectl("get", "cv", name, "-n", s.namespace, "-o", "json").stdout)
    assert stored["spec"]["data"] == ASTUTE and stored["spec"]["level"] == {"node": "node-1.domain.tld"}
    # use case 1
    code, out = s.cli("get", *NODE, "--resource", "astute")
    assert code == 0 and json.loads(out) == ASTUTE
    # use case 2
    assert s.cli("get", *NODE, "--resource", "astute", "--key", "deployment_id") == (0, '{\n  "deployment_id": 1\n}\n')
    # use case 3: the seed's command, then the typed form
    assert s.cli("set", *NODE, "--resource", "astute", "--key", "uid", "--value", "2")[0] == 0
    assert s.cli("get", *NODE, "--resource", "astute", "--key", "uid", "--format", "plain") == (0, "2\n")
    code, _ = s.cli("set", *NODE, "--resource", "astute", "--key", "deployment_id", "--value", "2", "--type", "int")
    assert code == 0
    assert s.cli("get", *NODE, "--resource", "astute", "--key", "deployment_id", "--format", "plain") == (0, "2\n")
    # use case 4 (a Hiera lookup is an effective GET of one key with the node's scope)
    assert s.cli("override", "--env", "1", "--level", "cluster", "--resource", "astute", "--key", "nova.debug",
                 "--value", "true", "--type", "bool")[0] == 0
    status, value = s.http("GET", f"{P}/environments/1/nodes/node-1.domain.tld/resources/astute/values"
                                  "?effective&key=deployment_id", token=s.reader)
    assert (status, value) == (200, 2)
    status, traced = s.http("GET", f"{P}/environments/1/nodes/node-1/resources/astute/values?effective&trace",
                            token=s.reader)
    assert status == 200 and traced["values"]["nova"] == {"debug": False, "workers": 4}  # node values win
    assert traced["lookup"]["nova.debug"]["level"] == "node=node-1.domain.tld"
    status, root_only = s.http("GET", f"{P}/environments/1/nodes/node-2/resources/astute/values?effective",
                               token=s.reader)
    assert (status, root_only) == (200, {"nova": {"debug": True}})
    # a schema failure is refused with the reason
    code, _ = s.cli("set", *NODE, "--resource", "astute", "--key", "deployment_id", "--value", "x")
    assert code == 1


@pytest.mark.parametrize("path,what,text", [
    ("/environments/9/nodes/node-1/resources/astute/values", "environment", 'environment "9" not found'),
    ("/environments/1/nodes/node-1/resources/nope/values", "resource",
     'resource "nope" is not defined by any component enabled in environment "1"'),
    ("/environments/1/nodes/ghost.domain.tld/resources/astute/values", "node", 'node "ghost.domain.tld" not found'),
    ("/environments/1/nodes/node-9.domain.tld/resources/astute/values", "node",
     'node "node-9.domain.tld" is not assigned to environment "1" (it belongs to environment "2")'),
    ("/environments/1/nodes/node-2/resources/globals/values?version=5", "version",
     'version 5 of the values of resource "globals" at node=node-2.domain.tld in environment "1" not found'),
    ("/environments/1/racks/r1/resources/astute/values", "level", 'environment "1" has no level "racks"'),
])
def test_every_404_names_what_was_not_found(config_server: ConfigServer, path: str, what: str, text: str) -> None:
    status, body = config_server.http("GET", P + path, token=config_server.reader)
    assert status == 404 and body["notFound"] == what and text in body["message"], body


def test_credentials_401_403_and_basic(config_server: ConfigServer) -> None:
    s = config_server
    path = f"{P}/environments/1/nodes/node-1/resources/astute/values?effective"
    for token in (None, "not-a-token", s.writer[:-4] + "AAAA"):
        status, body = s.http("GET", path, token=token)
        assert status == 401 and body == {"code": 401, "error": "Unauthorized",
                                          "message": "valid credentials are required"}
    assert s.http("GET", f"{P}/environments/9/nodes/x/resources/y/values")[0] == 401  # learns nothing
    status, body = s.http("PUT", f"{P}/environments/1/resources/globals/values", token=s.reader, body={"a": 1})
    assert status == 403 and "may not update configvalues" in body["message"]
    basic = "Basic " + base64.b64encode(b"hiera:correct horse").decode()
    assert s.http("GET", f"{P}/environments", headers={"Authorization": basic})[0] == 200
    wrong = "Basic " + base64.b64encode(b"hiera:wrong").decode()
    assert s.http("GET", f"{P}/environments", headers={"Authorization": wrong})[0] == 401
    status, doc = s.http("GET", f"{P}/openapi.json", token=s.reader)
    assert status == 200 and doc["openapi"].startswith("3.")


def test_versions_are_immutable_configmaps_and_revert(config_server: ConfigServer, kubectl: Kubectl) -> None:
    s = config_server
    base = f"{P}/environments/2/roles/compute/nodes/node-9/resources/globals/values"
    assert s.http("PUT", base, token=s.writer, body={"v": 1})[0] == 200
    name = values_name(s, kubectl, "globals", "2", {"role": "compute", "node": "node-9.domain.tld"})
    assert reconcile_values(s, kubectl, name)["version"] == 1
    assert s.http("PUT", base + "?key=v", token=s.writer, body=2)[0] == 200
    facts = reconcile_values(s, kubectl, name)
    assert facts["version"] == 2 and [v["version"] for v in facts["versions"]] == [1, 2]
    assert facts["point"] == "role=compute,node=node-9.domain.tld"
    cms = json.loads(kubectl("get", "configmaps", "-n", s.namespace, "-l", "stead.dev/version", "-o", "json").stdout)
    ours = [c for c in cms["items"] if c["metadata"]["annotations"]["stead.dev/config-values-name"] == name]
    assert len(ours) == 2 and all(c["immutable"] is True for c in ours)
    assert all(c["metadata"]["ownerReferences"][0]["name"] == name for c in ours)
    edit = kubectl("patch", "configmap", f"{name}-v1", "-n", s.namespace, "--type", "merge",
                   "-p", '{"data":{"data.json":"{}"}}', check=False)
    assert edit.returncode != 0 and "immutable" in edit.stderr
    # read a version, and the history through the API and the CLI
    assert s.http("GET", base + "?version=1", token=s.reader) == (200, {"v": 1})
    code, out = s.cli("history", "--env", "2", "--level", "role=compute,node=node-9", "--resource", "globals",
                      "--format", "plain")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["1", "2*"]
    # revert through the CLI: a new version with version 1's data
    assert s.cli("revert", "--env", "2", "--level", "role=compute,node=node-9", "--resource", "globals",
                 "--to-version", "1")[0] == 0
    facts = reconcile_values(s, kubectl, name)
    assert facts["version"] == 3 and s.http("GET", base, token=s.reader) == (200, {"v": 1})
    # revert through spec.revertTo (GitOps): version 2's data in force, recorded as version 4
    kubectl("patch", "cv", name, "-n", s.namespace, "--type", "merge", "-p", '{"spec":{"revertTo":2}}')
    facts = reconcile_values(s, kubectl, name)
    assert facts["version"] == 4 and facts["revertedTo"] == 2
    assert s.http("GET", base + "?effective", token=s.reader) == (200, {"v": 2})
    # retention: keep 2
    kubectl("patch", "cv", name, "-n", s.namespace, "--type", "merge",
            "-p", '{"spec":{"revertTo":null,"historyLimit":2,"data":{"v":5}}}')
    facts = reconcile_values(s, kubectl, name)
    assert [v["version"] for v in facts["versions"]] == [4, 5]
    assert kubectl("get", "configmap", f"{name}-v1", "-n", s.namespace, check=False).returncode != 0
    # deleting the values takes the history with it (garbage collection by ownerReference)
    assert s.http("DELETE", base, token=s.writer)[0] == 204
    wait_until(lambda: kubectl("get", "configmap", f"{name}-v5", "-n", s.namespace, check=False).returncode != 0,
               60, "the versions to be garbage-collected")


def test_conflicting_write_is_409(config_server: ConfigServer) -> None:
    s = config_server
    base = f"{P}/environments/1/resources/override/plugins/values"
    assert s.http("PUT", base, token=s.writer, body={"a": 1})[0] == 200
    request = urllib.request.Request(s.url + base, headers={"Authorization": f"Bearer {s.reader}"})
    with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(s.cacert))) as response:
        etag = response.headers["ETag"]
    assert s.http("PUT", base, token=s.writer, body={"a": 2}, headers={"If-Match": etag})[0] == 200
    status, body = s.http("PUT", base, token=s.writer, body={"a": 3}, headers={"If-Match": etag})
    assert status == 409 and body["error"] == "Conflict"


def test_publish_effective_values_into_a_configmap(config_server: ConfigServer, kubectl: Kubectl) -> None:
    s = config_server
    _apply(kubectl, {"apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues",
                     "metadata": {"name": "node2-globals", "namespace": s.namespace},
                     "spec": {"environment": "1", "resource": "globals", "level": {"node": "node-2"},
                              "data": {"local": True}, "publish": {"configMap": "node2-globals"}}})
    assert s.http("PUT", f"{P}/environments/1/resources/globals/values", token=s.writer,
                  body={"shared": 1, "local": False})[0] == 200
    facts = reconcile_values(s, kubectl, "node2-globals")
    assert facts["published"]["configMap"] == "node2-globals"
    cm = json.loads(kubectl("get", "configmap", "node2-globals", "-n", s.namespace, "-o", "json").stdout)
    assert json.loads(cm["data"]["values.json"]) == {"local": True, "shared": 1}
    # a change at the root republishes the node's ConfigMap when the root object is reconciled
    assert s.http("PUT", f"{P}/environments/1/resources/globals/values?key=shared", token=s.writer, body=2)[0] == 200
    reconcile_values(s, kubectl, values_name(s, kubectl, "globals", "1", {}))
    cm = json.loads(kubectl("get", "configmap", "node2-globals", "-n", s.namespace, "-o", "json").stdout)
    assert json.loads(cm["data"]["values.json"]) == {"local": True, "shared": 2}


def test_the_crd_schema_refuses_malformed_objects(config_server: ConfigServer, kubectl: Kubectl) -> None:
    bad = {"apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues",
           "metadata": {"name": "bad", "namespace": config_server.namespace},
           "spec": {"environment": "1", "resource": "astute", "kind": "override"}}
    result = kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert result.returncode != 0 and "spec.kind" in result.stderr
