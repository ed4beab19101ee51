"""Deployment graphs end to end: DeploymentGraphs and GraphRuns through kubectl, executed by the real
operator on three real sshd nodes (127.0.0.2-4, tests/sshd.py), side effects read on the nodes."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from pipelines.control import read_output, read_status, run_paths
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


def ssh_environment(kubectl: Kubectl, ssh_nodes: SshNodes, namespace: str) -> None:  # noqa: F811
    """The Environment `env` of release r1 in `namespace`: the three sshd nodes, with the key and the
    known hosts in Secrets its runs read; Ready."""
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


@pytest.fixture(scope="module")
def environment(kubectl: Kubectl, ssh_nodes: SshNodes, tmp_path_factory: pytest.TempPathFactory,  # noqa: F811
                operator: OperatorProcess) -> tuple[str, Path]:
    """A namespace with an Environment of three nodes reachable over SSH, and the file tasks append to."""
    namespace = "t-graphs"
    kubectl("create", "namespace", namespace, check=False)
    order = tmp_path_factory.mktemp("graph-order") / "order.log"
    order.touch()
    order.chmod(0o666)
    ssh_environment(kubectl, ssh_nodes, namespace)
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
    row = kubectl("get", "deploymentgraph", "r1-default", "-n", namespace, "--no-headers").stdout.split()
    assert row[1:4] == ["Provisioned", "True", "default"], row  # TYPE of a graph without spec.type (was empty)
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
    # the columns tell what is true now: PHASE Failed (it was Running), PROGRESS what succeeded (not 1/1)
    row = kubectl("get", "graphrun", "failing", "-n", namespace, "--no-headers").stdout.split()
    assert row[1:7] == ["Failed", "False", "env", "Failed", "0/1", "boom@cmp-2"], row
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
    assert (status["state"], status["phase"]) == ("Aborted", "Aborted"), status
    # spec.abort stops running tasks (it does not let them finish): the task is aborted, its process gone
    assert states(status) == {"wait@ctl": "aborted"}, status
    wait_until(lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1, 10,
               "the aborted task's process on the node ended")
    before = order.read_text()
    apply(kubectl, graph_run("plan-only", namespace, dryRun=True))
    status = finished(kubectl, namespace, "plan-only")
    assert status["state"] == "Succeeded" and status["plan"]["planned"] == 6
    assert status["progress"] == "6 planned (dry run)", status  # not 0/6 beside Succeeded
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


TRACE = """\
import os, sys, time
line = f"{os.path.basename(os.environ['NODE_DIR'])} {sys.argv[2]} {sys.argv[3]} {time.monotonic_ns()}\\n"
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
os.write(fd, line.encode())
"""


def test_groups_order_their_tasks_on_every_node(kubectl: Kubectl, environment: tuple[str, Path],
                                                tmp_path: Path) -> None:
    """Fuel's group semantics (issue 26): with compute requiring controller, no task of the compute group
    starts on any compute node before every task of the controller group has ended; a group required for
    deploy_end has all its tasks ended before what follows deploy_end starts. Ordered traces: each task
    appends `<node> <task> start|end <monotonic ns>` (one clock: the nodes are processes of this machine)."""
    namespace, _ = environment
    script, trace = tmp_path / "trace.py", tmp_path / "trace.log"
    script.write_text(TRACE)
    trace.touch()
    trace.chmod(0o666)

    def traced(task_id: str, seconds: float, **more: Any) -> dict[str, Any]:
        mark = f"{sys.executable} -I -S {script} {trace} {task_id}"
        return {"id": task_id, "type": "shell", "version": "2.1.0",
                "parameters": {"cmd": f"{mark} start; sleep {seconds}; {mark} end"}, **more}

    stage = {"type": "stage"}
    apply(kubectl, graph("r1-grouped", namespace, [
        {"id": "deploy_start", **stage}, {"id": "deploy_end", "requires": ["deploy_start"], **stage},
        {"id": "post_deployment_start", "requires": ["deploy_end"], **stage},
        {"id": "controller", "type": "group", "roles": ["controller"], "requires": ["deploy_start"],
         "requiredFor": ["deploy_end"]},
        {"id": "compute", "type": "group", "roles": ["compute"], "requires": ["controller"],
         "requiredFor": ["deploy_end"]},
        traced("hiera", 0.2, groups=["controller", "compute"]),
        traced("db", 0.8, groups=["controller"], requires=["hiera"]),
        traced("nova", 0.8, groups=["compute"]),  # no order of its own: only its group's
        traced("smoke", 0, roles=["*"], requires=["post_deployment_start"]),
    ], release="r1", type="grouped"))
    apply(kubectl, graph_run("grouped", namespace, {"type": "grouped"}))
    status = finished(kubectl, namespace, "grouped")
    assert status["state"] == "Succeeded", status
    assert "controller@" in states(status) and not any("::" in key for key in states(status))

    name = {address: node for node, address in NODES.items()}
    at: dict[tuple[str, str, str], int] = {}
    for line in trace.read_text().splitlines():
        address, task, event, ns = line.split()
        at[(name[address], task, event)] = int(ns)
    assert len(at) == 2 * (2 + 2 * 2 + 3), sorted(at)  # hiera, db on ctl; hiera, nova on 2 computes; smoke x3
    controller_ended = max(at[("ctl", task, "end")] for task in ("hiera", "db"))
    compute_started = min(at[(node, task, "start")] for node in ("cmp-1", "cmp-2") for task in ("hiera", "nova"))
    assert compute_started > controller_ended, (compute_started - controller_ended) / 1e9
    grouped_ended = max(ns for (_, task, event), ns in at.items() if task != "smoke" and event == "end")
    smoke_started = min(at[(node, "smoke", "start")] for node in NODES)
    assert smoke_started > grouped_ended, (smoke_started - grouped_ended) / 1e9


def test_a_runner_killed_mid_run_resumes_without_repeating_finished_tasks_or_running_one_twice_at_once(
        kubectl: Kubectl, environment: tuple[str, Path], operator: OperatorProcess) -> None:
    namespace, order = environment
    gate, copies = order.with_name("resume.gate"), order.with_name("resume.copies")
    note = f'echo "at {{}} $(basename $NODE_DIR)" >> {order}'
    # `last` outlasts its runner: it waits for the gate and writes nothing to its stdout or stderr (closed
    # with the runner's connection: a line, even the shell's "Terminated", would end it with SIGPIPE), and
    # every copy of it records its start, its end or its being stopped, with its pid and time
    stamp = f'echo "{{}} $$ $(date +%s.%N)" >> {copies}'
    last = (f"exec >/dev/null 2>&1; {stamp.format('start')}; trap '{stamp.format('stopped')}; exit 143' TERM; "
            f"while [ ! -e {gate} ]; do sleep 0.1; done; {stamp.format('end')}; {note.format('last')}")
    apply(kubectl, graph("r1-resume", namespace, [
        shell("first", ["controller"], note.format("first")),
        shell("last", ["controller"], last, requires=["first"]),
    ], release="r1", type="resume"))
    apply(kubectl, graph_run("resumed", namespace, {"type": "resume"}))
    uid = get(kubectl, "graphrun", "resumed", namespace)["metadata"]["uid"]
    paths = run_paths(operator.store.with_name(operator.store.name + "-runs"), uid)

    def events() -> list[list[str]]:
        return [line.split() for line in copies.read_text().splitlines()] if copies.exists() else []

    wait_until(lambda: [e for e in events() if e[0] == "start"], 60, "`last` started", interval=0.1)
    pid = int(wait_until(lambda: paths.lock_file.exists() and paths.lock_file.read_text().strip(), 10,
                         "the runner's pid"))
    os.kill(pid, signal.SIGKILL)  # its `last` runs on: sshd hangs up no pty-less session
    wait_until(lambda: len([e for e in events() if e[0] == "start"]) == 2, 60, "the restarted runner's `last`",
               interval=0.1)
    gate.touch()
    status = finished(kubectl, namespace, "resumed")
    assert status["state"] == "Succeeded" and status["runnerStarts"] == 2, status
    runs = [line.split()[1] for line in order.read_text().splitlines() if line.split()[1] in ("first", "last")]
    assert runs == ["first", "last"], runs  # the finished task not again; `last` ended once
    alive: set[str] = set()
    for kind, copy, _ in events():  # in the order they happened (appends to one file)
        if kind == "start":
            assert not alive, f"copy {copy} of `last` started while {alive} ran: {events()}"
            alive.add(copy)
        else:
            alive.discard(copy)
    assert [kind for kind, _, _ in events()] == ["start", "stopped", "start", "end"], events()
    record = next(s for s in (read_status(paths) or {}).get("steps") or [] if ":last:" in str(s.get("step")))
    assert "an earlier attempt of" in read_output(paths, record["step"], record["target"])


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
        f"read it: it needs get on secrets/k in namespace {namespace} (kubectl -n {namespace} create role read-k "
        f"--verb=get --resource=secrets --resource-name=k; kubectl -n {namespace} create rolebinding read-k "
        f"--role=read-k --serviceaccount={namespace}:default)"), followed.stdout
    status = finished(kubectl, namespace, "no-rights")
    # forbidden, not "not found"; and the PHASE column says the run failed (it said `Planning`)
    assert (status["state"], status["phase"]) == ("Failed", "Failed"), status
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "SecretForbidden" and f"service account {namespace}/default may not read it" in \
        stalled["message"], stalled


FAKE_PUPPET = r"""#!/bin/sh
# puppet apply as Puppet 5 prints it: with --noop what would change, without it what changed
for arg in "$@"; do [ "$arg" = --noop ] && noop=1; done
echo "Notice: Compiled catalog for $(basename "$NODE_DIR") in environment production in 0.01 seconds"
if [ -n "$noop" ]; then
  printf '%s%s\n' "Notice: /Stage[main]/Main/File[/etc/motd]/content: current_value " \
    "'{md5}d41d8cd98f00b204e9800998ecf8427e', should be '{md5}9a0364b9e99bb480dd25e1f0284c8555' (noop)"
  echo "Notice: /Stage[main]/Ntp::Service/Service[ntp]/ensure: current_value 'stopped', should be 'running' (noop)"
  echo "Notice: Class[Ntp::Service]: Would have triggered 'refresh' from 1 event"
  echo "Notice: Stage[main]: Would have triggered 'refresh' from 2 events"
  echo "Notice: Applied catalog in 0.02 seconds"
  exit 0
