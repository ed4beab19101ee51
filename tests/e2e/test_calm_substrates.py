"""Calm's Existing and Kubernetes substrates end to end: the real API server, the session's operator
(started with `--ssh-allow 127.0.0.0/8`) and real sshd nodes on 127.0.0.2-4 (`tests.sshd`).

An App whose blueprint has an Existing substrate runs its create action over SSH: the side effect
is on that node (a file under its NODE_DIR), and the private key (from a Secret) is nowhere in the
objects, their Events or the operator's log. A node whose host key is not in the known hosts fails
the run, naming the key's fingerprint. A Kubernetes substrate applies its manifest in the App's
namespace as the namespace's service account and deletes it with the App.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.tenant_accounts import grant_secret
from tests.e2e.test_apps import app, apply, blueprint, get, run_state
from tests.sshd import SshNodes, ssh_nodes  # noqa: F401  (the module-scoped fixture)

NODE = "127.0.0.2"


def key_secret(kubectl: Kubectl, namespace: str, nodes: SshNodes, known_hosts: str) -> None:
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vm", "namespace": namespace},
            "type": "Opaque", "stringData": {"id_ed25519": nodes.private_key, "known_hosts": known_hosts}}
    apply(kubectl, body)
    grant_secret(kubectl, namespace, "vm")  # runs read it as the namespace's service account


def existing_spec(nodes: SshNodes, marker: str) -> dict[str, Any]:
    """A package and a service on the machine at 127.0.0.2: a directory, a setvar, a file."""
    return {
        "credentials": [{"name": "vm_key", "type": "key", "username": nodes.user,
                         "secret": {"secretRef": {"name": "vm", "key": "id_ed25519"}}}],
        "substrates": [{"name": "vm", "type": "Existing", "address": NODE, "port": nodes.port,
                        "credential": "vm_key",
                        "knownHosts": {"secretRef": {"name": "vm", "key": "known_hosts"}}}],
        "packages": [{"name": "tools", "install": {"tasks": [
            {"name": "mkdir", "type": "exec", "script": f"mkdir -p \"$NODE_DIR/{marker}\""}]}}],
        "services": [{"name": "Web", "actions": [{"name": "create", "tasks": [
            {"name": "hello", "type": "setvar", "variables": ["greeting"],
             "script": "echo greeting=hello-from-node"},
            {"name": "write", "type": "exec",
             "script": f"echo '@@{{greeting}}@@ @@{{calm_application_name}}@@' > \"$NODE_DIR/{marker}/web\"; "
                       "echo wrote the file"}],
            "edges": [{"from": "hello", "to": "write"}]}]}],
        "deployments": [{"name": "web_tier", "substrate": "vm", "packages": ["tools"], "services": ["Web"]}],
    }


def key_body(nodes: SshNodes) -> str:
    """A piece of the private key's base64 body: what a leak would show."""
    return "".join(nodes.private_key.strip().splitlines()[1:-1])[20:60]


def test_existing_substrate_create_runs_over_ssh_on_the_machine(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, ssh_nodes: SshNodes  # noqa: F811
) -> None:
    key_secret(kubectl, namespace, ssh_nodes, ssh_nodes.known_hosts)
    apply(kubectl, blueprint("vm", namespace, existing_spec(ssh_nodes, namespace)))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/vm")
    apply(kubectl, app("site", namespace, "vm"))
    run = run_state(kubectl, namespace, "site-create", "Succeeded", "Failed", seconds=60)
    assert run["state"] == "Succeeded", run
    written = ssh_nodes.node(NODE).dir / namespace / "web"
    assert written.read_text() == "hello-from-node site\n"
    for other in ("127.0.0.3", "127.0.0.4"):
        assert not (ssh_nodes.node(other).dir / namespace).exists()
    tasks = {t["task"]: t for t in run["runLog"]}
    assert tasks["vm/connect"]["state"] == "success" and tasks["vm/connect"]["type"] == "ssh.exec"
    assert tasks["Web/hello"]["type"] == "ssh.setvar"
    assert "wrote the file" in tasks["Web/write"]["replicas"][0]["output"]
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "app/site")
    status = get(kubectl, "app", "site", namespace)["status"]
    replica = status["entities"]["deployments"][0]["replicas"][0]
    assert replica["properties"]["Service_Web_greeting"] == "hello-from-node"
    # the key is nowhere: objects, Events, the operator's log
    everything = kubectl("get", "apps,actionruns,blueprints,events", "-n", namespace, "-o", "yaml").stdout
    piece = key_body(ssh_nodes)
    assert piece not in everything and "PRIVATE KEY" not in everything
    assert piece not in operator.log_path.read_text()


