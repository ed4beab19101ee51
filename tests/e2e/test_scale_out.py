"""Three operator processes sharing one API server (`--sharding leases`): they split the projects,
never write for a project they do not hold, and hand projects over on kill -9, SIGTERM and a pause.

Each replica is `stead operator --replica-id rN --sharding leases --lease-seconds 2` with its own
store, health and config-API ports; only r0 serves and registers the admission webhooks (the
others run with `--webhook off`: two registrations would point the API server at whichever wrote
last). Workflow runs keep their state in one directory the three share (`--pipelines-state`), so
a run in flight on a replica that dies is followed by the project's new owner from its finished
steps. Every write is attributed to its replica by the user agent `stead-operator/<replica-id>`;
who held which project when is rebuilt from the claim Leases' updates in the same audit log.

After the hand-over tests: the claim of a project whose objects are all deleted is deleted by its
holder (and only that claim), the project claimed afresh when it comes back; then scaling 2 -> 3
over 100 more projects, with the fraction of projects that moved measured from the claims'
holders before and after, against the ideal 1/3.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import signal
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from operators.cluster import ClusterInfo
from operators.runtime.kube.client import USER_AGENT, ApiError, KubeClient, custom_path, load_access
from operators.runtime.shard import Ring, bucket_of, by_bucket, claim_name
from tests.e2e.conftest import AuditLog, Kubectl, OperatorProcess, env_manifest
from tests.e2e.test_apps import action_run, app, apply, blueprint, get, run_state, small_spec
from tests.e2e.test_services import catalog, in_state, instance, wait_for_builtins
from tests.polling import wait_until

OPERATOR_NAMESPACE = "stead-system"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LEASE = 2
REPLICAS = ("r0", "r1", "r2")
PROJECTS = 30
GROWN = 100  # projects of the 2 -> 3 test, named so that the ring's moved fraction is deterministic
MOVE_TOLERANCE = 1.2  # as bench/scale_out.py: the moved fraction within 1.2x of the ideal
WRITES = frozenset({"create", "update", "patch", "delete"})
CLAIM_PREFIX = claim_name("x")[:-1]


@dataclass
class Cluster:
    replicas: dict[str, OperatorProcess]
    namespaces: list[str]
    work: Path
    legacy: str = ""
    """A namespace whose Environment was created before sharding was on (no bucket label)."""
    audit_start: int = 0
    figures: dict[str, float] = field(default_factory=dict)

    def start(self, name: str) -> None:
        self.replicas[name].start()

    def holders(self, kubectl: Kubectl) -> dict[str, str]:
        """Project -> holder, from the claim Leases (free claims: holder "")."""
        out = json.loads(kubectl("get", "leases", "-n", OPERATOR_NAMESPACE, "-l", "stead.dev/role=claim",
                                 "-o", "json").stdout)
        return {lease["metadata"]["labels"]["stead.dev/project"]: lease["spec"].get("holderIdentity") or ""
                for lease in out["items"]}

    def claim(self, kubectl: Kubectl, project: str) -> dict[str, Any] | None:
        """The project's claim Lease, or None when there is none."""
        found = kubectl("get", "lease", claim_name(project), "-n", OPERATOR_NAMESPACE, "-o", "json", check=False)
        if found.returncode != 0:
            if "NotFound" in found.stderr:
                return None
            raise AssertionError(f"kubectl get lease failed: {found.stderr}")
        lease: dict[str, Any] = json.loads(found.stdout)
        return lease


def replica(cluster_work: Path, name: str, operator: OperatorProcess, runs: Path) -> OperatorProcess:
    webhook = () if name == "r0" else ("--webhook", "off")
    return OperatorProcess(
        operator.cluster, store=cluster_work / name / "store", log_path=cluster_work / f"{name}.log",
        extra_args=("--replica-id", name, "--sharding", "leases", "--lease-seconds", str(LEASE),
                    "--pipelines-state", str(runs), "--no-shipped-objects", *webhook,
                    "--trust-local-namespaces", "t-so-*"))


