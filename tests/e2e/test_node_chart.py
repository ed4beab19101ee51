"""The Helm chart installed on a real node (issue 24): the operator in its Pod, scripts in Job Pods.

`charts/stead` is installed with `helm install --wait` on the session's control plane and its local
node (containerd, runc, kubelet, kube-scheduler: `operators.cluster.node`), with the image that
`scripts/build-image.sh` builds (the session's `image` fixture) imported into the node's containerd:
nothing is pulled. The chart is used as it is: the operator authenticates with its ServiceAccount's
projected token (no kubeconfig is mounted), its store is the StatefulSet's claim (bound to a hostPath
PersistentVolume made here: there is no provisioner), and every script of an App runs as a Job in its
namespace (`actions.jobs`, the same image), under the namespace's service account.

One release for the module, in this order: every kind made Ready through the operator in its Pod; the
console's Pod Ready, without a token, serving its page with its CSP; a failing script fails its step
with the container's exit code and log; `helm upgrade` rolls the Pod with a run in flight, which is
neither lost nor repeated, and Provisioned objects are not written again (the store stayed on its
volume); a frozen operator (SIGSTOP from the host) is restarted by the kubelet through the liveness
probe and its run resumes (the runs' pauses wait for a gate the test opens once it saw the roll or the
restart, so the restart falls inside the run however slow the machine); `helm uninstall` keeps the
CRDs and the objects. The session's own operator process is stopped meanwhile (and its webhook
registrations removed: they would point at a process that is not there), and started again afterwards.

tests/e2e/test_node_sharding.py installs the chart with three sharded replicas.
"""

from __future__ import annotations

import contextlib
import copy
import http.server
import json
import os
import signal
import socket
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from operators.runtime.kube.admission import MUTATING_CONFIGURATION, WEBHOOK_CONFIGURATION
from operators.runtime.kube.client import USER_AGENT
from tests.e2e.conftest import (
    IMAGE_BUILD_SECONDS,
    ROOT,
    AuditEntry,
    AuditLog,
    Helm,
    HostVolumes,
    Kubectl,
    OperatorProcess,
)
from tests.e2e.test_apps import action_run, app, apply, blueprint, get, run_state
from tests.e2e.test_jobs import RUNNER_ROLE
from tests.e2e.test_services import catalog, in_state, instance, wait_for_builtins
from tests.polling import wait_until

if TYPE_CHECKING:
    from operators.cluster.node import LocalNode

CHART = ROOT / "charts" / "stead"
CRD_NAMES = sorted(yaml.safe_load(path.read_text())["metadata"]["name"] for path in (ROOT / "crds").glob("*.yaml"))
WRITES = frozenset({"create", "update", "patch", "delete"})
WEBHOOK_PORT = 9443  # the container's webhook port (charts/stead/templates/statefulset.yaml)
DELAY = 15  # the pause of a staged action without a gate (test_node_sharding's across-rollout)

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(os.geteuid() != 0, reason="a real node (containerd, runc, kubelet, a bridge) needs root"),
]

Manifest = dict[str, Any]


# --- the release ----------------------------------------------------------------------------------------


def merged(base: Manifest, changes: Manifest) -> Manifest:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def chart_values(image: str, node: LocalNode, **changes: Any) -> Manifest:
    """The chart's values for the image built here: imported into the node, never pulled; the store's
    claim matched by a PersistentVolume without a class; probes quick, so that tests wait little; the
    webhook taking reviews only from the API server (its webhook client certificate's CA)."""
    repository, _, tag = image.rpartition(":")
    values: Manifest = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "webhook": {"clientCA": node.plane.pki.webhook_client_ca_cert.read_text()},
        "persistence": {"storageClass": "-", "size": "1Gi"},
        "actions": {"jobs": {"image": image}},  # the same image: it has sh and python
        "startupProbe": {"periodSeconds": 1, "timeoutSeconds": 2, "failureThreshold": 120},
        "readinessProbe": {"periodSeconds": 1, "timeoutSeconds": 2, "failureThreshold": 3},
        "livenessProbe": {"periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3},
        "terminationGracePeriodSeconds": 10,
    }
    return merged(values, changes)