def test_an_unknown_host_key_fails_the_run_with_its_fingerprint(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, ssh_nodes: SshNodes  # noqa: F811
) -> None:
    others = "".join(n.host_key_line + "\n" for n in ssh_nodes.nodes if n.address != NODE)
    key_secret(kubectl, namespace, ssh_nodes, others)
    apply(kubectl, blueprint("vm", namespace, existing_spec(ssh_nodes, namespace)))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/vm")
    apply(kubectl, app("site", namespace, "vm"))
    run = run_state(kubectl, namespace, "site-create", "Succeeded", "Failed", seconds=60)
    assert run["state"] == "Failed", run
    assert run["failedTask"] == "vm/connect@web_tier-0"
    assert "presented a host key that ssh_known_hosts does not list" in run["reason"]
    assert "SHA256:" in run["reason"], run["reason"]
    assert not (ssh_nodes.node(NODE).dir / namespace).exists()
    events = kubectl("get", "events", "-n", namespace, "-o", "yaml").stdout
    assert key_body(ssh_nodes) not in events + json.dumps(run)


def test_an_existing_substrate_without_known_hosts_is_refused_at_apply_time(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, ssh_nodes: SshNodes  # noqa: F811
) -> None:
    spec = existing_spec(ssh_nodes, namespace)
    del spec["substrates"][0]["knownHosts"]
    refused = apply(kubectl, blueprint("vm", namespace, spec), check=False)
    assert refused.returncode != 0
    assert "spec.substrates[0].knownHosts: required for a substrate of type Existing" in refused.stderr


CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: echo-@@{calm_application_name}@@
data:
  app: "@@{calm_application_name}@@"
"""


def kubernetes_spec(manifest: str) -> dict[str, Any]:
    return {
        "substrates": [{"name": "pod", "type": "Kubernetes", "manifest": manifest}],
        "services": [{"name": "Echo"}],
        "deployments": [{"name": "echo_tier", "substrate": "pod", "services": ["Echo"]}],
    }


def runner_role(kubectl: Kubectl, namespace: str) -> None:
    """What the namespace's service account may do: the runner applies the manifest with its token."""
    # made by the controller manager, which may lag behind a busy session: one or the other creates it
    kubectl("create", "serviceaccount", "default", "-n", namespace, check=False)
    wait_until(lambda: kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
               30, "the namespace's default service account")
    kubectl("create", "role", "stead-runner", "-n", namespace, "--verb=get,list,create,patch,update,delete",
            "--resource=configmaps")
    kubectl("create", "rolebinding", "stead-runner", "-n", namespace, "--role=stead-runner",
            f"--serviceaccount={namespace}:default")


def test_kubernetes_substrate_applies_its_manifest_in_the_namespace_and_deletes_it(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    runner_role(kubectl, namespace)
    apply(kubectl, blueprint("echo", namespace, kubernetes_spec(CONFIGMAP)))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/echo")
    apply(kubectl, app("web", namespace, "echo"))
    run = run_state(kubectl, namespace, "web-create", "Succeeded", "Failed", seconds=60)
    assert run["state"] == "Succeeded", run
    made = get(kubectl, "configmap", "echo-web", namespace)
    assert made["data"] == {"app": "web"}
    tasks = {t["task"]: t for t in run["runLog"]}
    assert tasks["pod/apply"]["type"] == "kubernetes" and tasks["pod/apply"]["state"] == "success"
    kubectl("delete", "app", "web", "-n", namespace, "--timeout=60s")  # runs the delete action first
    assert kubectl("get", "configmap", "echo-web", "-n", namespace, check=False).returncode != 0


def test_kubernetes_substrate_naming_another_namespace_fails_the_run(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str
) -> None:
    manifest = CONFIGMAP.replace("  name:", "  namespace: kube-system\n  name:")
    apply(kubectl, blueprint("echo", namespace, kubernetes_spec(manifest)))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/echo")
    apply(kubectl, app("web", namespace, "echo"))
    run = run_state(kubectl, namespace, "web-create", "Succeeded", "Failed", seconds=60)
    assert run["state"] == "Failed"
    assert "ConfigMap echo-web: names namespace kube-system" in run["reason"], run["reason"]
    assert kubectl("get", "configmap", "echo-web", "-n", "kube-system", check=False).returncode != 0