@pytest.fixture(scope="module")
def three(operator: OperatorProcess, kubectl: Kubectl, audit: AuditLog,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """r0, r1, r2 in place of the session's operator (started again afterwards)."""
    work = tmp_path_factory.mktemp("scale-out")
    runs = Path(tempfile.mkdtemp(prefix="stead-so-runs-"))
    runs.chmod(0o777)
    shared = Path(tempfile.mkdtemp(prefix="stead-so-shared-"))  # scripts run as nobody: not under pytest's 0700
    shared.chmod(0o777)
    operator.stop()
    replicas = {name: replica(work, name, operator, runs) for name in REPLICAS}
    cluster = Cluster(replicas, [f"t-so-{i}-{uuid.uuid4().hex[:5]}" for i in range(PROJECTS)], shared,
                      legacy=f"t-so-legacy-{uuid.uuid4().hex[:5]}", audit_start=audit.mark())
    try:
        operator.start()  # one replica, no sharding: its objects get no bucket label
        kubectl("create", "namespace", cluster.legacy)
        kubectl("apply", "-f", "-", input=env_manifest("old", cluster.legacy))
        ready(kubectl, cluster.legacy, "environments/old")
        wait_for_builtins(kubectl)  # the ClusterLifecycles it installs (the replicas run --no-shipped-objects)
        operator.stop()
        for proc in replicas.values():
            proc.start()
        bulk(operator.cluster, [("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                 "metadata": {"name": n}}) for n in cluster.namespaces])
        yield cluster
    finally:
        for proc in replicas.values():
            if proc.process is not None and proc.process.poll() is None:
                os.kill(proc.process.pid, signal.SIGCONT)
            proc.stop()
        bulk(operator.cluster, [("DELETE", f"/api/v1/namespaces/{n}", None)
                                for n in [*cluster.namespaces, cluster.legacy]], missing_ok=True)
        shutil.rmtree(runs, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)
        keep = os.environ.get("STEAD_SCALE_OUT_LOGS")  # the replicas' logs, kept for a look after a failure
        if keep:
            for name in REPLICAS:
                shutil.copy(work / f"{name}.log", Path(keep) / f"{name}.log")
        operator.start()
        if cluster.figures:
            print("\nscale-out figures: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cluster.figures.items())))


def bulk(cluster: ClusterInfo, requests: list[tuple[str, str, dict[str, Any] | None]], *,
         missing_ok: bool = False) -> None:
    """Many requests at once, 16 in flight: kubectl throttles itself to 5 requests a second, which
    made creating or deleting a hundred namespaces take 20-40 s of the test's wall time."""
    async def send() -> None:
        async with KubeClient(load_access(cluster.kubeconfig), user_agent="stead-e2e") as kube:
            limit = asyncio.Semaphore(16)

            async def one(method: str, path: str, body: dict[str, Any] | None) -> None:
                async with limit:
                    try:
                        await kube.request(method, path, body)
                    except ApiError as error:
                        if not (missing_ok and error.status == 404):
                            raise

            await asyncio.gather(*(one(*r) for r in requests))

    asyncio.run(send())


# --- the audit log, with response codes: what each replica wrote, and when it held what -----------------

@dataclass(frozen=True)
class Write:
    replica: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int


def by_replicas(audit: AuditLog, mark: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """(replica, audit event) of every request a replica made since `mark` (told apart by user agent)."""
    prefix = f"{USER_AGENT}/"
    with audit.path.open("rb") as f:
        f.seek(mark)
        for raw in f:
            event = json.loads(raw)
            agent = str(event.get("userAgent") or "")
            if agent.startswith(prefix):
                yield agent[len(prefix):].split(" ")[0], event


def writes_since(audit: AuditLog, mark: int) -> list[Write]:
    """Successful writes by the replicas, in the order the API server completed them."""
    found = []
    for replica, event in by_replicas(audit, mark):
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITES:
            continue
        ref = event.get("objectRef") or {}
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        found.append(Write(replica, event["verb"], ref.get("resource", ""), ref.get("subresource", ""),
                           ref.get("namespace", ""), ref.get("name", ""), code))
    return found


def outside_claims(writes: list[Write], projects: set[str], held: dict[str, str]) -> list[Write]:
    """Writes into a project's namespace by a replica that did not hold the project's claim then.

    Ownership intervals from the claim Leases' successful writes: a replica's create or update of
    a claim it did not hold is an acquisition (a takeover ends the previous holder's interval),
    of one it held a release (claims are only written on hand-over: never renewed).
    `held`: who held each project when the log starts (updated in place).
    """
    bad = []
    for w in writes:
        if not 200 <= w.code < 300:
            continue
        if w.resource == "leases" and w.namespace == OPERATOR_NAMESPACE and w.name.startswith(CLAIM_PREFIX):
            project = w.name[len(CLAIM_PREFIX):]
            held[project] = "" if held.get(project) == w.replica else w.replica
        elif w.namespace in projects and held.get(w.namespace) != w.replica:
            bad.append(w)
    return bad


def objects_by_several(writes: list[Write], projects: set[str]) -> dict[tuple[str, str, str], set[str]]:
    writers: dict[tuple[str, str, str], set[str]] = {}
    for w in writes:
        if w.namespace in projects and 200 <= w.code < 300 and w.resource != "events":
            writers.setdefault((w.resource, w.namespace, w.name), set()).add(w.replica)
    return {k: v for k, v in writers.items() if len(v) > 1}


# --- the objects ------------------------------------------------------------------------------------------

def config_component(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "stead.dev/v1alpha1", "kind": "ConfigComponent",
            "metadata": {"name": "so-fuel", "namespace": namespace}, "spec": {"resources": [{"name": "astute"}]}}


def config_values(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues",
            "metadata": {"name": "astute", "namespace": namespace},
            "spec": {"environment": "cfg", "resource": "astute", "level": {}, "data": {"deployment_id": 1}}}


def staged_spec(log: Path) -> dict[str, Any]:
    spec = small_spec()
    staged = next(a for a in spec["actions"] if a["name"] == "staged")
    for task in staged["tasks"]:
        if "script" in task:
            task["script"] = task["script"].replace('"$STAGED_LOG"', str(log))
        if task.get("type") == "delay":
            task["delaySeconds"] = 8
    return spec


def ready(kubectl: Kubectl, namespace: str, *objects: str, timeout: int = 90) -> None:
    kubectl("wait", "--for=condition=Ready", "-n", namespace, f"--timeout={timeout}s", *objects)


# --- the tests, in order ----------------------------------------------------------------------------------

def test_three_replicas_split_the_projects_and_write_only_for_their_claims(
        three: Cluster, kubectl: Kubectl, audit: AuditLog) -> None:
    mark = audit.mark()
    with_config, with_apps = three.namespaces[:10], three.namespaces[20:26]
    with_lifecycles, with_graphs = three.namespaces[14:18], three.namespaces[26:30]
    with_services = three.namespaces[18:20]
    started = time.monotonic()
    for namespace in with_services:  # a Blueprint, a ServiceEntity (lifecycle simple), an instance of it
        catalog(kubectl, namespace)
        apply(kubectl, instance("svc", namespace, who="sharded"))
    for namespace in with_lifecycles:
        kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "service-lifecycle-simple.yaml"))
    for namespace in with_graphs:  # an environment, a release and an environment graph, a dry-run GraphRun
        kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "graph-environment.yaml"))
    for i, namespace in enumerate(three.namespaces):
        kubectl("apply", "-f", "-", input=env_manifest("env", namespace))
        if namespace in with_config:
            apply(kubectl, config_component(namespace))
            cfg = json.loads(env_manifest("cfg", namespace))
            cfg["spec"]["components"] = ["so-fuel"]
            apply(kubectl, cfg)
            apply(kubectl, config_values(namespace))
        if namespace in with_apps:
            apply(kubectl, blueprint("small", namespace, small_spec()))
            apply(kubectl, app(f"app-{i}", namespace, "small"))
    for namespace in three.namespaces:
        ready(kubectl, namespace, "environments", "--all")
    for namespace in with_config:
        ready(kubectl, namespace, "configcomponents,configvalues", "--all")
    for namespace in with_apps:
        ready(kubectl, namespace, "blueprints,apps", "--all", timeout=120)
    for namespace in with_lifecycles:
        ready(kubectl, namespace, "lifecycles", "--all")
    for namespace in with_graphs:
        ready(kubectl, namespace, "environments,deploymentgraphs,graphruns", "--all")
    for namespace in with_services:
        in_state(kubectl, namespace, "svc", "up", seconds=90)
    three.figures["all Ready s"] = time.monotonic() - started
    holders = three.holders(kubectl)
    assert set(three.namespaces) <= set(holders) and all(holders[n] in REPLICAS for n in three.namespaces)
    per = {r: sum(1 for n in three.namespaces if holders[n] == r) for r in REPLICAS}
    assert all(per.values()), per  # every replica took a share
    three.figures.update({f"projects of {r}": float(n) for r, n in per.items()})

    projects = set(three.namespaces)
    written = writes_since(audit, mark)
    assert outside_claims(written, projects, {}) == []
    assert objects_by_several(written, projects) == {}
    status = [w for w in written if w.namespace in projects and w.subresource == "status"]
    assert {w.replica for w in status} == set(REPLICAS)
    three.figures["status writes outside claims"] = 0.0


def selections(audit: AuditLog, mark: int, resource: str) -> dict[str, str]:
    """Each replica's last WATCH of `resource` since `mark` (but the watches of objects still to be
    labelled): its label selector ("" for none)."""
    found: dict[str, str] = {}
    for replica, event in by_replicas(audit, mark):
        if event.get("verb") == "watch" and (event.get("objectRef") or {}).get("resource") == resource:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(event["requestURI"]).query)
            selector = (query.get("labelSelector") or [""])[0]
            if selector != "!stead.dev/shard-bucket":  # the watch of objects still to be labelled
                found[replica] = selector
    return found


def watched_buckets(three: Cluster, kubectl: Kubectl, audit: AuditLog) -> dict[str, set[int]] | str:
    """Each replica's buckets, from its latest watches; or what is wrong with them."""
    holders = three.holders(kubectl)
    watched: dict[str, set[int]] = {}
    for resource in ("environments", "configvalues", "apps"):
        last = selections(audit, 0, resource)
        for name in REPLICAS:
            match = re.fullmatch(r"stead\.dev/shard-bucket in \(([0-9,]+)\)", last.get(name, ""))
            if not match:
                return f"{name} watches {resource} with {last.get(name)!r}"
            buckets = {int(b) for b in match.group(1).split(",")}
            if watched.setdefault(name, buckets) != buckets:
                return f"{name} selects other buckets for {resource}"
    for a, b in itertools.combinations(REPLICAS, 2):
        if watched[a] & watched[b]:
            return f"{a} and {b} both select {sorted(watched[a] & watched[b])}"
    for namespace in three.namespaces:
        if bucket_of(namespace) not in watched[holders[namespace]]:
            return f"{namespace}'s bucket is not in its holder {holders[namespace]}'s selection"
    return watched


def test_each_replica_receives_only_the_buckets_of_its_projects(
        three: Cluster, kubectl: Kubectl, audit: AuditLog) -> None:
    """The API server filters: every replica's watch of a namespaced kind selects bucket labels,
    the three selections are disjoint, each project's bucket is in its holder's selection, and no
    replica's watch of these kinds went unfiltered. (A selection follows the claims: while one moves,
    two replicas may select its bucket for a pass, hence the wait.)"""
    found: list[dict[str, set[int]] | str] = []

    def settled() -> bool:
        found.append(watched_buckets(three, kubectl, audit))
        return isinstance(found[-1], dict)

    try:
        wait_until(settled, seconds=20, interval=0.5, what="settled selections")
    except AssertionError as error:
        raise AssertionError(f"{error}: {found[-1]}") from None
    watched = found[-1]
    assert isinstance(watched, dict)
    labels = json.loads(kubectl("get", "environments", "-A", "-o", "json").stdout)["items"]
    for env in labels:
        if env["metadata"]["namespace"] in three.namespaces:  # the mutating webhook set it at creation
            assert env["metadata"]["labels"]["stead.dev/shard-bucket"] == str(bucket_of(env["metadata"]["namespace"]))
    three.figures["buckets watched per replica (mean)"] = sum(map(len, watched.values())) / len(watched)
    if len(found) > 1:
        print(f"selections settled after {len(found) - 1} looks; first: {found[0]}")


def test_an_object_without_its_bucket_label_is_labelled_and_a_wrong_label_is_put_right(
        three: Cluster, kubectl: Kubectl) -> None:
    """An Environment from before sharding (no label) is labelled by the replica of its bucket and
    handled by its project's holder; a label a user sets is replaced by the project's bucket."""
    right = str(bucket_of(three.legacy))

    def label(namespace: str, name: str) -> str | None:
        env = json.loads(kubectl("get", "environment", name, "-n", namespace, "-o", "json").stdout)
        return (env["metadata"].get("labels") or {}).get("stead.dev/shard-bucket")

    wait_until(lambda: label(three.legacy, "old") == right, seconds=30, what="the legacy object labelled")
    kubectl("patch", "environment", "old", "-n", three.legacy, "--type=merge", "-p",
            json.dumps({"spec": {"release": "newton-10.0"}}))
    wait_until(lambda: json.loads(kubectl("get", "environment", "old", "-n", three.legacy, "-o", "json").stdout)
               ["status"].get("observedGeneration") == 2, seconds=30, what="the legacy object handled again")
    assert three.holders(kubectl).get(three.legacy) in REPLICAS
    namespace = three.namespaces[0]
    wrong = str((bucket_of(namespace) + 1) % 4096)
    kubectl("label", "environment", "env", "-n", namespace, f"stead.dev/shard-bucket={wrong}", "--overwrite")
    assert label(namespace, "env") == str(bucket_of(namespace))  # the webhook put it right in the same request


def owned_by(three: Cluster, kubectl: Kubectl, name: str) -> list[str]:
    holders = three.holders(kubectl)
    return [n for n in three.namespaces if holders.get(n) == name]


def adopted(three: Cluster, kubectl: Kubectl, projects: list[str], gone: str) -> bool:
    holders = three.holders(kubectl)
    return all(holders.get(p) not in ("", gone, None) for p in projects)


def test_kill_9_its_projects_and_its_run_in_flight_are_adopted_within_the_lease_plus_5s(
        three: Cluster, kubectl: Kubectl, audit: AuditLog) -> None:
    victim = "r1"
    mine = owned_by(three, kubectl, victim)
    assert mine
    namespace = next((n for n in three.namespaces[20:26] if n in mine), mine[0])
    log = three.work / "staged.log"
    apply(kubectl, blueprint("staged", namespace, staged_spec(log)))
    ready(kubectl, namespace, "blueprint/staged")
    apply(kubectl, app("runner", namespace, "staged"))
    ready(kubectl, namespace, "app/runner", timeout=60)
    apply(kubectl, action_run("staged-1", namespace, "runner", "staged"))
    wait_until(lambda: log.exists() and log.read_text() == "first\n", 30, "the run's first step", interval=0.1)

    proc = three.replicas[victim]
    assert proc.process is not None
    mark = audit.mark()
    proc.process.kill()
    killed = time.monotonic()
    proc.process.wait()
    wait_until(lambda: adopted(three, kubectl, mine, victim), LEASE + 10, "the projects adopted", interval=0.1)
    took = time.monotonic() - killed
    three.figures["adoption after kill -9 s"] = took
    assert took <= LEASE + 5, took

    status = run_state(kubectl, namespace, "staged-1", "Succeeded", "Failed", seconds=60)
    assert status["state"] == "Succeeded", status
    assert log.read_text() == "first\nlast\n"  # nothing repeated: followed by the new owner from its finished steps
    for project in mine:  # nothing lost: the new owners act on new work at once
        kubectl("apply", "-f", "-", input=env_manifest("after-kill", project))
    for project in mine:
        ready(kubectl, project, "environments", "--all", timeout=60)
    written = writes_since(audit, mark)
    assert outside_claims(written, set(three.namespaces), {p: victim for p in mine}) == []
    three.start(victim)  # back, under a new incarnation: the ring gives it a share again
    wait_until(lambda: owned_by(three, kubectl, victim), 30, f"{victim} holding projects again", interval=0.2)


def test_sigterm_hands_its_projects_over_within_5s(three: Cluster, kubectl: Kubectl, audit: AuditLog) -> None:
    leaving = "r2"
    mine = owned_by(three, kubectl, leaving)
    assert mine
    proc = three.replicas[leaving]
    assert proc.process is not None
    mark = audit.mark()
    proc.process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    wait_until(lambda: adopted(three, kubectl, mine, leaving), 10, "the projects handed over", interval=0.05)
    took = time.monotonic() - sent
    three.figures["hand-over after SIGTERM s"] = took
    assert took <= 5, took
    proc.process.wait(timeout=30)
    for project in mine:
        kubectl("apply", "-f", "-", input=env_manifest("after-term", project))
    for project in mine:
        ready(kubectl, project, "environment/after-term", timeout=60)
    held = {p: leaving for p in mine}
    assert outside_claims(writes_since(audit, mark), set(three.namespaces), held) == []
    three.start(leaving)
    wait_until(lambda: owned_by(three, kubectl, leaving), 30, f"{leaving} holding projects again", interval=0.2)


def test_sigstop_past_the_lease_then_sigcont_writes_nothing_for_the_projects_it_lost(
        three: Cluster, kubectl: Kubectl, audit: AuditLog) -> None:
    paused = "r1"
    mine = owned_by(three, kubectl, paused)
    assert mine
    proc = three.replicas[paused]
    assert proc.process is not None
    # work for its projects queued where it will see it on waking: events it receives late
    before = writes_since(audit, 0)
    held: dict[str, str] = {}
    outside_claims(before, set(three.namespaces), held)  # who holds what now, by the log
    mark = audit.mark()
    os.kill(proc.process.pid, signal.SIGSTOP)
    try:
        for project in mine:
            kubectl("apply", "-f", "-", input=env_manifest("during-pause", project))
        wait_until(lambda: adopted(three, kubectl, mine, paused), LEASE + 10, "the projects adopted", interval=0.1)
        time.sleep(LEASE * 2)
    finally:
        os.kill(proc.process.pid, signal.SIGCONT)
    for project in mine:
        ready(kubectl, project, "environment/during-pause", timeout=60)
    time.sleep(LEASE * 2)  # what it would write on waking, it writes now
    written = writes_since(audit, mark)
    assert outside_claims(written, set(three.namespaces), held) == []
    late = [w for w in written if w.replica == paused and w.namespace in mine and w.resource != "leases"]
    reacquired = {w.name[len(CLAIM_PREFIX):] for w in written if w.replica == paused and w.resource == "leases"}
    assert all(w.namespace in reacquired for w in late), late  # only after taking a project back
    assert objects_by_several(written, set(mine) - reacquired) == {}
    assert get(kubectl, "environment", "during-pause", mine[0])["status"]["phase"] == "Provisioned"


# --- claims of deleted projects, and scaling 2 -> 3 ---------------------------------------------------------

def claim_deletes(writes: list[Write], projects: set[str]) -> list[tuple[str, str]]:
    """(replica, project) of every claim Lease of `projects` a replica deleted (the claims of namespaces
    other test files left behind, being deleted, are collected too, and rightly)."""
    return [(w.replica, w.name[len(CLAIM_PREFIX):]) for w in writes
            if w.verb == "delete" and 200 <= w.code < 300 and w.resource == "leases"
            and w.namespace == OPERATOR_NAMESPACE and w.name.startswith(CLAIM_PREFIX)
            and w.name[len(CLAIM_PREFIX):] in projects]


def stead_objects(kubectl: Kubectl, namespace: str) -> list[str]:
    """The namespace's Stead objects (`kubectl get stead` lists the cluster's ClusterLifecycles too)."""
    return [o for o in kubectl("get", "stead", "-n", namespace, "-o", "name").stdout.split()
            if not o.startswith("clusterlifecycle.")]


def test_the_claim_of_a_project_whose_objects_are_all_deleted_goes_and_comes_back_afresh(
        three: Cluster, kubectl: Kubectl, audit: AuditLog) -> None:
    # a project with Environments only (the earlier tests added some; a kill -9 test may have added an App)
    project = next(n for n in three.namespaces[10:20]
                   if all(o.startswith("environment.") for o in stead_objects(kubectl, n)))
    before = three.claim(kubectl, project)
    assert before is not None and before["spec"].get("holderIdentity") in REPLICAS
    holders = three.holders(kubectl)
    mark = audit.mark()
    kubectl("delete", "environments", "--all", "-n", project, "--timeout=60s")  # waits for the finalizers
    emptied = time.monotonic()
    wait_until(lambda: three.claim(kubectl, project) is None, LEASE + 15, "the emptied project's claim to go",
               interval=0.1)
    took = time.monotonic() - emptied
    three.figures["claim collected after the last object s"] = took
    assert took <= LEASE + 5, took  # a lease without objects, then the next pass
    others = set(three.namespaces) - {project}
    assert others <= set(three.holders(kubectl))  # every live project keeps its claim
    written = writes_since(audit, mark)
    holder = before["spec"]["holderIdentity"]
    ours = {*three.namespaces, three.legacy}
    assert claim_deletes(written, ours) == [(holder, project)]  # by its holder, once, and no other claim
    assert outside_claims(written, set(three.namespaces), dict(holders)) == []

    kubectl("apply", "-f", "-", input=env_manifest("back", project))
    ready(kubectl, project, "environment/back", timeout=60)
    again = three.claim(kubectl, project)
    assert again is not None and again["spec"].get("holderIdentity") in REPLICAS
    assert again["metadata"]["uid"] != before["metadata"]["uid"]  # a new claim, not the old one revived
    assert again["spec"]["leaseTransitions"] == 1
    written = writes_since(audit, mark)
    assert outside_claims(written, set(three.namespaces), dict(holders)) == []
    # over the whole module so far: no replica ever deleted the claim of a project that had objects
    assert {p for _, p in claim_deletes(writes_since(audit, three.audit_start), ours)} == {project}


def grown_projects() -> list[str]:
    return [f"t-so-scale-{i:03d}" for i in range(GROWN)]


def environments_ready(kubectl: Kubectl, namespaces: set[str]) -> dict[str, bool]:
    """Namespace/name -> Ready of every Environment in `namespaces` (one LIST)."""
    out = json.loads(kubectl("get", "environments", "-A", "-o", "json").stdout)
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}":
            any(c.get("type") == "Ready" and c.get("status") == "True" for c in (o.get("status") or {}).get(
                "conditions") or []) for o in out["items"] if o["metadata"]["namespace"] in namespaces}


