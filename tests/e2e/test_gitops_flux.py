"""A real GitOps loop (issue 30): Flux's source-controller and kustomize-controller, built from the Go
module proxy (`stead cluster build --flux`), run as processes against the session's control plane and
follow a git repository holding examples/gitops, served by the project's real sshd on loopback
(tests/sshd.py: Flux clones over SSH, with a key and known_hosts from a Secret, as from any git host).

The Kustomization has `wait: true`: Flux judges Stead's objects by kstatus (Ready, Reconciling, Stalled
and observedGeneration), so it is Ready only once they are, and a Stalled one fails it, by name.
Reconciles are asked for with the `reconcile.fluxcd.io/requestedAt` annotation, never waited for.

The test's name starts with `test_app`: its namespace is one the session's operator trusts to run the
examples' Local scripts on its host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cluster import ClusterInfo
from operators.cluster.build import FluxBinaries, ensure_flux_binaries
from tests.e2e.conftest import ROOT, Kubectl, free_port, stop_process, wait_until
from tests.e2e.test_apps import get
from tests.e2e.test_services import in_state, walk
from tests.sshd import SshNodes, ssh_nodes  # noqa: F401  (the module-scoped fixture)

EXAMPLE = ROOT / "examples" / "gitops"
FLUX_NAMESPACE = "flux-system"
"""RUNTIME_NAMESPACE of both controllers (they watch every namespace)."""
STEAD_KINDS = ("environment/lab", "blueprint/greeter", "app/welcome", "serviceentity/greeter",
               "serviceinstance/hello")
"""What overlays/dev applies of Stead's, besides a Role and its RoleBinding."""


@dataclass
class FluxController:
    """One controller as a process: its own metrics and health ports on loopback, no leader election."""

    name: str
    binary: Path
    kubeconfig: Path
    log_path: Path
    extra_args: tuple[str, ...] = ()
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [str(self.binary), f"--metrics-addr=127.0.0.1:{self.metrics_port}",
               f"--health-addr=127.0.0.1:{self.health_port}", "--enable-leader-election=false",
               *self.extra_args]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "RUNTIME_NAMESPACE": FLUX_NAMESPACE}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            stdin=subprocess.DEVNULL)
        try:
            wait_until(self._ready, 60, f"{self.name}'s /readyz", interval=0.2)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.process.returncode}:\n"
                                 f"{self.log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        stop_process(self.process)


@pytest.fixture(scope="module")
def flux_binaries() -> FluxBinaries:
    return ensure_flux_binaries(progress=lambda line: print(line, file=sys.stderr))


@pytest.fixture(scope="module")
def flux(cluster: ClusterInfo, kubectl: Kubectl, flux_binaries: FluxBinaries,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[FluxController]]:
    """Flux's CRDs (of the controllers' own version) on the plane, and both controllers running."""
    work = tmp_path_factory.mktemp("flux")
    for crd in flux_binaries.crds:  # server-side: the CRDs are too big for the last-applied annotation
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/gitrepositories.source.toolkit.fluxcd.io",
            "crd/kustomizations.kustomize.toolkit.fluxcd.io")
    kubectl("create", "namespace", FLUX_NAMESPACE, check=False)
    storage = free_port()
    (work / "artifacts").mkdir()  # source-controller refuses a storage path that does not exist
    controllers = [
        FluxController("source-controller", flux_binaries.source_controller, cluster.kubeconfig,
                       work / "source-controller.log",
                       (f"--storage-path={work / 'artifacts'}", f"--storage-addr=127.0.0.1:{storage}",
                        f"--storage-adv-addr=127.0.0.1:{storage}")),
        FluxController("kustomize-controller", flux_binaries.kustomize_controller, cluster.kubeconfig,
                       work / "kustomize-controller.log"),
    ]
    try:
        for controller in controllers:
            controller.start()
        yield controllers
    finally:
        for controller in controllers:
            controller.stop()