@dataclass
class ChartRelease:
    """One release of charts/stead, its values kept whole (every upgrade passes all of them)."""

    helm: Helm
    kubectl: Kubectl
    name: str
    namespace: str
    values: Manifest
    work: Path
    revision: int = 0
    installed: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def fullname(self) -> str:
        return f"{self.name}-stead"  # the chart's stead.fullname for a release name without "stead"

    @property
    def account(self) -> str:
        """The operator's user as the API server knows it: its ServiceAccount."""
        return f"system:serviceaccount:{self.namespace}:{self.fullname}"

    def pod_name(self, ordinal: int = 0) -> str:
        return f"{self.fullname}-{ordinal}"

    def store_claim(self, ordinal: int = 0) -> str:
        return f"store-{self.pod_name(ordinal)}"  # the StatefulSet's volumeClaimTemplate `store`

    def _values_file(self) -> Path:
        path = self.work / f"values-{self.revision}.yaml"
        path.write_text(yaml.safe_dump(self.values))
        return path

    def install(self, seconds: int = 300) -> float:
        started = time.monotonic()
        self.helm("install", self.name, str(CHART), "--namespace", self.namespace, "--values",
                  str(self._values_file()), "--wait", f"--timeout={seconds}s", timeout=seconds + 60)
        self.installed = True
        self.timings["helm install --wait s"] = took = time.monotonic() - started
        return took

    def upgrade(self, changes: Manifest, seconds: int = 300) -> float:
        self.values = merged(self.values, changes)
        self.revision += 1
        started = time.monotonic()
        self.helm("upgrade", self.name, str(CHART), "--namespace", self.namespace, "--values",
                  str(self._values_file()), "--wait", f"--timeout={seconds}s", timeout=seconds + 60)
        self.timings[f"helm upgrade {self.revision} --wait s"] = took = time.monotonic() - started
        return took

    def uninstall(self, check: bool = True) -> None:
        self.helm("uninstall", self.name, "--namespace", self.namespace, "--wait", "--timeout=180s",
                  check=check, timeout=240)
        self.installed = False

    def pod(self, ordinal: int = 0) -> Manifest:
        found: Manifest = json.loads(self.kubectl("get", "pod", self.pod_name(ordinal), "-n", self.namespace,
                                                  "-o", "json").stdout)
        return found

    def pods(self) -> list[Manifest]:
        out = self.kubectl("get", "pods", "-n", self.namespace, "-l",
                           f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component=operator",
                           "-o", "json")
        items: list[Manifest] = json.loads(out.stdout)["items"]
        return sorted(items, key=lambda p: str(p["metadata"]["name"]))

    def replaced(self, ordinal: int, old_uid: str, seconds: int = 120) -> Manifest:
        """The Pod of `ordinal` once a new one (not `old_uid`) is Ready."""
        def ready() -> Manifest | None:
            found = self.kubectl("get", "pod", self.pod_name(ordinal), "-n", self.namespace, "-o", "json",
                                 check=False)
            if found.returncode != 0:
                return None
            pod: Manifest = json.loads(found.stdout)
            conditions = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
            return pod if pod["metadata"]["uid"] != old_uid and conditions.get("Ready") == "True" else None

        found: Manifest = wait_until(ready, seconds, f"a new pod {self.pod_name(ordinal)} Ready", interval=0.2)
        return found

    def ready(self, ordinal: int = 0, seconds: int = 120) -> Manifest:
        """The Pod of `ordinal` once it exists and is Ready (a recreated one has no name for a moment)."""
        wait_until(lambda: self.kubectl("get", "pod", self.pod_name(ordinal), "-n", self.namespace,
                                        check=False).returncode == 0, seconds, f"pod {self.pod_name(ordinal)}",
                   interval=0.2)
        self.kubectl("wait", "--for=condition=Ready", "-n", self.namespace, f"--timeout={seconds}s",
                     f"pod/{self.pod_name(ordinal)}")
        return self.pod(ordinal)