def settled(three: Cluster, kubectl: Kubectl, projects: list[str], seconds: float) -> Any:
    """A predicate: the claims of `projects` all held by running replicas and unchanged for `seconds`
    (several coordinator passes: a move is a release then an acquisition at the next pass)."""
    last: dict[str, str] = {}
    since = time.monotonic()

    def probe() -> dict[str, str] | None:
        nonlocal last, since
        holders = three.holders(kubectl)
        now = {p: holders.get(p, "") for p in projects}
        if now != last:
            last, since = now, time.monotonic()
            return None
        if all(h in REPLICAS for h in now.values()) and time.monotonic() - since >= seconds:
            return now
        return None

    return probe


def test_scaling_2_to_3_moves_a_third_of_the_projects_each_handled_by_one_replica_at_a_time(
        three: Cluster, kubectl: Kubectl, audit: AuditLog, cluster: ClusterInfo) -> None:
    """Two replicas over 100 more projects (an Environment each), then a third joins: the fraction
    of projects whose claim changed holder, measured live, against the ideal 1/3."""
    joining = "r2"
    three.replicas[joining].stop()  # a clean hand-over: r0 and r1 hold everything
    staying = [r for r in REPLICAS if r != joining]
    names = grown_projects()
    three.namespaces.extend(names)  # deleted with the others when the module ends
    bulk(cluster, [("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})
                   for n in names])
    started = time.monotonic()
    bulk(cluster, [("POST", custom_path("environments", n), json.loads(env_manifest("env", n))) for n in names])
    wanted = {f"{n}/env" for n in names}
    wait_until(lambda: all(environments_ready(kubectl, set(names)).get(k) for k in wanted), 180,
               f"{GROWN} Environments Ready under 2 replicas", interval=0.5)
    three.figures[f"{GROWN} projects Ready under 2 replicas s"] = time.monotonic() - started
    before = wait_until(settled(three, kubectl, names, 2.0), 60, "the claims settled under 2 replicas",
                        interval=0.2)
    assert set(before.values()) == set(staying), before
    everyone = set(three.namespaces)
    held = three.holders(kubectl)
    mark = audit.mark()

    joined = time.monotonic()
    three.start(joining)
    # it has joined (holds some claim: it would otherwise look "settled" at once); then the moves settle
    wait_until(lambda: joining in three.holders(kubectl).values(), 30, f"{joining} taking claims", interval=0.2)
    after = wait_until(settled(three, kubectl, names, 3.0), 90, "the claims settled under 3 replicas",
                       interval=0.2)
    three.figures["2 -> 3 settled s (from the start of r2, incl. 3 s of stability)"] = time.monotonic() - joined
    moved = sorted(p for p in names if before[p] != after[p])
    fraction = len(moved) / GROWN
    three.figures["moved fraction 2 -> 3 (live)"] = fraction
    by_name = sum(Ring(staying).owner(p) != Ring(REPLICAS).owner(p) for p in names) / GROWN
    bucket = by_bucket()
    by_buckets = sum(Ring(staying).owner(bucket(p)) != Ring(REPLICAS).owner(bucket(p)) for p in names) / GROWN
    print(f"\nmoved 2 -> 3: {len(moved)}/{GROWN} = {fraction:.3f} live (ideal 1/3; the ring predicts "
          f"{by_name:.3f} placed by name, {by_buckets:.3f} by bucket)")
    assert all(after[p] == joining for p in moved), moved  # nothing moves between replicas that stay
    assert 1 / 3 / MOVE_TOLERANCE <= fraction <= 1 / 3 * MOVE_TOLERANCE, fraction
    # exactly what the ring says for these names and replica ids, projects placed by their bucket
    # (`--sharding leases` places buckets, so that each replica's watches select whole buckets)
    assert before == {p: Ring(staying).owner(bucket(p)) for p in names}
    assert after == {p: Ring(REPLICAS).owner(bucket(p)) for p in names}

    # every object stays Ready, and the joining replica acts on the projects it took at once
    ready_now = environments_ready(kubectl, set(names))
    assert all(ready_now.get(k) for k in wanted), sorted(k for k in wanted if not ready_now.get(k))
    bulk(cluster, [("POST", custom_path("environments", p), json.loads(env_manifest("after-join", p))) for p in moved])
    wait_until(lambda: all(environments_ready(kubectl, set(moved)).get(f"{p}/after-join") for p in moved), 60,
               "the moved projects' new Environments Ready", interval=0.5)
    written = writes_since(audit, mark)
    assert outside_claims(written, everyone, held) == []  # nothing handled by a replica not holding it then
    assert objects_by_several(written, everyone) == {}  # no object written by two replicas
    assert claim_deletes(written, {*three.namespaces, *grown_projects()}) == []  # live projects' claims stay
    assert any(w.replica == joining and w.namespace in moved and w.subresource == "status" for w in written)