@dataclass
class Repository:
    """A bare repository that sshd serves, and a working copy of it where the test commits."""

    bare: Path
    work: Path

    def git(self, *args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "tester", "GIT_AUTHOR_EMAIL": "tester@example.com",
               "GIT_COMMITTER_NAME": "tester", "GIT_COMMITTER_EMAIL": "tester@example.com"}
        done = subprocess.run(["git", *args], cwd=self.work, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
        return done.stdout.strip()

    def commit(self, message: str) -> str:
        """Commit everything and push to the served repository: the new revision's sha."""
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        self.git("push", "-q", str(self.bare), "main")
        return self.git("rev-parse", "HEAD")

    def edit(self, path: str, change: Any) -> None:
        """Load a YAML file of the working copy, let `change` modify it, write it back."""
        file = self.work / path
        body = yaml.safe_load(file.read_text())
        change(body)
        file.write_text(yaml.safe_dump(body, sort_keys=False))


@pytest.fixture
def repository(ssh_nodes: SshNodes) -> Iterator[Repository]:  # noqa: F811
    root = ssh_nodes.root / f"git-{time.monotonic_ns()}"
    repo = Repository(bare=root / "stead-config.git", work=root / "work")
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(repo.bare)], check=True, timeout=30)
    shutil.copytree(EXAMPLE, repo.work)
    repo.git("init", "-q", "-b", "main")
    try:
        yield repo
    finally:
        shutil.rmtree(root, ignore_errors=True)


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    """The Ready condition of an object ({} before it has one)."""
    found: dict[str, Any] = next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})
    return found


def stead_not_ready(kubectl: Kubectl, namespace: str) -> list[str]:
    """Stead's objects of the overlay that are not Ready at their generation."""
    found = json.loads(kubectl("get", *STEAD_KINDS, "-n", namespace, "-o", "json").stdout)["items"]
    assert len(found) == len(STEAD_KINDS)
    return [f"{o['kind']}/{o['metadata']['name']}" for o in found
            if ready(o).get("status") != "True"
            or (o.get("status") or {}).get("observedGeneration") != o["metadata"]["generation"]]


def request_reconcile(kubectl: Kubectl, namespace: str, kind: str, name: str) -> None:
    kubectl("annotate", "--overwrite", "-n", namespace, kind, name,
            f"reconcile.fluxcd.io/requestedAt={time.time_ns()}")


def synced(kubectl: Kubectl, namespace: str, revision: str, seconds: float = 60,
           verdicts: tuple[str, ...] = ("True", "False")) -> dict[str, Any]:
    """Ask Flux to fetch `revision` and apply it; the Kustomization once its health check has a verdict
    on that revision (Ready True or False, or only those of `verdicts`), checking at each look that it is
    never Ready while one of Stead's objects is not: the objects are read after the Kustomization, so they
    are at least as far."""
    request_reconcile(kubectl, namespace, "gitrepository", "stead-config")
    wait_until(lambda: revision in ((get(kubectl, "gitrepository", "stead-config", namespace).get("status") or {})
                                    .get("artifact") or {}).get("revision", ""),
               30, f"source-controller's artifact of {revision}", interval=0.2)
    request_reconcile(kubectl, namespace, "kustomization", "stead-dev")

    def verdict() -> dict[str, Any] | None:
        kustomization = get(kubectl, "kustomization", "stead-dev", namespace)
        condition = ready(kustomization)
        if condition.get("status") == "True":
            assert not (waiting := stead_not_ready(kubectl, namespace)), (
                f"the Kustomization is Ready while {waiting} are not: {condition}")
        attempted = (kustomization.get("status") or {}).get("lastAttemptedRevision", "")
        if revision in attempted and condition.get("status") in verdicts:
            return kustomization
        return None

    found: dict[str, Any] = wait_until(verdict, seconds, f"Flux's verdict on {revision}", interval=0.2)
    return found