fi
echo "Notice: /Stage[main]/Main/File[/etc/motd]/content: content changed '{md5}d41d8' to '{md5}9a036'"
echo "Notice: Applied catalog in 0.03 seconds"
exit 2
"""


def test_history_keeps_each_task_on_each_node_across_runs_with_what_a_noop_run_would_change(
        kubectl: Kubectl, environment: tuple[str, Path], ssh_nodes: SshNodes,  # noqa: F811
        operator: OperatorProcess, tmp_path: Path) -> None:
    """A run and a noop run of a puppet task (a fake `puppet` on each node's PATH that prints what Puppet
    prints): the noop run's status says per node what would change, and `stead graph history` (through the
    operator's API, as who may list GraphRuns) shows both runs per node and task, pages, and exports CSV."""
    from tests.e2e.test_config_api import client_certificate

    namespace, order = environment
    fakes = [node.bin / "puppet" for node in ssh_nodes.nodes]
    for fake in fakes:
        fake.write_text(FAKE_PUPPET)
        fake.chmod(0o755)
    try:
        apply(kubectl, graph("r1-audit", namespace, [
            {"id": "conf", "type": "puppet", "version": "2.1.0", "roles": ["*"],
             "parameters": {"puppet_manifest": "/etc/puppet/manifests/site.pp",
                            "puppet_modules": "/etc/puppet/modules", "timeout": 60}},
            shell("say", ["compute"], f'echo "said $(basename $NODE_DIR)" >> {order}', requires=["conf"]),
        ], release="r1", type="audit"))
        apply(kubectl, graph_run("hist-apply", namespace, {"type": "audit"}))
        assert finished(kubectl, namespace, "hist-apply")["state"] == "Succeeded"
        said = order.read_text().count("said ")
        apply(kubectl, graph_run("hist-noop", namespace, {"type": "audit"}, noop=True))
        status = finished(kubectl, namespace, "hist-noop")
    finally:
        for fake in fakes:
            fake.unlink()
    assert status["state"] == "Succeeded", status
    assert order.read_text().count("said ") == said  # the shell task did not run in the noop run
    tasks = {f"{t['task']}@{n['name']}": t for n in status["nodes"] for t in n["tasks"]}
    assert tasks["say@cmp-1"]["state"] == "noop"
    assert {k: t.get("noop") for k, t in tasks.items() if k.startswith("conf@")} == {
        f"conf@{n}": {"wouldChange": 2, "resources": ["File[/etc/motd] (content)", "Service[ntp] (ensure)"],
                      "more": 0} for n in NODES}

    env = {**os.environ, "STEAD_CONFIG_URL": f"https://127.0.0.1:{operator.config_api_port}",
           "STEAD_CONFIG_CACERT": str(operator.store.parent / "config-api" / "ca.crt")}
    env.pop("STEAD_CONFIG_TOKEN", None)

    def history(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(STEAD), "graph", "history", "--env", "env", "-n", namespace, "--kubeconfig",
                               str(operator.cluster.kubeconfig), "--type", "audit", *args],
                              capture_output=True, text=True, timeout=60, env=env)

    shown = history("--node", "cmp-1")
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert rows[0] == ["FINISHED", "RUN", "TYPE", "NODE", "TASK", "STATE", "DURATION", "ATTEMPTS", "CHANGES"]
    assert sorted((r[1], r[4], r[5], r[8] if len(r) > 8 else "") for r in rows[1:]) == [
        ("hist-apply", "conf", "success", ""), ("hist-apply", "say", "success", ""),
        ("hist-noop", "conf", "success", "2")]
    assert rows[1][1] == "hist-noop"  # newest first
    shown = history("--task", "conf", "-o", "csv")
    assert shown.returncode == 0, shown.stderr
    entries = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert sorted((e["run"], e["node"], e["wouldChange"]) for e in entries) == sorted(
        [("hist-apply", n, "") for n in NODES] + [("hist-noop", n, "2") for n in NODES])
    noop = next(e for e in entries if e["run"] == "hist-noop")
    assert noop["resources"] == "File[/etc/motd] (content);Service[ntp] (ensure)"
    assert all(float(e["duration"]) >= 0 and e["attempts"] == "1" for e in entries)
    first = history("--task", "conf", "--limit", "4")
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 5
    token = first.stderr.split("--continue ")[1].split()[0]
    rest = history("--task", "conf", "--limit", "4", "--continue", token)
    assert rest.returncode == 0 and len(rest.stdout.splitlines()) == 3 and rest.stderr == ""

    nobody = client_certificate(operator.cluster, tmp_path, "history-nobody")
    code, refused = api_call(operator, nobody, namespace, "GET", "/api/v1/clusters/env/history/")
    assert code == 403 and 'may not list graphruns in namespace "t-graphs"' in refused["message"]


