"""Deployment graphs end to end: DeploymentGraphs and GraphRuns through kubectl, executed by the real
operator on three real sshd nodes (127.0.0.2-4, tests/sshd.py), side effects read on the nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from pipelines.control import read_status, run_paths
from tests.e2e.conftest import ROOT, STEAD, Kubectl, OperatorProcess, api_call, wait_until
from tests.e2e.test_apps import apply, get
from tests.sshd import SshNodes, ssh_nodes  # noqa: F401  (the module's sshd nodes)

API = "stead.dev/v1alpha1"
NODES = {"ctl": "127.0.0.2", "cmp-1": "127.0.0.3", "cmp-2": "127.0.0.4"}


def graph(name: str, namespace: str, tasks: list[dict[str, Any]], **owner: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "DeploymentGraph", "metadata": {"name": name, "namespace": namespace},
            "spec": {**owner, "tasks": tasks}}


def graph_run(name: str, namespace: str, *graphs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "GraphRun", "metadata": {"name": name, "namespace": namespace},
            "spec": {"environment": "env", "graphs": list(graphs) or [{"type": "default"}], **spec}}


def shell(task_id: str, roles: list[str], cmd: str, **more: Any) -> dict[str, Any]:
    return {"id": task_id, "type": "shell", "version": "2.1.0", "roles": roles, "parameters": {"cmd": cmd}, **more}


def finished(kubectl: Kubectl, namespace: str, name: str, seconds: float = 90) -> dict[str, Any]:
    def over() -> dict[str, Any] | None:
        status: dict[str, Any] = get(kubectl, "graphrun", name, namespace).get("status") or {}
        return status if status.get("state") in ("Succeeded", "Failed", "Aborted") else None
    result: dict[str, Any] = wait_until(over, seconds, f"GraphRun {name} to end")
    return result


def states(status: dict[str, Any]) -> dict[str, str]:
    return {f"{t['task']}@{n['name']}": t["state"] for n in status.get("nodes") or [] for t in n["tasks"]}


@pytest.fixture(scope="module")
def environment(kubectl: Kubectl, ssh_nodes: SshNodes, tmp_path_factory: pytest.TempPathFactory,  # noqa: F811
                operator: OperatorProcess) -> tuple[str, Path]:
    """A namespace with an Environment of three nodes reachable over SSH, and the file tasks append to."""
    namespace = "t-graphs"
    kubectl("create", "namespace", namespace, check=False)
    order = tmp_path_factory.mktemp("graph-order") / "order.log"
    order.touch()
    order.chmod(0o666)
    for name, data in (("nodes-key", {"id_ed25519": ssh_nodes.private_key}),
                       ("nodes-hosts", {"known_hosts": ssh_nodes.known_hosts})):
        apply(kubectl, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                        "stringData": data})
    # the run reads them as the namespace's service account: the namespace grants it that, nothing more
    apply(kubectl, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "graph-secrets", "namespace": namespace},
                    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                               "resourceNames": ["nodes-key", "nodes-hosts"]}]})
    apply(kubectl, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "graph-secrets", "namespace": namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "graph-secrets"},
                    "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]})
    roles = {"ctl": ["controller"], "cmp-1": ["compute"], "cmp-2": ["compute"]}
    apply(kubectl, {"apiVersion": API, "kind": "Environment", "metadata": {"name": "env", "namespace": namespace},
                    "spec": {"release": "r1", "nodes": [{"name": n, "roles": roles[n], "address": a}
                                                        for n, a in NODES.items()],
                             "ssh": {"user": ssh_nodes.user, "port": ssh_nodes.port,
                                     "privateKey": {"name": "nodes-key", "key": "id_ed25519"},
                                     "knownHosts": {"name": "nodes-hosts", "key": "known_hosts"}}}})
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "environment/env")
    return namespace, order


def test_release_and_environment_graphs_merge_and_run_in_the_planned_order(
        kubectl: Kubectl, environment: tuple[str, Path]) -> None:
    namespace, order = environment
    note = f'echo "at {{}} $(basename $NODE_DIR)" >> {order}'
    apply(kubectl, graph("r1-default", namespace, [
        shell("db", ["controller"], note.format("db")),
        shell("app", ["compute"], note.format("app"), **{"crossDepends": [{"name": "db", "role": ["controller"]}]}),
        shell("report", ["*"], note.format("release-report")),
    ], release="r1"))
    # the environment's graph replaces `report` whole (Fuel's merge) and orders it after every app
    apply(kubectl, graph("env-default", namespace, [
        shell("report", ["*"], note.format("report"), **{"crossDepends": [{"name": "app", "role": ["compute"]}]}),
    ], environment="env"))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s",
            "deploymentgraph/r1-default", "deploymentgraph/env-default")
    apply(kubectl, graph_run("first", namespace))
    status = finished(kubectl, namespace, "first")
    assert status["state"] == "Succeeded", status
    assert status["progress"] == "6/6" and status["plan"]["planned"] == 6
    lines = [line.split()[1:] for line in order.read_text().splitlines()]
    tasks = [task for task, _ in lines]
    assert tasks[0] == "db" and sorted(tasks[1:3]) == ["app", "app"] and tasks[3:] == ["report"] * 3, lines
    assert {node for task, node in lines if task == "app"} == {NODES["cmp-1"], NODES["cmp-2"]}
    assert states(status) == {f"{t}@{n}": "success" for t, ns in
                              (("db", ["ctl"]), ("app", ["cmp-1", "cmp-2"]), ("report", list(NODES))) for n in ns}
    second = apply(kubectl, graph("r1-default-again", namespace, [shell("x", ["*"], "true")], release="r1"),
                   check=False)
    assert second.returncode != 0 and "DeploymentGraph r1-default is the 'default' graph of release/r1" in \
        second.stderr


def test_a_failing_task_fails_the_run_naming_it_and_a_subset_runs_only_its_nodes(
        kubectl: Kubectl, environment: tuple[str, Path]) -> None:
    namespace, order = environment
    apply(kubectl, graph("r1-fails", namespace, [
        shell("boom", ["compute"], "echo about to fail; exit 3"),
    ], release="r1", type="fails"))
    apply(kubectl, graph_run("failing", namespace, {"type": "fails", "nodes": ["cmp-2"]}))
    status = finished(kubectl, namespace, "failing")
    assert status["state"] == "Failed" and status["failedTask"] == "boom@cmp-2", status
    assert "3" in status["reason"]
    assert states(status) == {"boom@cmp-1": "skipped", "boom@cmp-2": "failure"}
    events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    assert any(e["involvedObject"]["name"] == "failing" and "boom@cmp-2" in e["message"] for e in events)
    before = order.read_text()
    apply(kubectl, graph_run("only-app", namespace, {"type": "default", "nodes": ["cmp-1"], "tasks": ["app"]}))
    status = finished(kubectl, namespace, "only-app")
    assert status["state"] == "Succeeded", status
    added = order.read_text()[len(before):].split("\n")
    assert [line.split()[1:] for line in added if line] == [["app", NODES["cmp-1"]]]
    assert status["plan"]["outsideSubset"] >= 1  # app@cmp-1 waits for db@ctl: outside the subset, satisfied


def test_one_run_at_a_time_abort_and_a_dry_run_that_touches_nothing(kubectl: Kubectl,
                                                                     environment: tuple[str, Path]) -> None:
    namespace, order = environment
    marker = f"sleep 60.{uuid.uuid4().int % 10**6:06d}"  # the script travels on stdin: its sleep's command line
    apply(kubectl, graph("r1-slow", namespace, [shell("wait", ["controller"], marker)], release="r1", type="slow"))
    apply(kubectl, graph_run("slow", namespace, {"type": "slow"}))
    wait_until(lambda: (get(kubectl, "graphrun", "slow", namespace).get("status") or {}).get("state") == "Running",
               60, "the slow run running")
    refused = apply(kubectl, graph_run("second", namespace), check=False)
    assert refused.returncode != 0 and "GraphRun slow runs on environment env" in refused.stderr
    wait_until(lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0, 30,
               "the slow task running on its node")
    kubectl("patch", "graphrun", "slow", "-n", namespace, "--type=merge", "-p", '{"spec": {"abort": true}}')
    status = finished(kubectl, namespace, "slow", seconds=60)
    assert status["state"] == "Aborted", status
    # spec.abort stops running tasks (it does not let them finish): the task is aborted, its process gone
    assert states(status) == {"wait@ctl": "aborted"}, status
    wait_until(lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1, 10,
               "the aborted task's process on the node ended")
    before = order.read_text()
    apply(kubectl, graph_run("plan-only", namespace, dryRun=True))
    status = finished(kubectl, namespace, "plan-only")
    assert status["state"] == "Succeeded" and status["plan"]["planned"] == 6
    assert set(states(status).values()) == {"planned"} and order.read_text() == before


def test_a_tasks_whole_output_is_read_through_the_api_and_the_cli(
        kubectl: Kubectl, environment: tuple[str, Path], operator: OperatorProcess, tmp_path: Path) -> None:
    """The status keeps a failure's tail only; `stead graph logs` reads every byte from the operator's API, as
    its caller may (RBAC: get graphruns in the namespace)."""
    from tests.e2e.test_config_api import client_certificate

    namespace, _ = environment
    apply(kubectl, graph("r1-talk", namespace, [
        shell("talk", ["compute"], "seq 1 4000"),
        shell("fail", ["controller"], "seq 1 3000; exit 4"),
    ], release="r1", type="talk"))
    apply(kubectl, graph_run("talking", namespace, {"type": "talk"}))
    status = finished(kubectl, namespace, "talking")
    assert status["state"] == "Failed" and status["failedTask"] == "fail@ctl", status
    tail = next(t["output"] for n in status["nodes"] for t in n["tasks"] if t["task"] == "fail")
    whole_fail = "".join(f"{i}\n" for i in range(1, 3001))
    assert len(tail) < len(whole_fail) and whole_fail.rstrip("\n").endswith(tail.rstrip("\n")[-100:])

    env = {**os.environ, "STEAD_CONFIG_URL": f"https://127.0.0.1:{operator.config_api_port}",
           "STEAD_CONFIG_CACERT": str(operator.store.parent / "config-api" / "ca.crt")}
    env.pop("STEAD_CONFIG_TOKEN", None)

    def logs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(STEAD), "graph", "logs", "talking", "-n", namespace, "--kubeconfig",
                               str(operator.cluster.kubeconfig), *args], capture_output=True, text=True,
                              timeout=60, env=env)

    shown = logs("--task", "fail")
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    assert shown.stdout == whole_fail  # every line, not the status' tail
    shown = logs("--task", "talk", "--node", "cmp-2")
    assert shown.returncode == 0 and shown.stdout == "".join(f"{i}\n" for i in range(1, 4001))
    shown = logs()
    assert shown.returncode == 0
    assert sorted(line for line in shown.stdout.splitlines() if line.startswith("==>")) == [
        "==> fail@ctl (talk) <==", "==> talk@cmp-1 (talk) <==", "==> talk@cmp-2 (talk) <=="]
    shown = logs("--task", "talk")
    assert shown.returncode == 0 and shown.stdout.count("==> talk@") == 2
    missing = logs("--task", "nope", "--node", "ctl")
    assert missing.returncode == 1 and "no task instances for node ctl task nope" in missing.stderr

    # through the API: paged, and only for who may get the run
    admin = client_certificate(operator.cluster, tmp_path, "graph-admin", ("system:masters",))
    path = "/api/v1/graphruns/talking/output/talk/"
    code, page = api_call(operator, admin, namespace, "GET", path, query="node=cmp-1&limit=1000")
    assert code == 200 and page["truncated"] and page["next_offset"] == 1000 and page["size"] > 1000
    assert page["output"].startswith("1\n2\n") and "truncated at 1000 bytes" in page["message"]
    nobody = client_certificate(operator.cluster, tmp_path, "graph-nobody")
    code, refused = api_call(operator, nobody, namespace, "GET", path, query="node=cmp-1")
    assert code == 403 and 'may not get graphruns in namespace "t-graphs"' in refused["message"]
    code, refused = api_call(operator, admin, namespace, "GET", "/api/v1/graphruns/talking/output/talk/",
                             query="node=..%2F..%2Fkube-credentials")
    assert code == 400 and "node" in refused["message"]


def test_a_runner_killed_mid_run_resumes_without_repeating_finished_tasks(
        kubectl: Kubectl, environment: tuple[str, Path], operator: OperatorProcess) -> None:
    namespace, order = environment
    gate = order.with_name("resume.gate")
    note = f'echo "at {{}} $(basename $NODE_DIR)" >> {order}'
    apply(kubectl, graph("r1-resume", namespace, [
        shell("first", ["controller"], note.format("first")),
        shell("last", ["controller"], f'while [ ! -e {gate} ]; do sleep 0.1; done; ' + note.format("last"),
              requires=["first"]),
    ], release="r1", type="resume"))
    apply(kubectl, graph_run("resumed", namespace, {"type": "resume"}))
    uid = get(kubectl, "graphrun", "resumed", namespace)["metadata"]["uid"]
    paths = run_paths(operator.store.with_name(operator.store.name + "-runs"), uid)

    def first_recorded() -> bool:
        steps = (read_status(paths) or {}).get("steps") or []
        return any(":first:" in str(s.get("step")) and s.get("state") == "success" for s in steps)

    wait_until(first_recorded, 60, "the first task, recorded", interval=0.1)
    pid = int(wait_until(lambda: paths.lock_file.exists() and paths.lock_file.read_text().strip(), 10,
                         "the runner's pid"))
    os.kill(pid, signal.SIGKILL)
    # the killed runner's remote `last` (waiting for the gate) goes when sshd sees its connection
    # drop and hangs the session up; opened before that, the gate would let it finish too
    wait_until(lambda: subprocess.run(["pgrep", "-f", f"! -e {gate}"], capture_output=True).returncode == 1, 15,
               "the killed runner's remote task gone", interval=0.1)
    gate.touch()
    status = finished(kubectl, namespace, "resumed")
    assert status["state"] == "Succeeded" and status["runnerStarts"] == 2, status
    runs = [line.split()[1] for line in order.read_text().splitlines() if line.split()[1] in ("first", "last")]
    # The first task was not run again. `last` may be twice: the killed runner's copy of it can outlive
    # its ssh session and finish too (no pty, no hang-up): that a task never runs twice at once on a
    # node is issue 26, whose test holds a slow task across a runner's restart.
    assert runs[0] == "first" and runs.count("first") == 1 and "last" in runs, runs


def test_the_example_plans_as_a_dry_run(kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "graph-environment.yaml"))
    status = finished(kubectl, namespace, "plan-1")
    assert status["state"] == "Succeeded" and status["plan"]["planned"] == 3, status
    assert states(status)["compute-service@node-2"] == "planned"


def test_the_environment_keeps_its_merged_graph_current_and_runs_plan_from_it(
        kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    """The merge is kept per type and re-made when a graph or the environment changes (or a graph goes):
    `kubectl get env` shows it; a run plans from it."""
    def env(plugins: list[str]) -> dict[str, Any]:
        return {"apiVersion": API, "kind": "Environment", "metadata": {"name": "env", "namespace": namespace},
                "spec": {"release": "r1", "plugins": plugins,
                         "nodes": [{"name": "ctl", "roles": ["controller"], "address": "127.0.0.2"}]}}

    def summary_becomes(predicate: Any, what: str) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            status: dict[str, Any] = get(kubectl, "environment", "env", namespace).get("status") or {}
            return status if predicate(str(status.get("graphSummary"))) else None
        found: dict[str, Any] = wait_until(check, 30, what)
        return found

    apply(kubectl, env([]))
    apply(kubectl, graph("rel", namespace, [shell("db", ["*"], "true"), shell("app", ["*"], "true")], release="r1"))
    first = summary_becomes(lambda s: s.startswith("default:2@"), "the release's graph merged")
    apply(kubectl, graph("own", namespace, [shell("app", ["*"], "echo mine"), shell("report", ["*"], "true")],
                         environment="env"))
    second = summary_becomes(lambda s: s.startswith("default:3@"), "the environment's graph merged in")
    assert first["graphs"][0]["digest"] != second["graphs"][0]["digest"]
    columns = kubectl("get", "environment", "env", "-n", namespace).stdout
    assert "GRAPHS" in columns and second["graphSummary"] in columns

    # the environment changes: a plugin it now enables brings its graph in
    apply(kubectl, graph("lma", namespace, [shell("collect", ["*"], "true")], plugin="lma"))
    apply(kubectl, env(["lma"]))
    summary_becomes(lambda s: s.startswith("default:4@"), "the enabled plugin's graph merged in")
    apply(kubectl, graph("ceph", namespace, [shell("collect", ["*"], "true")], plugin="ceph"))
    apply(kubectl, env(["lma", "ceph"]))
    failed = summary_becomes(lambda s: s == "default:error", "two plugins defining one task")
    merged = next(c for c in failed["conditions"] if c["type"] == "GraphsMerged")
    assert merged["status"] == "False" and "plugins 'lma' and 'ceph' both define task 'collect'" in merged["message"]
    assert next(c for c in failed["conditions"] if c["type"] == "Ready")["status"] == "True"
    apply(kubectl, env(["lma"]))
    summary_becomes(lambda s: s.startswith("default:4@"), "back to one plugin")
    kubectl("delete", "deploymentgraph", "own", "-n", namespace)
    kept = summary_becomes(lambda s: s.startswith("default:3@"), "the deleted graph's tasks gone")
    assert [t["type"] for t in kept["graphs"]] == ["default"]

    # a run plans from the kept merge (the operator says which it used)
    before = operator.log_path.read_text()
    apply(kubectl, graph_run("planned", namespace, dryRun=True))
    status = finished(kubectl, namespace, "planned")
    assert status["state"] == "Succeeded" and states(status) == {
        "db@ctl": "planned", "app@ctl": "planned", "collect@ctl": "planned"}, status
    said = operator.log_path.read_text()[len(before):]
    assert f"GraphRun {namespace}/planned: the 'default' graph of environment env as kept in the store" in said


def test_the_nodes_key_is_read_as_the_namespace_s_service_account_never_the_operator(
        kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    apply(kubectl, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k", "namespace": namespace},
                    "stringData": {"id": "not a key", "known_hosts": "[127.0.0.2]:22 ssh-ed25519 AAAA"}})
    apply(kubectl, {"apiVersion": API, "kind": "Environment", "metadata": {"name": "env", "namespace": namespace},
                    "spec": {"release": "r9", "nodes": [{"name": "n", "roles": ["x"], "address": "127.0.0.2"}],
                             "ssh": {"privateKey": {"name": "k", "key": "id"},
                                     "knownHosts": {"name": "k", "key": "known_hosts"}}}})
    apply(kubectl, graph("g", namespace, [shell("t", ["x"], "true")], release="r9"))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "deploymentgraph/g")
    # followed by the CLI, which ends with the message that says what to do (not the short reason)
    followed = subprocess.run([str(STEAD), "graph", "execute", "--env", "env", "--name", "no-rights", "-f", "-n",
                               namespace, "--kubeconfig", str(operator.cluster.kubeconfig)],
                              capture_output=True, text=True, timeout=120)
    assert followed.returncode == 1, followed.stdout + followed.stderr
    assert followed.stdout.rstrip().splitlines()[-1] == (
        f"reason: spec.ssh.knownHosts of the environment: Secret k: service account {namespace}/default may not "
        "read it (grant it get on Secret k)"), followed.stdout
    status = finished(kubectl, namespace, "no-rights")
    assert status["state"] == "Failed", status
