"""The runner against the real API server, acting as a namespace's service account (never as an admin).

Until pods can run in the test cluster (no kubelet), a Job's outcome is written by the test to its
status subresource, the way the Job controller would: the runner's side (the Job, its Secret, the
wait, the step's result) is what is tested. The `kubernetes` step is tested the same way: it
applies a ConfigMap and a Job, waits until the test marks the Job complete, then deletes both.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cluster import ClusterInfo
from pipelines.control import read_output, read_status, run_paths
from pipelines.kubeapi import CREDENTIALS_ENV, write_credentials
from tests.e2e.conftest import ROOT, STEAD, Kubectl, OperatorProcess
from tests.polling import wait_until

RUNNER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "stead-runner"},
    "rules": [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "delete",
                                                                   "patch"]},
        {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "create", "delete", "patch"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list"]},
    ],
}


@dataclass
class Runner:
    credentials: Path
    state: Path
    namespace: str

    def start(self, workflow: dict[str, Any], *extra: str) -> tuple[str, subprocess.Popen[str]]:
        uid = uuid.uuid4().hex
        path = self.state / f"{uid}.yaml"
        path.write_text(yaml.safe_dump(workflow))
        # the runner's environment: built from nothing, only the path of the namespace's credentials
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), CREDENTIALS_ENV: str(self.credentials)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines", "run", "--workflow", str(path), "--run-id", uid,
             "--state", str(self.state), "--kube-api", "pipelines.kubeapi:from_environment", "--events", "none",
             *extra],
            env=env, cwd=self.state, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        return uid, proc

    def status(self, uid: str) -> dict[str, Any]:
        status = read_status(run_paths(self.state, uid))
        assert status is not None
        return status


@pytest.fixture
def runner(namespace: str, kubectl: Kubectl, cluster: ClusterInfo, tmp_path: Path) -> Iterator[Runner]:
    """A runner acting as the namespace's `default` service account, with a short-lived token of it."""
    wait_until(lambda: kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
               30, "the namespace's default service account")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(RUNNER_ROLE))
    kubectl("create", "rolebinding", "stead-runner", "-n", namespace, "--role=stead-runner",
            f"--serviceaccount={namespace}:default")
    token = kubectl("create", "token", "default", "-n", namespace, "--duration=10m").stdout.strip()
    credentials = tmp_path / "kube-credentials.json"
    write_credentials(credentials, cluster.server, token, cluster.ca_cert.read_text())
    assert credentials.stat().st_mode & 0o777 == 0o600
    state = tmp_path / "state"
    state.mkdir()
    yield Runner(credentials, state, namespace)


def jobs(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    out = kubectl("get", "jobs", "-n", namespace, "-l", "app.kubernetes.io/managed-by=stead", "-o", "json")
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return items


def creators(cluster: ClusterInfo, namespace: str, resource: str, verb: str = "create",
             name: str | None = None) -> set[str]:
    """Who created (or `verb`) objects of `resource` in `namespace`, from the API server's audit log."""
    users = set()
    with cluster.audit_log.open("rb") as log:
        for raw in log:
            if not raw.endswith(b"\n"):
                break  # a line the API server is still writing
            event = json.loads(raw)
            ref = event.get("objectRef") or {}
            if (event.get("stage") == "ResponseComplete" and event.get("verb") == verb
                    and ref.get("namespace") == namespace and ref.get("resource") == resource
                    and (name is None or ref.get("name") == name)
                    and not ref.get("subresource") and (event.get("responseStatus") or {}).get("code", 0) < 300):
                users.add(str((event.get("user") or {}).get("username")))
    return users


def first_job(kubectl: Kubectl, namespace: str) -> dict[str, Any] | None:
    found = jobs(kubectl, namespace)
    return found[0] if found else None


def write_job_status(kubectl: Kubectl, namespace: str, name: str, outcome: str) -> None:
    """What the Job controller writes when the pod ends (since 1.32 the terminal conditions need it all)."""
    def started() -> str | None:  # the controller's first sync: do not race it
        out = kubectl("get", "job", name, "-n", namespace, "-o", "jsonpath={.status.startTime}").stdout.strip()
        return out or None

    start = wait_until(started, 20, f"the Job controller to start Job {name}")
    at = max(start, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if outcome == "Complete":
        status = {"startTime": start, "completionTime": at, "succeeded": 1, "active": 0, "ready": 0, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
             "lastTransitionTime": at, "lastProbeTime": at},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": at,
             "lastProbeTime": at}]}
    else:
        status = {"startTime": start, "failed": 1, "active": 0, "ready": 0, "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
             "message": "Job has reached the specified backoff limit", "lastTransitionTime": at,
             "lastProbeTime": at},
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
             "message": "Job has reached the specified backoff limit", "lastTransitionTime": at,
             "lastProbeTime": at}]}
    kubectl("patch", "job", name, "-n", namespace, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))


