"""Three operator processes sharing one API server (`--sharding leases`): they split the projects,
never write for a project they do not hold, and hand projects over on kill -9, SIGTERM and a pause.

Each replica is `stead operator --replica-id rN --sharding leases --lease-seconds 2` with its own
store, health and config-API ports; only r0 serves and registers the admission webhooks (the
others run with `--webhook off`: two registrations would point the API server at whichever wrote
last). Workflow runs keep their state in one directory the three share (`--pipelines-state`), so
a run in flight on a replica that dies is followed by the project's new owner from its finished
steps. Every write is attributed to its replica by the user agent `stead-operator/<replica-id>`;
who held which project when is rebuilt from the claim Leases' updates in the same audit log.
"""

from __future__ import annotations

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

from operators.runtime.kube.client import USER_AGENT
from operators.runtime.shard import bucket_of, claim_name
from tests.e2e.conftest import AuditLog, Kubectl, OperatorProcess, env_manifest
from tests.e2e.test_apps import action_run, app, apply, blueprint, get, run_state, small_spec
from tests.polling import wait_until

OPERATOR_NAMESPACE = "stead-system"
LEASE = 2
REPLICAS = ("r0", "r1", "r2")
PROJECTS = 30
WRITES = frozenset({"create", "update", "patch", "delete"})
CLAIM_PREFIX = claim_name("x")[:-1]


@dataclass
class Cluster:
    replicas: dict[str, OperatorProcess]
    namespaces: list[str]
    work: Path
    legacy: str = ""
    """A namespace whose Environment was created before sharding was on (no bucket label)."""
    figures: dict[str, float] = field(default_factory=dict)

    def start(self, name: str) -> None:
        self.replicas[name].start()

    def holders(self, kubectl: Kubectl) -> dict[str, str]:
        """Project -> holder, from the claim Leases (free claims: holder "")."""
        out = json.loads(kubectl("get", "leases", "-n", OPERATOR_NAMESPACE, "-l", "stead.dev/role=claim",
                                 "-o", "json").stdout)
        return {lease["metadata"]["labels"]["stead.dev/project"]: lease["spec"].get("holderIdentity") or ""
                for lease in out["items"]}


def replica(cluster_work: Path, name: str, operator: OperatorProcess, runs: Path) -> OperatorProcess:
    webhook = () if name == "r0" else ("--webhook", "off")
    return OperatorProcess(
        operator.cluster, store=cluster_work / name / "store", log_path=cluster_work / f"{name}.log",
        extra_args=("--replica-id", name, "--sharding", "leases", "--lease-seconds", str(LEASE),
                    "--pipelines-state", str(runs), "--no-shipped-objects", *webhook,
                    "--trust-local-namespaces", "t-so-*"))


@pytest.fixture(scope="module")
def three(operator: OperatorProcess, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """r0, r1, r2 in place of the session's operator (started again afterwards)."""
    work = tmp_path_factory.mktemp("scale-out")
    runs = Path(tempfile.mkdtemp(prefix="stead-so-runs-"))
    runs.chmod(0o777)
    shared = Path(tempfile.mkdtemp(prefix="stead-so-shared-"))  # scripts run as nobody: not under pytest's 0700
    shared.chmod(0o777)
    operator.stop()
    replicas = {name: replica(work, name, operator, runs) for name in REPLICAS}
    cluster = Cluster(replicas, [f"t-so-{i}-{uuid.uuid4().hex[:5]}" for i in range(PROJECTS)], shared,
                      legacy=f"t-so-legacy-{uuid.uuid4().hex[:5]}")
    try:
        operator.start()  # one replica, no sharding: its objects get no bucket label
        kubectl("create", "namespace", cluster.legacy)
        kubectl("apply", "-f", "-", input=env_manifest("old", cluster.legacy))
        ready(kubectl, cluster.legacy, "environments/old")
        operator.stop()
        for proc in replicas.values():
            proc.start()
        for namespace in cluster.namespaces:
            kubectl("create", "namespace", namespace)
        yield cluster
    finally:
        for proc in replicas.values():
            if proc.process is not None and proc.process.poll() is None:
                os.kill(proc.process.pid, signal.SIGCONT)
            proc.stop()
        for namespace in [*cluster.namespaces, cluster.legacy]:
            kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        shutil.rmtree(runs, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)
        keep = os.environ.get("STEAD_SCALE_OUT_LOGS")  # the replicas' logs, kept for a look after a failure
        if keep:
            for name in REPLICAS:
                shutil.copy(work / f"{name}.log", Path(keep) / f"{name}.log")
        operator.start()
        if cluster.figures:
            print("\nscale-out figures: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cluster.figures.items())))


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


def writes_since(audit: AuditLog, mark: int) -> list[Write]:
    """Successful writes by the replicas, in the order the API server completed them."""
    found = []
    prefix = f"{USER_AGENT}/"
    with audit.path.open("rb") as f:
        f.seek(mark)
        for raw in f:
            event = json.loads(raw)
            agent = str(event.get("userAgent") or "")
            if event.get("stage") != "ResponseComplete" or not agent.startswith(prefix) \
                    or event.get("verb") not in WRITES:
                continue
            ref = event.get("objectRef") or {}
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            found.append(Write(agent[len(prefix):].split(" ")[0], event["verb"], ref.get("resource", ""),
                               ref.get("subresource", ""), ref.get("namespace", ""), ref.get("name", ""), code))
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
    started = time.monotonic()
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
    prefix = f"{USER_AGENT}/"
    with audit.path.open("rb") as f:
        f.seek(mark)
        for raw in f:
            event = json.loads(raw)
            agent = str(event.get("userAgent") or "")
            ref = event.get("objectRef") or {}
            if event.get("verb") == "watch" and agent.startswith(prefix) and ref.get("resource") == resource:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(event["requestURI"]).query)
                selector = (query.get("labelSelector") or [""])[0]
                if selector != "!stead.dev/shard-bucket":  # the watch of objects still to be labelled
                    found[agent[len(prefix):].split(" ")[0]] = selector
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