def diagnose(release: ChartRelease, projects: list[str]) -> None:
    """After a failure, what explains it: the projects' Stead objects and Jobs, the claims, and the end of
    every operator Pod's log (also written whole beside the values files)."""
    kubectl = release.kubectl
    parts = []
    for project in projects:
        found = kubectl("get", "stead,jobs,pods", "-n", project, "-o", "wide", check=False)
        parts.append(f"--- {project}\n{found.stdout}{found.stderr}")
        found = kubectl("get", "apps,actionruns", "-n", project, "-o", "yaml", check=False)
        parts.append(found.stdout[-6000:])
    found = kubectl("get", "leases,pods", "-n", release.namespace, "-o", "wide", check=False)
    parts.append(f"--- {release.namespace}\n{found.stdout}{found.stderr}")
    for pod in release.pods():
        name = pod["metadata"]["name"]
        for previous in ((), ("--previous",)):
            log = kubectl("logs", name, "-n", release.namespace, "-c", "operator", *previous, check=False)
            (release.work / f"{name}{''.join(previous)}.log").write_text(log.stdout + log.stderr)
            parts.append(f"--- log of {name} {' '.join(previous)}\n" + "\n".join(log.stdout.splitlines()[-60:]))
    print(f"\n=== diagnostics (logs in {release.work})\n" + "\n".join(parts))


@contextlib.contextmanager
def session_operator_stopped(operator: OperatorProcess, kubectl: Kubectl) -> Iterator[None]:
    """The session's operator process stopped (it watches every namespace: it would act on the
    release's objects too), with its webhook registrations (URLs on this host, failurePolicy Fail:
    every Stead write would be refused while it is stopped); started again, registering them, after."""
    operator.stop()
    try:
        kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--ignore-not-found")
        kubectl("delete", "mutatingwebhookconfiguration", MUTATING_CONFIGURATION, "--ignore-not-found")
        yield
    finally:
        operator.start()


def adopt_crds(kubectl: Kubectl, release: ChartRelease) -> None:
    """CRDs installed before (`stead operator --install-crds`, an earlier release, whose uninstall kept
    them) given to this release, as the chart's README says: Helm refuses to take over others'."""
    for crd in kubectl("get", "crd", "-o", "name").stdout.split():
        if crd.endswith(".stead.dev"):
            kubectl("label", crd, "app.kubernetes.io/managed-by=Helm", "--overwrite")
            kubectl("annotate", crd, f"meta.helm.sh/release-name={release.name}",
                    f"meta.helm.sh/release-namespace={release.namespace}", "--overwrite")


def project_namespace(kubectl: Kubectl, name: str) -> None:
    """A namespace whose scripts run as Jobs: its default service account may run them (the Role the
    chart's README asks for), since the runner acts as that account, never as the operator."""
    kubectl("create", "namespace", name)
    wait_until(lambda: kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
               30, f"the default service account of {name}", interval=0.2)
    kubectl("apply", "-n", name, "-f", "-", input=json.dumps(RUNNER_ROLE))
    kubectl("create", "rolebinding", "stead-runner", "-n", name, "--role=stead-runner",
            f"--serviceaccount={name}:default")


class Gates:
    """Gates a step's script waits on: an HTTP server on the node's address (the Pods' bridge, on this
    host), answering 200 for a gate the test opened and 404 before. The test opens a gate once it has
    seen what must happen before the step may end (a restart), instead of hoping a delay is long enough."""

    def __init__(self, address: str) -> None:
        opened: set[str] = set()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200 if self.path.strip("/") in opened else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a poll a second: not worth the test's output

        self._opened = opened
        self._server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="gates", daemon=True)
        self._thread.start()

    def wait_script(self, name: str) -> str:
        """A shell script that polls the gate `name` (the image's python; no curl there) until it is open."""
        return (f"until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "
                f"{self.url}/{name} 2>/dev/null; do sleep 1; done; echo gate {name} open")

    def open(self, name: str) -> None:
        self._opened.add(name)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


# --- objects ----------------------------------------------------------------------------------------------


def staged(name: str, gates: Gates | None = None) -> Manifest:
    """An action of two scripts with a pause between them: a restart falls into the pause. With `gates`,
    the pause is a script (a Job) that waits until the test opens the gate `name`, which it does only once
    it has seen the restart: the run cannot end before it, however slow the machine. Without, a delay."""
    pause: Manifest = {"name": f"{name}-pause", "type": "delay", "delaySeconds": DELAY}
    if gates is not None:
        pause = {"name": f"{name}-pause", "type": "exec", "script": gates.wait_script(name)}
    return {"name": name, "tasks": [
        {"name": f"{name}-first", "type": "exec", "script": f"echo {name} first"}, pause,
        {"name": f"{name}-last", "type": "exec", "script": f"echo {name} last"}],
        "edges": [{"from": f"{name}-first", "to": f"{name}-pause"}, {"from": f"{name}-pause", "to": f"{name}-last"}]}


