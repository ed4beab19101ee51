"""Existing and Kubernetes substrates: what their actions compile to, what is refused (naming the
field), and runs of an Existing substrate's create over SSH against a real sshd (`tests.sshd`)
through the runtime's run supervision, with the operator's ssh settings (`SshOptions`)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.calm import workflow as wf
from operators.calm.actionrun import HOOKS
from operators.calm.compiler import compile_blueprint
from operators.calm.models import BlueprintSpec, SecretSource
from operators.calm.validation import spec_problems
from operators.runtime.core.pipeline import Observed, StepContext
from operators.runtime.engine.runs import (
    Abort,
    AccountCredentials,
    RunRequest,
    RunSettings,
    SshOptions,
    follow_run,
    paths_for,
)
from operators.runtime.engine.slots import RunSlots
from operators.runtime.serving.metrics import Metrics
from pipelines.control import read_output
from pipelines.model import Workflow
from pipelines.paths import RunPaths
from tests.sshd import SshNodes, available, ssh_nodes_in

ROOT = Path(__file__).resolve().parents[3]
KEY_REF = {"secretRef": {"name": "vm", "key": "id_ed25519"}}
HOSTS_REF = {"secretRef": {"name": "vm", "key": "known_hosts"}}


def existing() -> dict[str, Any]:
    """A package and a service on an Existing machine; one application task on the runner."""
    return {
        "credentials": [{"name": "vm_key", "type": "key", "username": "deploy", "secret": copy.deepcopy(KEY_REF)}],
        "substrates": [{"name": "vm", "type": "Existing", "address": "127.0.0.2", "port": 2222,
                        "credential": "vm_key", "knownHosts": copy.deepcopy(HOSTS_REF),
                        "readiness": {"type": "exec", "script": "test -d /", "retries": 2}}],
        "packages": [{"name": "tools", "install": {"tasks": [
            {"name": "mkdir", "type": "exec", "script": "mkdir -p \"$NODE_DIR/app\""}]}}],
        "services": [{"name": "Web", "actions": [{"name": "create", "tasks": [
            {"name": "hello", "type": "setvar", "variables": ["greeting"],
             "script": "echo greeting=hello-@@{calm_array_index}@@"},
            {"name": "write", "type": "exec", "scriptType": "python",
             "script": "import os\nopen(os.environ['NODE_DIR'] + '/app/web', 'w').write("
                       "'@@{greeting}@@ from @@{address}@@')\nprint('written')"}],
            "edges": [{"from": "hello", "to": "write"}]}]}],
        "deployments": [{"name": "web_tier", "substrate": "vm", "packages": ["tools"], "services": ["Web"]}],
    }


def kubernetes(manifest: str) -> dict[str, Any]:
    return {
        "substrates": [{"name": "pod", "type": "Kubernetes", "manifest": manifest}],
        "services": [{"name": "Echo"}],
        "deployments": [{"name": "echo_tier", "substrate": "pod", "services": ["Echo"]}],
    }


CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: echo-@@{calm_application_name}@@
data:
  greeting: hi
"""


def build(spec_data: dict[str, Any], action: str = "create", namespace: str = "team-a") -> wf.Built:
    assert spec_problems(spec_data) == []
    spec = BlueprintSpec.model_validate(spec_data)
    result = compile_blueprint(spec)
    assert not result.errors
    info = wf.AppInfo(name="shop", uid="u-1", project="p", blueprint_name="bp", blueprint_uid="b-1",
                      namespace=namespace)
    chosen = next(a for a in result.actions if a.name == action and a.level == "Application")
    return wf.build_workflow(spec_data, result.actions, chosen, info, wf.layout(spec))


# --- Existing: the compiled workflow -------------------------------------------------------------