def finish(proc: subprocess.Popen[str], seconds: float = 30) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the runner did not finish: {err[-2000:]}") from None
    return proc.returncode, err


def exec_workflow(secret: str) -> dict[str, Any]:
    return {"name": "jobs", "steps": [{
        "id": "hello", "type": "exec", "timeoutSeconds": 60,
        "parameters": {"script": f"echo hello {secret}\n", "env": {"TOKEN": secret}},
    }]}


@pytest.mark.timeout(90)
def test_exec_runs_as_a_job_of_the_namespace_under_its_service_account(
    runner: Runner, kubectl: Kubectl, namespace: str, cluster: ClusterInfo
) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    uid, proc = runner.start(exec_workflow(secret), "--exec-backend", "job", "--job-namespace", namespace)
    try:
        job = wait_until(lambda: first_job(kubectl, namespace), 20, "the step's Job")
        name = job["metadata"]["name"]
        pod_spec = job["spec"]["template"]["spec"]
        assert pod_spec["serviceAccountName"] == "default"
        assert job["metadata"]["annotations"]["stead.dev/run"] == uid
        assert secret not in json.dumps(job), "a secret value is in the Job's spec"
        sec = json.loads(kubectl("get", "secret", name, "-n", namespace, "-o", "json").stdout)
        assert sec["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert sec["metadata"]["ownerReferences"][0]["kind"] == "Job"
        assert base64.b64decode(sec["data"]["script"]).decode() == f"echo hello {secret}\n"
        assert base64.b64decode(sec["data"]["env-TOKEN"]).decode() == secret
        assert proc.poll() is None, "the step must wait for the Job"
        write_job_status(kubectl, namespace, name, "Complete")
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    status = runner.status(uid)
    assert status["phase"] == "Succeeded"
    assert [s["state"] for s in status["steps"]] == ["success"]
    account = f"system:serviceaccount:{namespace}:default"
    assert creators(cluster, namespace, "jobs") == creators(cluster, namespace, "secrets") == {account}


@pytest.mark.timeout(90)
def test_a_failed_job_fails_the_step(runner: Runner, kubectl: Kubectl, namespace: str) -> None:
    uid, proc = runner.start(exec_workflow("x"), "--exec-backend", "job", "--job-namespace", namespace)
    try:
        job = wait_until(lambda: first_job(kubectl, namespace), 20, "the step's Job")
        write_job_status(kubectl, namespace, job["metadata"]["name"], "Failed")
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1, err
    status = runner.status(uid)
    assert status["phase"] == "Failed"
    (step,) = status["steps"]
    assert step["state"] == "failure"
    assert "exited with code 1" in step["message"]
    assert "failed: BackoffLimitExceeded" in read_output(run_paths(runner.state, uid), "hello")  # Kubernetes' reason


def job_pods(kubectl: Kubectl, namespace: str, job: str) -> list[dict[str, Any]]:
    out = kubectl("get", "pods", "-n", namespace, "-l", f"job-name={job}", "-o", "json")
    items: list[dict[str, Any]] = json.loads(out.stdout)["items"]
    return items


@pytest.mark.timeout(120)
def test_the_job_pod_is_admitted_where_pod_security_is_restricted(
    runner: Runner, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest")
    # the admission is really on here: an ordinary pod is refused
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
             "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
    refused = kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(plain), check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr
    uid, proc = runner.start(exec_workflow("x"), "--exec-backend", "job", "--job-namespace", namespace)
    try:
        job = wait_until(lambda: first_job(kubectl, namespace), 20, "the step's Job")
        name = job["metadata"]["name"]
        (pod,) = wait_until(lambda: job_pods(kubectl, namespace, name), 30, "the Job's pod, admitted")
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 65532
        assert spec["automountServiceAccountToken"] is False
        assert not any(v["name"].startswith("kube-api-access") for v in spec["volumes"]), "a token is mounted"
        container = spec["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert set(container["resources"]["limits"]) == {"cpu", "memory", "ephemeral-storage"}
        assert proc.poll() is None, "the step must wait for the Job"
        write_job_status(kubectl, namespace, name, "Complete")
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    assert runner.status(uid)["phase"] == "Succeeded"


@pytest.mark.timeout(120)
def test_a_job_whose_pod_is_refused_fails_the_step_with_the_reason_within_a_minute(
    runner: Runner, kubectl: Kubectl, namespace: str
) -> None:
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
             "spec": {"hard": {"pods": "0"}}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(quota))

    def counted() -> bool:  # the quota controller's first pass: the refusal then names the quota
        out = kubectl("get", "resourcequota", "no-pods", "-n", namespace, "-o", "jsonpath={.status.hard.pods}")
        return out.stdout.strip() == "0"

    wait_until(counted, 30, "the quota controller to count pods")
    workflow = exec_workflow("x")
    workflow["steps"][0]["timeoutSeconds"] = 600  # a timeout is not what must end this step
    uid, proc = runner.start(workflow, "--exec-backend", "job", "--job-namespace", namespace)
    try:
        job = wait_until(lambda: first_job(kubectl, namespace), 20, "the step's Job")
        seen = time.monotonic()
        name = job["metadata"]["name"]
        code, err = finish(proc, 60)
        elapsed = time.monotonic() - seen
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1, err
    (step,) = runner.status(uid)["steps"]
    print(f"Job {name}: created to step failure in {elapsed:.1f}s: {step['message']}")
    assert elapsed < 60
    assert step["state"] == "failure"
    assert f"Job {name}: pods cannot be created: FailedCreate: pods " in step["message"], step["message"]
    assert "exceeded quota: no-pods" in step["message"], step["message"]
    assert step["message"].endswith("(Job deleted)"), step["message"]
    assert not job_pods(kubectl, namespace, name)
    wait_until(lambda: kubectl("get", "job", name, "-n", namespace, check=False).returncode != 0, 20,
               "the Job to be deleted")


def test_the_runner_cannot_act_beyond_the_namespace(runner: Runner, kubectl: Kubectl, namespace: str) -> None:
    """The credential is the namespace's service account's: a Job elsewhere is refused (403)."""
    uid, proc = runner.start(exec_workflow("x"), "--exec-backend", "job", "--job-namespace", "kube-system")
    code, err = finish(proc)
    assert code == 1, err
    (step,) = runner.status(uid)["steps"]
    assert step["state"] == "failure" and "403" in step["message"], step["message"]
    assert not jobs(kubectl, "kube-system")


MANIFEST = textwrap.dedent("""\
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: settings}
    data: {colour: blue}
    ---
    apiVersion: batch/v1
    kind: Job
    metadata: {name: migrate, labels: {app.kubernetes.io/managed-by: stead}}
    spec:
      backoffLimit: 0
      template:
        spec:
          restartPolicy: Never
          containers: [{name: migrate, image: busybox, command: ["true"]}]
    """)


@pytest.mark.timeout(90)
def test_kubernetes_step_applies_waits_for_readiness_and_deletes(
    runner: Runner, kubectl: Kubectl, namespace: str
) -> None:
    apply = {"name": "apply", "steps": [{"id": "apply", "type": "kubernetes", "timeoutSeconds": 60, "parameters": {
        "manifest": MANIFEST, "namespace": namespace, "pollIntervalSeconds": 0.2}}]}
    uid, proc = runner.start(apply)
    try:
        job = wait_until(lambda: first_job(kubectl, namespace), 20, "the applied Job")
        cm = json.loads(kubectl("get", "configmap", "settings", "-n", namespace, "-o", "json",
                               "--show-managed-fields").stdout)
        assert cm["data"] == {"colour": "blue"}
        assert any(m.get("manager") == "stead" for m in cm["metadata"]["managedFields"])
        assert proc.poll() is None, "the step must wait until the Job is complete"
        write_job_status(kubectl, namespace, job["metadata"]["name"], "Complete")
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    assert runner.status(uid)["phase"] == "Succeeded"

    delete = {"name": "delete", "steps": [{"id": "delete", "type": "kubernetes", "timeoutSeconds": 60,
                                           "parameters": {"action": "delete", "manifest": MANIFEST,
                                                          "namespace": namespace, "pollIntervalSeconds": 0.2}}]}
    uid, proc = runner.start(delete)
    code, err = finish(proc)
    assert code == 0, err
    assert runner.status(uid)["phase"] == "Succeeded"
    assert kubectl("get", "configmap", "settings", "-n", namespace, check=False).returncode != 0
    assert kubectl("get", "job", "migrate", "-n", namespace, check=False).returncode != 0


# --- through the operator ---------------------------------------------------------------------------


@pytest.fixture
def jobs_operator(operator: OperatorProcess, cluster: ClusterInfo, namespace: str, tmp_path: Path
                  ) -> Iterator[OperatorProcess]:
    """An operator that runs untrusted namespaces' scripts as Jobs (the session's one stops meanwhile)."""
    operator.stop()
    proc = OperatorProcess(cluster, store=tmp_path / "op" / "store", log_path=tmp_path / "operator.log")
    proc.store.parent.mkdir()
    cmd = [
        str(STEAD), "run", "--kubeconfig", str(cluster.kubeconfig), "--store", str(proc.store),
        "--webhook-port", str(proc.webhook_port), "--health-port", str(proc.health_port), "--replica", "stead-0",
        "--config-api-port", str(proc.config_api_port), "--namespace", namespace,
        "--trust-local-namespaces", "--exec-in-jobs", "--job-image", "busybox:1.36",
    ]
    try:
        with proc.log_path.open("ab") as log:
            env = {**os.environ, "STEAD_HOME": str(proc.store.parent)}
            proc.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        wait_until(proc._ready, 60, "the operator's /readyz")
        yield proc
    finally:
        proc.stop()
        operator.start()


def app_spec() -> dict[str, Any]:
    return {
        "credentials": [{"name": "db", "type": "password", "username": "app",
                         "secret": {"secretRef": {"name": "app-db", "key": "password"}}}],
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [
            {"name": "create", "tasks": [{"name": "hello", "type": "exec",
                                          "script": "echo created S for @@{db.username}@@ @@{db.secret}@@"}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
    }


@pytest.mark.timeout(120)
def test_an_untrusted_namespace_runs_its_app_scripts_as_jobs(
    jobs_operator: OperatorProcess, kubectl: Kubectl, namespace: str, cluster: ClusterInfo
) -> None:
    wait_until(lambda: kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
               30, "the namespace's default service account")
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(RUNNER_ROLE))
    kubectl("create", "rolebinding", "stead-runner", "-n", namespace, "--role=stead-runner",
            f"--serviceaccount={namespace}:default")
    kubectl("create", "secret", "generic", "app-db", "-n", namespace, "--from-literal=password=jobs-pw-81c3")
    body = {"apiVersion": "stead.dev/v1alpha1", "kind": "Blueprint", "metadata": {"name": "small"},
            "spec": {"active": True, **app_spec()}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "blueprint/small")
    app = {"apiVersion": "stead.dev/v1alpha1", "kind": "App", "metadata": {"name": "demo"},
           "spec": {"blueprint": "small"}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(app))
    job = wait_until(lambda: first_job(kubectl, namespace), 40, "the script's Job", interval=0.2)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "default"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.36"
    assert creators(cluster, namespace, "jobs") == {f"system:serviceaccount:{namespace}:default"}
    # the credential's Secret was read with the namespace's rights, not the operator's
    assert creators(cluster, namespace, "secrets", verb="get", name="app-db") == {
        f"system:serviceaccount:{namespace}:default"}
    # the runner: its credential is a 0600 file whose path alone is in its environment
    (credentials,) = jobs_operator.store.parent.rglob("kube-credentials.json")
    assert credentials.stat().st_mode & 0o777 == 0o600
    pid = int((credentials.parent / "lock").read_text().strip())
    environ = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
    assert environ[CREDENTIALS_ENV] == str(credentials)
    assert not {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "STEAD_HOME"} & set(environ), environ
    assert json.loads(credentials.read_text())["token"] not in "\0".join(environ.values())
    write_job_status(kubectl, namespace, job["metadata"]["name"], "Complete")

    def finished() -> dict[str, Any] | None:
        found = kubectl("get", "actionrun", "demo-create", "-n", namespace, "-o", "json", check=False)
        status = json.loads(found.stdout).get("status") or {} if found.returncode == 0 else {}
        return status if status.get("state") in ("Succeeded", "Failed") else None

    status = wait_until(finished, 30, "the create run to end", interval=0.2)
    assert status["state"] == "Succeeded", status
    # the runner's token file is gone with the run; the runner never had the operator's credentials
    assert not list(jobs_operator.store.parent.rglob("kube-credentials.json"))