def test_an_opted_in_environment_reruns_the_tasks_a_changed_key_refreshes_once_per_burst_on_its_node(
        kubectl: Kubectl, environment: tuple[str, Path]) -> None:
    """refreshOn (issue 26): not opted in, an edit makes no run; opted in, two quick edits of a key on one node
    make one GraphRun of Stead's, naming the key, that runs the refreshing task and its successor there only."""
    namespace, order = environment
    note = f'echo "at {{}} $(basename $NODE_DIR)" >> {order}'

    def patch_env(spec: dict[str, Any]) -> None:
        kubectl("patch", "environment", "env", "-n", namespace, "--type", "merge", "-p", json.dumps({"spec": spec}))

    def set_port(port: int) -> None:
        kubectl("patch", "configvalues", "svc-cmp-1", "-n", namespace, "--type", "merge",
                "-p", json.dumps({"spec": {"data": {"port": port}}}))

    def auto_runs() -> list[dict[str, Any]]:
        listed = kubectl("get", "graphruns", "-n", namespace, "-l", "stead.dev/created-by=stead-auto-run",
                         "-o", "json").stdout
        items: list[dict[str, Any]] = json.loads(listed)["items"]
        return items

    apply(kubectl, {"apiVersion": API, "kind": "ConfigComponent", "metadata": {"name": "svc", "namespace": namespace},
                    "spec": {"resources": [{"name": "svc"}]}})
    patch_env({"components": ["svc"]})
    for name, level in (("svc-root", {}), ("svc-cmp-1", {"node": "cmp-1"})):
        apply(kubectl, {"apiVersion": API, "kind": "ConfigValues", "metadata": {"name": name, "namespace": namespace},
                        "spec": {"environment": "env", "resource": "svc", "level": level,
                                 "data": {"port": 1, "other": 1}}})
    apply(kubectl, graph("env-auto", namespace, [
        shell("base", ["*"], note.format("base")),
        shell("conf", ["compute"], note.format("conf"), requires=["base"], refreshOn=["svc:port"]),
        shell("after", ["compute"], note.format("after"), requires=["conf"]),
        shell("unrelated", ["*"], note.format("unrelated"), refreshOn=["svc:other"]),
    ], environment="env", type="auto"))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "deploymentgraph/env-auto",
            "configvalues/svc-root", "configvalues/svc-cmp-1")
    wait_until(lambda: "auto:4@" in str(get(kubectl, "environment", "env", namespace)["status"].get("graphSummary")),
               30, "the auto graph merged", interval=0.2)
    set_port(2)  # not opted in: no run
    kubectl("wait", "--for=jsonpath={.status.version}=2", "-n", namespace, "--timeout", "30s",
            "configvalues/svc-cmp-1")

    def armed() -> bool:
        events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
        return any(e["reason"] == "AutoRunArmed" and e["involvedObject"]["name"] == "env" and "svc:port" in e["message"]
                   for e in events)

    try:
        patch_env({"graphs": {"autoRun": {"onConfigChange": True, "debounceSeconds": 2, "graphType": "auto"}}})
        wait_until(armed, 30, "the auto-run armed with the graph's keys", interval=0.2)
        before = order.read_text()
        set_port(3)
        set_port(4)  # the same burst
        runs = wait_until(auto_runs, 30, "a GraphRun created by Stead", interval=0.2)
        name = runs[0]["metadata"]["name"]
        status = finished(kubectl, namespace, name)
        assert status["state"] == "Succeeded", status
        assert len(auto_runs()) == 1  # the burst made one run, the edit before opting in none
        trigger = runs[0]["spec"]["trigger"]
        assert trigger["event"] == "configChange" and trigger["keys"] == ["svc:port"] and trigger["nodes"] == ["cmp-1"]
        assert "svc:port" in trigger["reason"] and "svc:port" in runs[0]["metadata"]["annotations"]["stead.dev/reason"]
        ran = {k for k, v in states(status).items() if v == "success"}
        assert ran == {"conf@cmp-1", "after@cmp-1"}, states(status)
        added = [line.split()[1:] for line in order.read_text()[len(before):].splitlines()]
        assert added == [["conf", NODES["cmp-1"]], ["after", NODES["cmp-1"]]]
    finally:
        patch_env({"graphs": None, "components": []})