def test_an_existing_substrates_tasks_are_ssh_steps_on_its_replicas() -> None:
    built = build(existing())
    steps = {s["id"]: s for s in built.data["steps"]}
    assert steps["vm.connect"]["type"] == "ssh.exec"  # proves the host key and the login first
    assert steps["vm.readiness"]["type"] == "ssh.exec" and steps["vm.readiness"]["retries"] == 2
    assert steps["vm.readiness"]["parameters"] == {"script": "test -d /", "shell": "sh"}
    assert steps["tools.mkdir"]["type"] == "ssh.exec"
    assert steps["Web.hello"]["type"] == "ssh.setvar"
    assert steps["Web.hello"]["parameters"]["variables"] == ["greeting"]
    write = steps["Web.write"]
    assert write["type"] == "ssh.exec" and write["parameters"]["shell"] == "python"
    assert "from 127.0.0.2" in write["parameters"]["script"]  # known before the run: rendered now
    assert "@@{" in write["parameters"]["script"]  # greeting: set by this action, kept for run time
    assert steps["Web.hello"]["dependsOn"] == ["tools"] and steps["tools.mkdir"]["dependsOn"] == ["vm"]
    for step in built.data["steps"]:
        assert step["target"] == ["web_tier-0"], step["id"]
    assert built.data["targets"]["web_tier-0"] == {
        "calm_array_index": "0", "calm_target": "web_tier-0", "calm_deployment": "web_tier",
        "ssh_address": "127.0.0.2", "ssh_port": "2222", "ssh_user": "deploy"}
    # the key is a secret the caller reads when the runner starts; the known hosts too
    assert built.secrets == {wf.SSH_PRIVATE_KEY: SecretSource.model_validate(KEY_REF)}
    assert built.ssh and [k.model_dump(by_alias=True, exclude_none=True) for k in built.known_hosts] == [HOSTS_REF]
    assert built.scripts_on_runner == ()  # nothing runs on the operator's host
    assert not built.kube_api
    Workflow.model_validate({**built.data, "secrets": {wf.SSH_PRIVATE_KEY: "sealed::k", wf.SSH_KNOWN_HOSTS: "s"}})


def test_the_port_defaults_to_22_and_replicas_share_the_machine() -> None:
    spec = existing()
    del spec["substrates"][0]["port"]
    spec["deployments"][0]["defaultReplicas"] = 2
    spec["deployments"][0]["maxReplicas"] = 2
    built = build(spec)
    for target in ("web_tier-0", "web_tier-1"):
        assert built.data["targets"][target]["ssh_port"] == "22"
        assert built.data["targets"][target]["ssh_address"] == "127.0.0.2"


def test_an_action_without_ssh_steps_reads_no_key() -> None:
    spec = existing()
    spec["actions"] = [{"name": "ping", "tasks": [{"name": "p", "type": "exec", "script": "echo hi"}]}]
    built = build(spec, "ping")
    assert not built.ssh and built.secrets == {} and built.known_hosts == ()
    assert built.data["steps"][0]["type"] == "exec" and built.scripts_on_runner == ("Application",)


def test_an_inline_known_hosts_value_is_accepted() -> None:
    spec = existing()
    spec["substrates"][0]["knownHosts"] = {"value": "[127.0.0.2]:2222 ssh-ed25519 AAAAC3Nza"}
    built = build(spec)
    assert built.known_hosts[0].value == "[127.0.0.2]:2222 ssh-ed25519 AAAAC3Nza"


# --- Existing: refusals, naming the field --------------------------------------------------------


def test_an_existing_substrate_without_known_hosts_is_refused_at_apply_time() -> None:
    spec = existing()
    del spec["substrates"][0]["knownHosts"]
    assert spec_problems(spec) == ["spec.substrates[0].knownHosts: required for a substrate of type Existing"]


def test_known_hosts_takes_exactly_one_source() -> None:
    spec = existing()
    spec["substrates"][0]["knownHosts"] = {"value": "x", **HOSTS_REF}
    problems = spec_problems(spec)
    assert len(problems) == 1 and problems[0].startswith("spec.substrates[0].knownHosts: ")
    assert "exactly one of secretRef, value" in problems[0]
    spec["substrates"][0]["knownHosts"] = {}
    assert "exactly one of secretRef, value" in spec_problems(spec)[0]


def test_a_password_credential_cannot_log_in_over_ssh() -> None:
    spec = existing()
    spec["credentials"][0]["type"] = "password"
    assert spec_problems(spec) == [
        'spec.substrates[0].credential: credential "vm_key" is a password; an Existing substrate logs in over '
        "SSH with a private key only (a credential of type key)"]
    # and the workflow refuses it too, for an app's snapshot that predates the check
    good = existing()
    model = BlueprintSpec.model_validate(good)
    actions = compile_blueprint(model).actions
    info = wf.AppInfo(name="a", uid="u", project="p", blueprint_name="b", blueprint_uid="b")
    create = next(a for a in actions if a.name == "create")
    with pytest.raises(wf.WorkflowError, match=r'spec.substrates\[0\].credential: credential "vm_key" is a password'):
        wf.build_workflow(spec, actions, create, info, wf.layout(model))


