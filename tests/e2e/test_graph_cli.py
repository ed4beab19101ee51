"""`stead graph` and the graphs REST API end to end: graphs uploaded with the CLI as Fuel task files, merged,
downloaded, and a dry run executed and followed to its end by the real operator; the merged tasks and an
execution through `/api/v1` on the operator's API server (TLS, a client certificate as the admin)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.e2e.conftest import STEAD, Kubectl, OperatorProcess, api_call, env_manifest
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