def test_the_auto_run_example_plans_a_refresh_and_an_added_nodes_reexecution(
        kubectl: Kubectl, namespace: str, operator: OperatorProcess) -> None:
    """examples/graph-autorun.yaml as docs/graphs.md tours it (dry runs: no node is touched): a changed key
    re-plans its tasks and their successors, an added node has the deploy_changes tasks planned on every node."""
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "graph-autorun.yaml"))

    def auto_runs() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(kubectl(
            "get", "gr", "-n", namespace, "-l", "stead.dev/created-by=stead-auto-run", "-o", "json").stdout)["items"]
        return sorted(items, key=lambda r: r["metadata"]["creationTimestamp"])

    def armed() -> bool:
        events = kubectl("get", "events", "-n", namespace, "--field-selector", "reason=AutoRunArmed",
                         "-o", "json").stdout
        return any("nova_config:DEFAULT.debug" in e["message"] for e in json.loads(events)["items"])

    wait_until(armed, 30, "the example's auto-run armed", interval=0.2)
    kubectl("patch", "cv", "nova-root", "-n", namespace, "--type", "merge",
            "-p", '{"spec":{"data":{"DEFAULT":{"debug":true,"workers":4}}}}')
    first = wait_until(auto_runs, 30, "the refresh run", interval=0.2)[0]
    status = finished(kubectl, namespace, first["metadata"]["name"])
    assert status["state"] == "Succeeded" and first["spec"]["trigger"]["keys"] == ["nova_config:DEFAULT.debug"]
    assert {k for k, v in states(status).items() if v == "planned"} == {
        f"{t}@{n}" for t in ("nova-config", "nova-restart") for n in ("node-2", "node-3")}
    kubectl("patch", "environment", "auto-demo", "-n", namespace, "--type", "json", "-p",
            '[{"op":"add","path":"/spec/nodes/-","value":{"name":"node-4","roles":["compute"],"address":"10.20.0.6"}}]')
    second = wait_until(lambda: auto_runs()[1:], 30, "the node-added run", interval=0.2)[0]
    status = finished(kubectl, namespace, second["metadata"]["name"])
    assert status["state"] == "Succeeded" and second["spec"]["trigger"]["event"] == "deploy_changes"
    assert second["spec"]["trigger"]["nodes"] == ["node-4"]
    assert {k for k, v in states(status).items() if v == "planned"} == {f"hosts@node-{i}" for i in range(1, 5)}

    # The Environment deleted and made again under its name (as in a namespace re-created, maybe another
    # tenant's): another object, armed afresh from its own values; the old one's baseline does not carry over.
    old = get(kubectl, "environment", "auto-demo", namespace)
    kubectl("delete", "environment", "auto-demo", "-n", namespace, "--wait=true", "--timeout=30s")
    apply(kubectl, {"apiVersion": old["apiVersion"], "kind": "Environment", "spec": old["spec"],
                    "metadata": {"name": "auto-demo", "namespace": namespace,
                                 "labels": old["metadata"].get("labels") or {}}})
    uid = get(kubectl, "environment", "auto-demo", namespace)["metadata"]["uid"]
    assert uid != old["metadata"]["uid"]

    def armed_again() -> bool:
        events = kubectl("get", "events", "-n", namespace, "--field-selector", "reason=AutoRunArmed",
                         "-o", "json").stdout
        return any(e["involvedObject"].get("uid") == uid for e in json.loads(events)["items"])

    wait_until(armed_again, 30, "the re-created environment's auto-run armed", interval=0.2)
    assert len(auto_runs()) == 2