def test_existing_substrates_with_different_keys_are_refused() -> None:
    spec = existing()
    spec["credentials"].append({"name": "other_key", "type": "key", "username": "ops",
                                "secret": {"secretRef": {"name": "other", "key": "id"}}})
    spec["substrates"].append({"name": "vm2", "type": "Existing", "address": "127.0.0.3", "credential": "other_key",
                               "knownHosts": copy.deepcopy(HOSTS_REF)})
    spec["deployments"].append({"name": "db_tier", "substrate": "vm2"})
    assert spec_problems(spec) == [
        'spec.substrates[1].credential: credential "other_key" holds another key than credential "vm_key" of '
        'substrate "vm"; the Existing substrates of one blueprint log in with one private key (their usernames '
        "may differ)"]
    spec["credentials"][1]["secret"] = copy.deepcopy(KEY_REF)  # the same key, another user: fine
    built = build(spec)
    assert built.data["targets"]["db_tier-0"]["ssh_user"] == "ops"
    assert built.data["targets"]["web_tier-0"]["ssh_user"] == "deploy"
    assert len(built.known_hosts) == 2


def test_an_address_only_known_during_the_run_is_refused() -> None:
    spec = existing()
    spec["variables"] = [{"name": "ip", "type": "string"}]
    spec["actions"] = [{"name": "create", "tasks": [
        {"name": "pick", "type": "setvar", "variables": ["ip"], "script": "echo ip=127.0.0.2"}]}]
    spec["substrates"][0]["address"] = "@@{ip}@@"
    model = BlueprintSpec.model_validate(spec)
    result = compile_blueprint(model)
    create = next(a for a in result.actions if a.name == "create")
    info = wf.AppInfo(name="a", uid="u", project="p", blueprint_name="b", blueprint_uid="b")
    if not any(t.target == "vm" for t in create.tasks):
        pytest.skip("the edited create does not reach the substrate")
    with pytest.raises(wf.WorkflowError, match=r"spec.substrates\[0\].address: .* must be known before the run"):
        wf.build_workflow(spec, result.actions, create, info, wf.layout(model))


# --- Kubernetes ---------------------------------------------------------------------------------


def test_a_kubernetes_substrate_applies_and_deletes_its_manifest_in_the_apps_namespace() -> None:
    created = build(kubernetes(CONFIGMAP), "create")
    (apply,) = [s for s in created.data["steps"] if s["id"] == "pod.apply"]
    assert apply["type"] == "kubernetes" and apply["timeoutSeconds"] == wf.KUBERNETES_TIMEOUT
    assert apply["parameters"]["action"] == "apply" and apply["parameters"]["namespace"] == "team-a"
    assert "name: echo-shop" in apply["parameters"]["manifest"]  # rendered before the run
    assert created.kube_api and not created.ssh and created.scripts_on_runner == ()
    deleted = build(kubernetes(CONFIGMAP), "delete")
    (remove,) = [s for s in deleted.data["steps"] if s["id"] == "pod.remove"]
    assert remove["type"] == "kubernetes" and remove["parameters"]["action"] == "delete"
    assert remove["parameters"]["namespace"] == "team-a" and deleted.kube_api


@pytest.mark.parametrize(("manifest", "message"), [
    (CONFIGMAP.replace("  name:", "  namespace: kube-system\n  name:"),
     "ConfigMap echo-shop: names namespace kube-system; a Kubernetes substrate creates objects in the App's "
     "namespace team-a only"),
    ("apiVersion: v1\nkind: Namespace\nmetadata: {name: mine}\n",
     "Namespace mine: Namespace is a cluster-scoped kind; a Kubernetes substrate creates objects in the App's "
     "namespace team-a only"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: 'ns-@@{calm_time(\"%s\")}@@'}\n",
     "ConfigMap a: its kind and namespace must be known before the run (not read from a macro)"),
    (CONFIGMAP + "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: root}\n",
     "ClusterRole root: ClusterRole is a cluster-scoped kind"),
])
def test_a_manifest_outside_the_apps_namespace_is_refused_naming_the_object(manifest: str, message: str) -> None:
    spec = kubernetes(manifest)
    model = BlueprintSpec.model_validate(spec)
    result = compile_blueprint(model)
    create = next(a for a in result.actions if a.name == "create")
    info = wf.AppInfo(name="shop", uid="u", project="p", blueprint_name="b", blueprint_uid="b", namespace="team-a")
    with pytest.raises(wf.WorkflowError) as error:
        wf.build_workflow(spec, result.actions, create, info, wf.layout(model))
    assert str(error.value).startswith("spec.substrates[0].manifest: ")
    assert message in str(error.value)