def test_app_gitops_flux_applies_waits_for_stead_and_reports_a_stalled_object(
        operator: object, kubectl: Kubectl, namespace: str, flux: list[FluxController], ssh_nodes: SshNodes,  # noqa: F811
        repository: Repository) -> None:
    started = time.monotonic()
    # Secrets by reference: the value is put beside the objects, never committed; Flux's SSH key likewise.
    kubectl("create", "secret", "generic", "greeter-credentials", "-n", namespace, "--from-literal=password=s3cr3t")
    kubectl("create", "secret", "generic", "git-ssh", "-n", namespace,
            f"--from-literal=identity={ssh_nodes.private_key}", f"--from-literal=known_hosts={ssh_nodes.known_hosts}")
    first = repository.commit("Stead's objects, base and overlays")
    node = ssh_nodes.nodes[0]
    sync = list(yaml.safe_load_all((EXAMPLE / "flux" / "sync.yaml").read_text()))
    source, kustomization = sync
    source["metadata"]["namespace"] = kustomization["metadata"]["namespace"] = namespace
    source["spec"].update(url=f"ssh://{ssh_nodes.user}@{node.address}:{node.port}{repository.bare}",
                          secretRef={"name": "git-ssh"}, interval="1h")
    # the test's namespace instead of overlays/dev's; retries soon after a failure; requests do the rest
    kustomization["spec"].update(targetNamespace=namespace, interval="1h", retryInterval="2s", timeout="60s")
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": sync}))
    try:
        # 1. Applied, and Ready only once Stead's objects are (checked at every look by `synced`).
        applied = synced(kubectl, namespace, first, seconds=90)
        assert ready(applied)["status"] == "True", ready(applied)
        assert stead_not_ready(kubectl, namespace) == []
        inventory = {entry["id"] for entry in applied["status"]["inventory"]["entries"]}
        assert f"{namespace}_hello_stead.dev_ServiceInstance" in inventory
        hello = get(kubectl, "serviceinstance", "hello", namespace)["status"]
        assert hello["state"] == "up" and hello["activeAttributes"]["address"] == "greeter-dev.eu.example"
        version = hello["version"]

        # 2. A broken Blueprint (a dependency cycle: admitted, then Stalled by the compiler): Flux names it.
        def cycle(blueprint: dict[str, Any]) -> None:
            blueprint["spec"]["services"][0]["dependsOn"] = ["T"]
            blueprint["spec"]["services"].append({"name": "T", "dependsOn": ["S"]})
            blueprint["spec"]["deployments"][0]["services"].append("T")

        repository.edit("base/blueprint.yaml", cycle)
        broken = synced(kubectl, namespace, repository.commit("a cycle in the greeter"))
        message = ready(broken)["message"]
        print(f"\nFlux on the broken Blueprint: {message}", file=sys.stderr)
        assert ready(broken)["reason"] == "HealthCheckFailed", ready(broken)
        assert f"Blueprint/{namespace}/greeter status: 'Failed'" in message, message
        # Flux's message names the object and its kstatus; Stead's own words are on the object it names
        stalled = next(c for c in get(kubectl, "blueprint", "greeter", namespace)["status"]["conditions"]
                       if c["type"] == "Stalled")
        assert stalled["status"] == "True" and stalled["reason"] == "DependencyCycle"
        assert "dependency cycle: S -> T -> S" in stalled["message"], stalled

        # 3. Reverted: everything Ready again. Flux may judge the revision once before Stead's objects have
        # recovered from the cycle (kstatus' Failed ends its wait early) and tries again after retryInterval:
        # the verdict awaited is Ready.
        repository.git("revert", "--no-commit", "HEAD")
        reverted = synced(kubectl, namespace, repository.commit("revert the cycle"), verdicts=("True",))
        assert ready(reverted)["status"] == "True", ready(reverted)

        # 4. An attribute of the instance changed in git: the lifecycle runs its update.
        repository.edit("overlays/dev/instance.yaml", lambda body: body["spec"]["attributes"].update(who="ops"))
        updated = synced(kubectl, namespace, repository.commit("greet ops in dev"))
        assert ready(updated)["status"] == "True", ready(updated)
        hello = in_state(kubectl, namespace, "hello", "up", version_above=version, seconds=5)
        assert walk(hello, version) == [("up", "update_start", "on_update"),
                                        ("update_start", "update_acknowledged", "auto"),
                                        ("update_acknowledged", "update_inprogress", "auto"),
                                        ("update_inprogress", "up", "resource_based")]
        assert hello["activeAttributes"]["who"] == "ops" and hello["rollbackAttributes"]["who"] == "dev"
        assert hello["activeAttributes"]["address"] == "greeter-ops.eu.example"
        runs = json.loads(kubectl("get", "actionruns", "-n", namespace, "-o", "json").stdout)["items"]
        [update] = [r for r in runs if r["spec"]["app"] == "hello" and r["spec"]["action"] == "update"]
        assert update["status"]["state"] == "Succeeded"
        assert "now greeting ops in eu" in json.dumps(update["status"]["runLog"])
        print(f"\ngitops loop: {time.monotonic() - started:.1f}s", file=sys.stderr)
    finally:
        # Flux's finalizers need its controllers: delete its objects while they run (pruning what they applied).
        kubectl("delete", "-n", namespace, "kustomization/stead-dev", "gitrepository/stead-config",
                "--timeout=60s", check=False)