def node_spec(gates: Gates | None = None) -> Manifest:
    """The module's Blueprint; `gates` makes the pauses of across-upgrade and across-freeze wait for the test."""
    return {
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
            {"name": "hello", "type": "exec", "script": 'echo "created S in $(uname -n) as $(id -u)"'}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
        "actions": [
            {"name": "fail", "tasks": [
                {"name": "boom", "type": "exec", "script": "echo about to fail; echo the last words >&2; exit 3"}]},
            staged("across-upgrade", gates), staged("across-freeze", gates), staged("across-rollout"),
        ],
    }


def task(status: Manifest, name: str) -> Manifest:
    """A task of a run's log tree (runLog), by name."""
    found: list[Manifest] = [t for t in status.get("runLog") or [] if t.get("task") == name]
    assert len(found) == 1, f"task {name}: {len(found)} in the run log {json.dumps(status.get('runLog'))[:2000]}"
    return found[0]


def task_done(kubectl: Kubectl, namespace: str, run: str, name: str, seconds: float = 90) -> Manifest:
    """The run's status once its task `name` succeeded."""
    def done() -> Manifest | None:
        status: Manifest = get(kubectl, "actionrun", run, namespace).get("status") or {}
        if status.get("state") in ("Failed", "Aborted"):
            raise AssertionError(f"run {run} ended {status.get('state')}: {status.get('reason')}")
        found = [t for t in status.get("runLog") or [] if t.get("task") == name]
        return status if found and found[0].get("state") == "success" else None

    status: Manifest = wait_until(done, seconds, f"task {name} of run {run} done", interval=0.2)
    return status


def graph_run_ended(kubectl: Kubectl, namespace: str, name: str, seconds: float = 60) -> Manifest:
    def ended() -> Manifest | None:
        status: Manifest = get(kubectl, "graphrun", name, namespace).get("status") or {}
        return status if status.get("state") in ("Succeeded", "Failed", "Aborted") else None

    status: Manifest = wait_until(ended, seconds, f"GraphRun {name} to end", interval=0.2)
    return status


def jobs_of(kubectl: Kubectl, namespace: str, entry: Manifest) -> list[Manifest]:
    """The Jobs of a task's instances (annotation stead.dev/instance: step@target, as the runner names them)."""
    keys = {f"{entry['step']}@{r['target']}" if r.get("target") else str(entry["step"]) for r in entry["replicas"]}
    out = kubectl("get", "jobs", "-n", namespace, "-l", "app.kubernetes.io/managed-by=stead", "-o", "json")
    return [j for j in json.loads(out.stdout)["items"]
            if (j["metadata"].get("annotations") or {}).get("stead.dev/instance") in keys]


def ran_once(kubectl: Kubectl, namespace: str, status: Manifest, *names: str) -> None:
    """Each task ran one attempt, as one Job: nothing repeated."""
    for name in names:
        entry = task(status, name)
        assert [r["attempts"] for r in entry["replicas"]] == [1], entry
        assert len(jobs_of(kubectl, namespace, entry)) == 1, f"task {name}: Jobs {jobs_of(kubectl, namespace, entry)}"


def operator_writes(audit: AuditLog, mark: int) -> list[AuditEntry]:
    """Successful writes by the operator (any replica) since `mark`."""
    return [e for e in audit.since(mark) if e.user_agent.startswith(USER_AGENT) and e.verb in WRITES
            and 200 <= e.code < 300]


def status_writes(entries: list[AuditEntry], namespace: str) -> set[tuple[str, str]]:
    return {(e.resource, e.name) for e in entries if e.namespace == namespace and e.subresource == "status"}


# --- the Pod, seen from the host --------------------------------------------------------------------------