def test_the_manifest_check_reads_kept_macros_as_placeholders() -> None:
    assert wf.manifest_problem("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '@@{x}@@'}\n", "ns") is None
    assert wf.manifest_problem("kind: Secret\nmetadata: {name: s, namespace: ns}\n", "ns") is None
    assert wf.manifest_problem("- a\n- b\n", "ns") == "document 0 of the manifest is not an object"


# --- the operator's ssh settings -----------------------------------------------------------------


def test_ssh_options_become_the_runners_flags() -> None:
    assert SshOptions().runner_args() == []
    options = SshOptions(allow=("127.0.0.0/8", "10.0.0.0/8"), files_root=Path("/srv/files"),
                         reboot_command="touch /rebooted", connect_timeout=5)
    assert options.runner_args() == [
        "--ssh-allow", "127.0.0.0/8", "--ssh-allow", "10.0.0.0/8", "--ssh-files-root", "/srv/files",
        "--ssh-reboot-command", "touch /rebooted", "--ssh-connect-timeout", "5"]
    assert RunSettings(state_dir=Path("/x")).ssh == SshOptions()


# --- real runs over SSH ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNodes]:
    why = available()
    if why is not None:
        pytest.skip(why)
    with ssh_nodes_in(tmp_path_factory.mktemp("sshd")) as running:
        yield running


@dataclass
class Services:
    runs: RunSettings
    kube: Any = None
    metrics: Metrics = field(default_factory=Metrics)
    run_slots: RunSlots = field(default_factory=lambda: RunSlots(4))


@dataclass
class Observer:
    patches: list[Mapping[str, Any]] = field(default_factory=list)

    async def abort(self) -> Abort | None:
        return None

    def progress_patch(self, status: Mapping[str, Any], progress: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"steps": [(s.get("step"), s.get("state"), s.get("message")) for s in status.get("steps") or []]}

    def queue_patch(self, waiting: str | None) -> Mapping[str, Any]:
        return {"queued": waiting}

    async def write(self, patch: Mapping[str, Any]) -> None:
        self.patches.append(patch)


def run_create(tmp_path: Path, nodes: SshNodes, known_hosts: str, uid: str,
               ssh: SshOptions) -> tuple[Any, wf.Built, RunPaths]:
    """The create action of `existing()` on node 127.0.0.2, supervised as an ActionRun's is."""
    spec = existing()
    spec["credentials"][0]["username"] = nodes.user
    spec["substrates"][0]["port"] = nodes.port
    built = build(spec)
    obj = Observed(kind="ActionRun", namespace="team-a", name="r", uid=uid, generation=1, labels={}, spec={},
                   status={})
    ctx = StepContext(obj=obj, facts={}, services=Services(RunSettings.beside(tmp_path / "store", ssh=ssh)))
    asked: list[str] = []

    async def key(account: AccountCredentials) -> str:  # stands for a vault value: no token needed
        asked.append("key")
        return nodes.private_key

    async def hosts(account: AccountCredentials) -> str:
        return known_hosts

    paths = paths_for(ctx)
    request = RunRequest(paths, built.data, hooks=HOOKS, scripts_on_runner=built.scripts_on_runner,
                         secrets={wf.SSH_PRIVATE_KEY: key, wf.SSH_KNOWN_HOSTS: hosts})
    followed = asyncio.run(follow_run(ctx, request, Observer()))
    assert asked == ["key"]
    return followed, built, paths


def secret_free(nodes: SshNodes, *texts: str) -> None:
    body = "".join(nodes.private_key.strip().splitlines()[1:-1])
    for text in texts:
        assert nodes.private_key.strip() not in text
        assert body[:40] not in text.replace("\n", "")


