"""`stead graph` and the graphs REST API end to end: graphs uploaded with the CLI as Fuel task files, merged,
downloaded, and a dry run executed and followed to its end by the real operator; the merged tasks and an
execution through `/api/v1` on the operator's API server (TLS, a client certificate as the admin)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.e2e.conftest import ROOT, STEAD, Kubectl, OperatorProcess, api_call, env_manifest, wait_until
from tests.e2e.test_config_api import client_certificate

RELEASE = """\
- {id: deploy_start, type: stage}
- {id: deploy_end, type: stage, requires: [deploy_start]}
- id: netconfig
  type: shell
  version: 2.1.0
  role: '*'
  requires: [deploy_start]
  required_for: [deploy_end]
  parameters: {cmd: echo release-netconfig}
"""
ENVIRONMENT = """\
- id: netconfig
  type: shell
  version: 2.1.0
  roles: ['*']
  requires: [deploy_start]
  required_for: [deploy_end]
  parameters: {cmd: echo env-netconfig}
- id: report
  type: shell
  version: 2.1.0
  role: [controller]
  requires: [netconfig]
  cross-depends: [{name: netconfig, role: compute}]
  parameters: {cmd: echo report}
  owner_note: kept
"""
NODES = [{"name": "node-1", "roles": ["controller"], "address": "127.0.0.2"},
         {"name": "node-2", "roles": ["compute"], "address": "127.0.0.3"}]


def stead(operator: OperatorProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STEAD), "graph", *args, "--kubeconfig", str(operator.cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=120)


def test_graphs_uploaded_with_the_cli_merge_download_and_run_dry(operator: OperatorProcess, kubectl: Kubectl,
                                                                 namespace: str, tmp_path: Path) -> None:
    kubectl("apply", "-f", "-", input=env_manifest("env", namespace, NODES))
    (tmp_path / "release.yaml").write_text(RELEASE)
    (tmp_path / "env.yaml").write_text(ENVIRONMENT)
    done = stead(operator, "upload", "--release", "mitaka-9.0", "--file", str(tmp_path / "release.yaml"), "-n",
                 namespace)
    assert done.returncode == 0, done.stderr
    done = stead(operator, "upload", "--env", "env", "--file", str(tmp_path / "env.yaml"), "-n", namespace)
    assert done.returncode == 0 and "environment-env-default created" in done.stdout, done.stderr
    done = stead(operator, "upload", "--env", "env", "--file", str(tmp_path / "env.yaml"), "-n", namespace)
    assert done.returncode == 0 and "environment-env-default updated" in done.stdout, done.stderr
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "dg/environment-env-default",
            "dg/release-mitaka-9.0-default")

    listed = stead(operator, "list", "--env", "env", "-n", namespace)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 3, listed
    merged = stead(operator, "download", "--env", "env", "-n", namespace)
    assert merged.returncode == 0, merged.stderr
    tasks = yaml.safe_load(merged.stdout)
    assert [t["id"] for t in tasks] == ["deploy_start", "deploy_end", "netconfig", "report"]
    assert tasks[2]["parameters"]["cmd"] == "echo env-netconfig" and tasks[3]["owner_note"] == "kept"

    run = stead(operator, "execute", "--env", "env", "--dry-run", "-f", "--name", "dry-1", "-n", namespace)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "graphrun/dry-1  environment env  types default (dry run)  Succeeded" in run.stdout
    assert "node-1" in run.stdout and "├─ netconfig  planned" in run.stdout
    shown = stead(operator, "status", "dry-1", "-n", namespace)
    assert shown.returncode == 0 and "Succeeded" in shown.stdout

    refused = stead(operator, "execute", "--env", "env", "--node", "node-9", "-n", namespace)
    assert refused.returncode == 1 and refused.stderr.startswith("stead graph: --node node-9: not in environment")
    # a type the environment has no graph of: it used to end `Succeeded 0/0`, exit code 0
    refused = stead(operator, "execute", "--env", "env", "--type", "defualt", "-f", "-n", namespace)
    assert refused.returncode == 1, refused.stdout
    assert "no graph of type 'defualt' (its graph types: default;" in refused.stderr

    # the plan of a subset: each node's tasks in the order they run, the edges outside it
    plan = stead(operator, "plan", "--env", "env", "--node", "node-1", "-n", namespace)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    lines = plan.stdout.splitlines()
    assert lines[lines.index("node-1") + 1:lines.index("node-1") + 3] == ["    1. netconfig  planned",
                                                                          "    2. report  planned"], plan.stdout
    assert "    1. netconfig  skipped  node not selected" in lines  # node-2's
    assert "  report@node-1 waits for netconfig@node-2" in lines, plan.stdout
    wait_until(lambda: kubectl("get", "graphruns", "-n", namespace, "-o", "name").stdout.split() == [
        "graphrun.stead.dev/dry-1"], 30, "the plan's dry run deleted")


def test_errors_are_said_at_upload_or_by_the_merge_naming_the_tasks(operator: OperatorProcess, kubectl: Kubectl,
                                                                   namespace: str, tmp_path: Path) -> None:
    kubectl("apply", "-f", "-", input=env_manifest("env", namespace, NODES))
    broken = tmp_path / "broken.yaml"
    broken.write_text(RELEASE + "- id: x\n  type: shell\n   requires: [a]\n")
    refused = stead(operator, "upload", "--release", "mitaka-9.0", "--file", str(broken), "-n", namespace)
    assert refused.returncode == 1
    assert refused.stderr == f"stead graph: {broken}:12:12: not YAML: mapping values are not allowed here\n"

    def graph(name: str, tasks: list[dict[str, object]], **owner: str) -> str:
        return yaml.safe_dump({"apiVersion": "stead.dev/v1alpha1", "kind": "DeploymentGraph",
                               "metadata": {"name": name, "namespace": namespace}, "spec": {**owner, "tasks": tasks}})

    # the webhook: a cycle among the graph's own tasks, a condition that can only fail
    looped = kubectl("apply", "-f", "-", check=False, input=graph("looped", [
        {"id": "a", "type": "shell", "roles": ["*"], "requires": ["b"]},
        {"id": "b", "type": "shell", "roles": ["*"], "requires": ["a"]}], release="mitaka-9.0"))
    assert looped.returncode != 0 and "dependency cycle among tasks" in looped.stderr and "a -> b -> a" in \
        looped.stderr, looped.stderr
    unquoted = kubectl("apply", "-f", "-", check=False, input=graph("unquoted", [
        {"id": "check", "type": "shell", "roles": ["*"], "condition": {"yaqlExp": "$.node.name = cmp-1"}}],
        release="mitaka-9.0"))
    assert unquoted.returncode != 0 and "spec.tasks[0] (check).condition: yaqlExp '$.node.name = cmp-1': the bare " \
        "word 'cmp' is an operand of a subtraction" in unquoted.stderr, unquoted.stderr

    # the merge: each graph is fine alone; together one names a task no level has
    (tmp_path / "release.yaml").write_text(RELEASE)
    done = stead(operator, "upload", "--release", "mitaka-9.0", "--file", str(tmp_path / "release.yaml"), "-n",
                 namespace)
    assert done.returncode == 0, done.stderr
    kubectl("apply", "-f", "-", input=graph("own", [
        {"id": "report", "type": "shell", "roles": ["*"], "requires": ["netconfig", "netcnofig"]}], environment="env"))
    kubectl("wait", "--for=jsonpath={.status.graphSummary}=default:error", "-n", namespace, "--timeout", "30s",
            "environment/env")
    env = json.loads(kubectl("get", "environment", "env", "-n", namespace, "-o", "json").stdout)
    merged = next(c for c in env["status"]["conditions"] if c["type"] == "GraphsMerged")
    assert (merged["status"], merged["reason"]) == ("False", "MergeFailed")
    assert merged["message"] == ("graph type 'default': task 'report' (of environment 'env'): requires 'netcnofig', "
                                 "which is not in the merged graph")


def test_the_worked_example_of_conditions_reading_configuration_plans_as_documented(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str) -> None:
    """docs/graphs.md, "Reading a configuration value in a condition", as written there."""
    examples = ROOT / "examples"
    kubectl("apply", "-n", namespace, *(f"-f{examples / name}" for name in (
        "config-environment.yaml", "config-component.yaml", "config-values.yaml", "graph-conditions.yaml")))
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "--timeout", "60s", "env/env-1", "cc/fuel",
            "dg/env-1-default")
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "--timeout", "60s", "cv", "--all")
    plan = stead(operator, "plan", "--env", "env-1", "-n", namespace)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert plan.stdout.splitlines()[1:9] == [
        "node-1", "    1. scale-api  planned", "    2. debug-logging  skipped  condition false",
        "    3. first-deploy  planned",
        "node-2", "    1. scale-api  skipped  condition false", "    2. debug-logging  skipped  condition false",
        "node-3"], plan.stdout


def test_the_rest_api_serves_merged_tasks_and_executes(operator: OperatorProcess, kubectl: Kubectl, namespace: str,
                                                       tmp_path: Path) -> None:
    admin = client_certificate(operator.cluster, tmp_path, "graphs-admin", ("system:masters",))
    kubectl("apply", "-f", "-", input=env_manifest("env", namespace, NODES))
    status, body = api_call(operator, admin, namespace, "PUT", "/api/v1/releases/mitaka-9.0/deployment_graphs/default/",
                        {"tasks": yaml.safe_load(RELEASE)})
    assert status == 201, body
    status, body = api_call(operator, admin, namespace, "PUT", "/api/v1/clusters/env/deployment_graphs/default/",
                        {"tasks": yaml.safe_load(ENVIRONMENT)})
    assert status == 201, body
    status, again = api_call(operator, admin, namespace, "POST", "/api/v1/graphs/",
                         {"relations": [{"model": "cluster", "model_id": "env"}], "tasks": []})
    assert status == 409 and "environment-env-default" in again["message"], again
    status, tasks = api_call(operator, admin, namespace, "GET", "/api/v1/clusters/env/deployment_tasks/",
                         query="graph_type=default")
    assert status == 200 and [t["id"] for t in tasks] == ["deploy_start", "deploy_end", "netconfig", "report"]
    status, run = api_call(operator, admin, namespace, "POST", "/api/v1/graphs/execute/",
                       {"cluster": "env", "graphs": [{"type": "default", "nodes": ["node-1"]}], "dry_run": True})
    assert status == 202, run
    kubectl("wait", "--for=jsonpath={.status.state}=Succeeded", "-n", namespace, "--timeout", "60s",
            f"graphrun/{run['name']}")
    status, body = api_call(operator, admin, namespace, "POST", "/api/v1/graphs/execute/",
                        {"cluster": "env", "graphs": [{"nodes": ["nope"]}]})
    assert status == 400 and "nope not in cluster env" in body["message"]
    status, body = api_call(operator, admin, namespace, "POST", "/api/v1/graphs/execute/",
                            {"cluster": "env", "graphs": [{"type": "defualt"}]})
    assert status == 400 and "no graph of type 'defualt' (its graph types: default;" in body["message"], body