def container(pod: Manifest, name: str = "operator") -> Manifest:
    found: list[Manifest] = [c for c in pod["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, f"container {name}: {len(found)} in the Pod"
    return found[0]


def container_status(pod: Manifest, name: str = "operator") -> Manifest:
    found: list[Manifest] = [c for c in (pod.get("status") or {}).get("containerStatuses") or []
                             if c["name"] == name]
    assert len(found) == 1, f"container {name}: {len(found)} statuses in the Pod"
    return found[0]


def restarts(pod: Manifest) -> int:
    return int(container_status(pod).get("restartCount") or 0)


def container_pid(container_id: str) -> int:
    """The host pid of a container's first process (pid 1 in its namespace), found by its cgroup, which
    names the container's id whatever the cgroup driver."""
    cid = container_id.split("://", 1)[-1]
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if cid not in (proc / "cgroup").read_text():
                continue
            nspid = next(line.split()[1:] for line in (proc / "status").read_text().splitlines()
                         if line.startswith("NSpid:"))
        except (OSError, StopIteration):
            continue
        if nspid and nspid[-1] == "1":
            found.append(int(proc.name))
    assert len(found) == 1, f"container {cid}: first processes {found}"
    return found[0]


def metric_total(pod: Manifest, name: str) -> float:
    """The sum of a metric's samples, from the Pod's /metrics (its IP is reachable from the host)."""
    url = f"http://{pod['status']['podIP']}:8080/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name)


# --- the module's release ---------------------------------------------------------------------------------


@dataclass
class Single:
    release: ChartRelease
    project: str
    """The namespace of the test objects."""
    store: Path
    """The host directory of the store's PersistentVolume."""
    install_mark: int
    gates: Gates
    """What the staged actions' pauses wait for (node_spec)."""


@pytest.fixture(scope="module")
def single(node: LocalNode, node_image: str, helm_cli: Helm, kubectl: Kubectl, operator: OperatorProcess,
           audit: AuditLog, host_volumes: HostVolumes, tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[Single]:
    suffix = uuid.uuid4().hex[:6]
    release = ChartRelease(helm_cli, kubectl, "nodeop", f"stead-node-{suffix}", chart_values(node_image, node),
                           tmp_path_factory.mktemp("node-chart"))
    project = f"t-node-chart-{suffix}"
    failed = request.session.testsfailed
    gates = Gates(node.network.node_ip)
    with session_operator_stopped(operator, kubectl):
        try:
            kubectl("create", "namespace", release.namespace)
            store = host_volumes.add(release.namespace, release.store_claim(0))
            adopt_crds(kubectl, release)
            project_namespace(kubectl, project)
            mark = audit.mark()
            release.install()
            yield Single(release, project, store, mark, gates)
        finally:
            if request.session.testsfailed > failed and release.installed:
                diagnose(release, [project])
            if release.installed:
                release.uninstall(check=False)
            kubectl("delete", "namespace", project, release.namespace, "--wait=false", check=False)
            gates.close()
            print("\nnode chart timings: " + ", ".join(f"{k} {v:.1f}" for k, v in release.timings.items()))


def review_answer(address: str, certificate: tuple[Path, Path] | None) -> bytes:
    """The first bytes the operator's webhook port answers an AdmissionReview with, sent over TLS with
    `certificate` (or none)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if certificate is not None:
        context.load_cert_chain(*certificate)
    review = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "request": {"uid": "forged"}}).encode()
    with socket.create_connection((address, WEBHOOK_PORT), timeout=10) as raw, context.wrap_socket(raw) as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(review), review))
        answer = tls.recv(64)  # TLS 1.3: a refused certificate shows at the first read
    if not answer:
        raise ConnectionResetError("closed without an answer")
    return answer


# --- the tests, in order -------------------------------------------------------------------------------------


@pytest.mark.timeout(IMAGE_BUILD_SECONDS + 600)  # its setup may build the image and start the node
def test_the_operator_in_its_pod_makes_every_kind_ready_with_its_service_account_only(
        single: Single, node: LocalNode, kubectl: Kubectl, audit: AuditLog) -> None:
    release, ns = single.release, single.project
    pod = release.pod()
    assert pod["spec"]["nodeName"] == node.name
    # Only the ServiceAccount's projected token: no kubeconfig, no other credential mounted.
    spec = container(pod)
    assert "KUBECONFIG" not in {e["name"] for e in spec.get("env") or []}
    assert not spec.get("envFrom")
    assert not [a for a in spec["args"] if "kubeconfig" in a]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    tokens = [v for v in volumes.values() if any("serviceAccountToken" in s for s in (v.get("projected") or {})
                                                 .get("sources") or [])]
    assert len(tokens) == 1, volumes
    assert {n for n, v in volumes.items() if "secret" in v} == {"webhook-tls"}
    assert not [v for v in volumes.values() if "hostPath" in v]
    # The one ConfigMap: the CA of the API server's webhook client certificate, nothing else is let in.
    assert [n for n, v in volumes.items() if "configMap" in v] == ["webhook-client-ca"]
    assert "--webhook-client-ca=/etc/stead/webhook-client-ca/ca.crt" in spec["args"]
    assert volumes["store"]["persistentVolumeClaim"]["claimName"] == release.store_claim(0)
    # A review sent to the Pod by anyone but the API server ends at the TLS handshake (issue 25, finding 2);
    # with the API server's webhook client certificate, the same bytes get an HTTP answer.
    pki = node.plane.pki
    assert review_answer(pod["status"]["podIP"], (pki.apiserver_webhook_client_cert, pki.apiserver_webhook_client_key))
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        review_answer(pod["status"]["podIP"], None)

    started = time.monotonic()
    kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / "environment.yaml"))
    apply(kubectl, blueprint("node", ns, node_spec(single.gates)))
    kubectl("wait", "--for=condition=Ready", "-n", ns, "--timeout=60s", "environment/demo", "blueprint/node")
    apply(kubectl, app("demo", ns, "node"))
    wait_for_builtins(kubectl)  # the operator in the Pod installs the built-in lifecycles
    catalog(kubectl, ns)  # a Blueprint and a ServiceEntity of lifecycle `simple`
    apply(kubectl, instance("svc", ns, who="node"))
    kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / "graph-environment.yaml"))  # a dry-run GraphRun
    kubectl("wait", "--for=condition=Ready", "-n", ns, "--timeout=120s", "app/demo")
    up = in_state(kubectl, ns, "svc", "up", seconds=120)
    assert up["activeAttributes"]["address"] == "host-node"  # set by a script that ran as a Job
    kubectl("wait", "--for=condition=Ready", "-n", ns, "--timeout=60s", "environments,deploymentgraphs,graphruns",
            "--all")
    plan = graph_run_ended(kubectl, ns, "plan-1")
    assert plan["state"] == "Succeeded" and plan["plan"]["planned"] == 3, plan
    release.timings["objects Ready s"] = time.monotonic() - started

    # The create action's script ran as a Job, in a Pod on the node, under the namespace's account.
    create = get(kubectl, "actionrun", "demo-create", ns)["status"]
    assert create["state"] == "Succeeded", create
    hello = task(create, "S/hello")  # a service action's task: <service>/<task>
    assert "created S in " in hello["replicas"][0]["output"] and "as 65532" in hello["replicas"][0]["output"], hello
    [job] = jobs_of(kubectl, ns, hello)
    pods = json.loads(kubectl("get", "pods", "-n", ns, "-l", f"job-name={job['metadata']['name']}", "-o",
                              "json").stdout)["items"]
    assert [(p["spec"]["nodeName"], p["status"]["phase"]) for p in pods] == [(node.name, "Succeeded")]
    assert pods[0]["spec"]["serviceAccountName"] == "default"

    entries = audit.since(single.install_mark)
    mine = [e for e in entries if e.user_agent.startswith(USER_AGENT)]
    assert mine and {e.user for e in mine} == {release.account}  # the Pod's ServiceAccount, nothing else
    pod_ip = release.pod()["status"]["podIP"]
    assert {e.source_ips[0] for e in mine if e.source_ips} == {pod_ip}  # from the Pod, not from this host
    written = status_writes([e for e in mine if e.verb in WRITES and 200 <= e.code < 300], ns)
    assert {("environments", "demo"), ("apps", "demo"), ("serviceinstances", "svc"), ("graphruns", "plan-1"),
            ("actionruns", "demo-create")} <= written
    job_creators = {e.user for e in entries if e.verb == "create" and e.resource == "jobs" and e.namespace == ns
                    and 200 <= e.code < 300}
    assert job_creators == {f"system:serviceaccount:{ns}:default"}


@pytest.mark.timeout(120)
def test_the_console_pod_is_ready_without_a_token_and_serves_its_sign_in_page_with_its_csp(
        single: Single, kubectl: Kubectl) -> None:
    """The chart's console (issue 29) on the node: Ready (`helm install --wait` waited for it), with no
    ServiceAccount token in its Pod (it acts only with its users' tokens), its page served from the
    Pod's address with the strict Content-Security-Policy, and a user's token signs in."""
    release = single.release
    [pod] = json.loads(kubectl("get", "pods", "-n", release.namespace, "-l",
                               f"app.kubernetes.io/instance={release.name},app.kubernetes.io/component=console",
                               "-o", "json").stdout)["items"]
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    sources = [s for v in pod["spec"]["volumes"] for s in (v.get("projected") or {}).get("sources") or []]
    assert not [s for s in sources if "serviceAccountToken" in s], sources
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8090/console/", timeout=10) as answer:
        assert answer.status == 200
        policy = answer.headers["Content-Security-Policy"]
        page = answer.read().decode()
    directives = dict(d.strip().partition(" ")[::2] for d in policy.split(";") if d.strip())
    assert directives["default-src"] in ("'none'", "'self'") and directives["script-src"] == "'self'", policy
    assert "unsafe" not in policy, policy  # no inline script or style, no eval
    assert "<script" in page and 'type="module"' in page, page[:500]
    # A sign-in reaches the API server with the user's token alone, trusting the CA the Pod was given.
    token = kubectl("create", "token", "default", "-n", single.project).stdout.strip()
    sign_in = urllib.request.Request(f"http://{pod['status']['podIP']}:8090/console/api/session", method="POST",
                                     data=json.dumps({"token": token}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(sign_in, timeout=30) as answer:
        session = json.loads(answer.read())
    assert session["user"] == f"system:serviceaccount:{single.project}:default", session
    status = Path(f"/proc/{container_pid(container_status(pod, 'console')['containerID'])}/status").read_text()
    rss = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
    release.timings["console RSS MiB (idle)"] = int(rss) / 1024


@pytest.mark.timeout(300)
def test_a_failing_script_fails_its_step_with_the_containers_exit_code_and_log(
        single: Single, kubectl: Kubectl) -> None:
    ns = single.project
    apply(kubectl, action_run("boom-1", ns, "demo", "fail"))
    status = run_state(kubectl, ns, "boom-1", "Failed", "Succeeded", "Aborted", seconds=120)
    assert status["state"] == "Failed", status
    assert "exited with code 3" in str(status.get("reason")), status
    boom = task(status, "boom")
    [instance_] = boom["replicas"]
    assert instance_["state"] == "failure" and instance_["exitCode"] == 3, instance_
    assert "about to fail" in instance_["output"] and "the last words" in instance_["output"], instance_
    [job] = jobs_of(kubectl, ns, boom)
    [pod] = json.loads(kubectl("get", "pods", "-n", ns, "-l", f"job-name={job['metadata']['name']}", "-o",
                               "json").stdout)["items"]
    assert container_status(pod, "step")["state"]["terminated"]["exitCode"] == 3


@pytest.mark.timeout(600)
def test_helm_upgrade_rolls_the_pod_and_no_run_is_lost_or_repeated(
        single: Single, kubectl: Kubectl, audit: AuditLog) -> None:
    release, ns = single.release, single.project
    before = release.pod()
    store = {path: path.stat().st_ino for path in single.store.rglob("*.mdb")}
    assert store, f"no LMDB file on the store's volume {single.store}"
    untouched = {("environments", "demo"), ("blueprints", "node"), ("serviceinstances", "svc"),
                 ("graphruns", "plan-1"), ("actionruns", "demo-create"), ("actionruns", "boom-1"),
                 ("environments", "graphs-demo")}
    mark = audit.mark()
    apply(kubectl, action_run("upgrade-1", ns, "demo", "across-upgrade"))
    task_done(kubectl, ns, "upgrade-1", "across-upgrade-first")

    release.upgrade({"podAnnotations": {"stead.dev/e2e-revision": "2"}, "verbose": True})
    after = release.pod()
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "the Pod was not rolled"
    assert after["metadata"]["annotations"]["stead.dev/e2e-revision"] == "2"
    assert "--verbose" in container(after)["args"]
    assert restarts(after) == 0
    single.gates.open("across-upgrade")  # the new Pod is Ready: the run's pause may end

    status = run_state(kubectl, ns, "upgrade-1", "Succeeded", "Failed", "Aborted", seconds=180)
    assert status["state"] == "Succeeded", status
    assert status["runnerStarts"] == 2, f"the run did not go across the restart: {status}"
    ran_once(kubectl, ns, status, "across-upgrade-first", "across-upgrade-last")

    # The store stayed on its volume: the same files, and nothing adopted from status into an empty store.
    assert {path: path.stat().st_ino for path in store if path.exists()} == store
    # (its first listing found each Provisioned object's record: skipped, none taken from status)
    assert metric_total(release.pod(), "stead_reconcile_skipped_total") > 0
    assert metric_total(release.pod(), "stead_store_adopted_total") == 0
    # Provisioned objects were not processed again: no status write since the upgrade began.
    assert not status_writes(operator_writes(audit, mark), ns) & untouched
    assert get(kubectl, "environment", "demo", ns)["status"]["phase"] == "Provisioned"


@pytest.mark.timeout(600)
def test_a_frozen_operator_is_restarted_by_its_liveness_probe_and_its_run_resumes(
        single: Single, kubectl: Kubectl) -> None:
    release, ns = single.release, single.project
    pod = release.pod()
    count = restarts(pod)
    apply(kubectl, action_run("freeze-1", ns, "demo", "across-freeze"))
    task_done(kubectl, ns, "freeze-1", "across-freeze-first")

    pid = container_pid(container_status(pod)["containerID"])
    os.kill(pid, signal.SIGSTOP)  # from the host: pid 1 of its namespace ignores SIGSTOP sent from inside
    frozen = time.monotonic()
    try:
        wait_until(lambda: restarts(release.pod()) > count, 90, "the kubelet to restart the frozen operator",
                   interval=0.2)
        release.timings["frozen -> restarted s"] = time.monotonic() - frozen
        again = release.ready(0)
        release.timings["frozen -> Ready again s"] = time.monotonic() - frozen
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # only matters when the kubelet did not kill it: the test failed
        single.gates.open("across-freeze")  # restarted (or failed): the run's pause may end
    assert restarts(again) == count + 1
    assert again["metadata"]["uid"] == pod["metadata"]["uid"]  # the same Pod: its container restarted
    events = json.loads(kubectl("get", "events", "-n", release.namespace, "--field-selector",
                                f"involvedObject.name={release.pod_name(0)},reason=Unhealthy", "-o",
                                "json").stdout)["items"]
    assert any("Liveness probe failed" in str(e.get("message")) for e in events), events

    status = run_state(kubectl, ns, "freeze-1", "Succeeded", "Failed", "Aborted", seconds=180)
    assert status["state"] == "Succeeded", status
    assert status["runnerStarts"] == 2, f"the run did not go across the restart: {status}"
    ran_once(kubectl, ns, status, "across-freeze-first", "across-freeze-last")


@pytest.mark.timeout(300)
def test_helm_uninstall_keeps_the_crds_and_the_stead_objects(single: Single, kubectl: Kubectl) -> None:
    release, ns = single.release, single.project
    release.uninstall()
    assert kubectl("get", "statefulset", release.fullname, "-n", release.namespace, check=False).returncode != 0
    wait_until(lambda: not release.pods(), 60, "the operator's Pod gone", interval=0.2)
    for name in CRD_NAMES:
        crd = json.loads(kubectl("get", "crd", name, "-o", "json").stdout)
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"].get("deletionTimestamp") is None
    for kind, name in (("environment", "demo"), ("blueprint", "node"), ("app", "demo"),
                       ("actionrun", "upgrade-1"), ("actionrun", "freeze-1"), ("serviceinstance", "svc"),
                       ("graphrun", "plan-1")):
        assert get(kubectl, kind, name, ns)["metadata"].get("deletionTimestamp") is None
    for kind, name in (("validatingwebhookconfiguration", f"{release.fullname}-validation"),
                       ("mutatingwebhookconfiguration", f"{release.fullname}-mutation")):
        found = kubectl("get", kind, name, check=False)
        assert found.returncode != 0 and "NotFound" in found.stderr, found.stdout