def test_create_runs_over_ssh_on_the_existing_machine(tmp_path: Path, nodes: SshNodes) -> None:
    followed, _, paths = run_create(tmp_path, nodes, nodes.known_hosts, "uid-ssh-ok",
                                    SshOptions(allow=("127.0.0.0/8",)))
    assert followed.status["phase"] == "Succeeded", followed.status
    node = nodes.node("127.0.0.2")
    assert (node.dir / "app" / "web").read_text() == "hello-0 from 127.0.0.2"
    assert not (nodes.node("127.0.0.3").dir / "app").exists()
    by_step = {s["step"]: s for s in followed.status["steps"]}
    assert by_step["Web.hello"]["variables"] == {"greeting": "hello-0"}
    assert "connected to" in read_output(paths, "vm.connect", "web_tier-0")
    outputs = [str(followed.status), (paths.run_dir / "workflow.json").read_text(),
               *(read_output(paths, step, "web_tier-0") for step in by_step)]
    secret_free(nodes, *outputs)


def test_without_ssh_allow_loopback_is_refused(tmp_path: Path, nodes: SshNodes) -> None:
    followed, _, _ = run_create(tmp_path, nodes, nodes.known_hosts, "uid-ssh-egress", SshOptions())
    assert followed.status["phase"] == "Failed"
    failed = [s for s in followed.status["steps"] if s["state"] == "failure"]
    assert failed and failed[0]["step"] == "vm.connect"
    assert "127.0.0.2" in failed[0]["message"], failed[0]["message"]


def test_an_unknown_host_key_fails_the_run_with_its_fingerprint(tmp_path: Path, nodes: SshNodes) -> None:
    others = "".join(n.host_key_line + "\n" for n in nodes.nodes if n.address != "127.0.0.2")
    (nodes.node("127.0.0.2").dir / "app" / "web").unlink(missing_ok=True)
    followed, _, _ = run_create(tmp_path, nodes, others, "uid-ssh-unknown", SshOptions(allow=("127.0.0.0/8",)))
    assert followed.status["phase"] == "Failed"
    failed = [s for s in followed.status["steps"] if s["state"] == "failure"]
    assert failed[0]["step"] == "vm.connect"
    message = failed[0]["message"]
    assert "presented a host key that ssh_known_hosts does not list" in message and "SHA256:" in message
    assert not (nodes.node("127.0.0.2").dir / "app" / "web").exists()
    secret_free(nodes, str(followed.status))


def test_stead_operator_passes_its_ssh_flags_to_every_runner(tmp_path: Path) -> None:
    from operators.cli import _parser, canonical_argv
    from operators.cli.operator import ssh_options

    for noun in ("operator", "run"):  # `stead run` is the operator's first spelling
        words = canonical_argv([noun, "--ssh-allow", "127.0.0.0/8", "--ssh-allow", "10.1.2.3",
                                "--ssh-files-root", str(tmp_path), "--ssh-reboot-command", "touch /rebooted"])
        options = ssh_options(_parser(words).parse_args(words))
        assert options == SshOptions(allow=("127.0.0.0/8", "10.1.2.3/32"), files_root=tmp_path.resolve(),
                                     reboot_command="touch /rebooted")
    words = canonical_argv(["operator"])
    assert ssh_options(_parser(words).parse_args(words)) == SshOptions()
    for wrong in (["--ssh-allow", "not-a-network"], ["--ssh-files-root", str(tmp_path / "missing")]):
        words = canonical_argv(["operator", *wrong])
        with pytest.raises(SystemExit):
            _parser(words).parse_args(words)


def test_the_example_runs_its_tasks_on_the_machine() -> None:
    spec = yaml.safe_load((ROOT / "examples" / "blueprint-existing-vm.yaml").read_text())["spec"]
    created, deleted = build(spec, "create"), build(spec, "delete")
    assert {s["type"] for s in created.data["steps"]} == {"noop", "ssh.exec", "ssh.setvar"}
    assert {s["type"] for s in deleted.data["steps"]} == {"noop", "ssh.exec"}
    assert created.scripts_on_runner == deleted.scripts_on_runner == ()
    assert created.data["targets"]["web_tier-0"]["ssh_user"] == "deploy"
