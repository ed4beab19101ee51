"""A chaos soak (issue 33 item 5): 2-3 `stead operator --sharding leases` replicas on a local control
plane of their own, a steady mixed load, faults injected at random but reproducibly (`--seed`), and
invariants checked from the API server's audit log and the runs' own records.

The load, one action every `--interval` seconds in projects `soak-0..`:
- Apps of a Blueprint whose create action and `work` action are stamped tasks, and ActionRuns of `work`;
- ServiceInstances (lifecycle `simple`) created, then walked through updates (`who` changed);
- GraphRuns of a stamped shell task on an sshd node (tests/sshd.py), one at a time per Environment;
- config edits: a ConfigValues' data changed.

The faults (`--faults`, each round injects every kind once, in a seeded order, `--gap` seconds apart):
- kill9: kill -9 of a replica, restarted after a seeded hold; sigstop: SIGSTOP past the lease, SIGCONT;
- apiserver / etcd: kill -9 of kube-apiserver / etcd, started again (`LocalControlPlane.up`);
- lost-store: a replica killed, its LMDB store removed, restarted;
- full-disk: the store of one replica is a small tmpfs; the fault fills it for a while, then frees it;
- slow-api: one replica reaches the API server through a loopback TCP proxy; the fault adds latency.
A fault waits for the previous one's recovery, so slow recoveries delay the schedule; faults that would
then end in the last gap are not injected unless their kind has not been yet (the report says how many).
Process faults hit replicas other than r0 (r0 serves the admission webhook that labels objects with their
shard bucket: with it down every create is refused, which is a fault of its own and not this one's).

Recovery of a fault: seconds from its end (the restart, the SIGCONT, the latency removed) until every
replica answers /readyz and a new Environment in every project is Ready.

Invariants (violations are attributed to the last fault injected before them):
- one writer: no successful write into a project's namespace by a replica that did not hold the project's
  claim then (holders rebuilt from the claim Leases' writes in the audit log, per user agent
  `stead-operator/<replica>`, a restarted replica's first claim write being an acquisition);
- no step twice at once: every stamped task appends `start`/`end` lines; no key starts while it runs;
- no run lost: every ActionRun and GraphRun created reaches a terminal state within `--ready-bound`;
- Ready after the last fault: every object Ready within `--ready-bound` once the load has stopped;
- RSS flat: r0's RSS (never faulted) has no growth trend after warm-up (least-squares slope);
- no Event lost: each ServiceInstance has one Transfer Event per executed transfer of its status log.

    flock /tmp/stead-bench.lock .venv/bin/python bench/soak.py --minutes 15 --seed 7 [--replicas 3] [--json F]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.pipeline_throughput import free_port, log
from operators.cluster import Binaries, LocalControlPlane, ensure_binaries
from operators.runtime.kube.api import USER_AGENT
from operators.runtime.shard import claim_name

KINDS = ("kill9", "sigstop", "apiserver", "etcd", "lost-store", "full-disk", "slow-api")
API = "stead.dev/v1alpha1"
OPERATOR_NAMESPACE = "stead-system"
CLAIM_PREFIX = claim_name("x")[:-1]
WRITES = frozenset({"create", "update", "patch", "delete"})
TERMINAL = frozenset({"Succeeded", "Failed", "Aborted"})
PAGE = os.sysconf("SC_PAGE_SIZE")
TMPFS_SIZE = "48m"


# --- the pure parts: schedule, invariants, report (unit-tested in tests/unit/test_soak.py) -------------------

@dataclass(frozen=True)
class Fault:
    at: float
    """Seconds after the load started."""
    kind: str
    hold: float
    """How long the fault lasts before it is undone."""


def schedule(seed: int, kinds: tuple[str, ...], seconds: float, gap: float, lease: float) -> list[Fault]:
    """The faults of a soak: rounds of every kind once in a seeded order, `gap` (+-50%) apart, the first
    after one gap, none in the last two gaps (the settling time). The same seed gives the same list."""
    rng = random.Random(seed)
    holds = {"kill9": (1.0, 2 * lease), "sigstop": (2 * lease, 4 * lease), "apiserver": (3.0, 10.0),
             "etcd": (3.0, 10.0), "lost-store": (1.0, lease), "full-disk": (5.0, 15.0), "slow-api": (10.0, 20.0)}
    out: list[Fault] = []
    at = gap
    while True:
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            low, high = holds[kind]
            hold = round(rng.uniform(low, high), 1)
            if at + hold > seconds - gap:
                return out
            out.append(Fault(round(at, 1), kind, hold))
            at += hold + gap * rng.uniform(0.5, 1.5)


def step_overlaps(lines: list[str]) -> list[str]:
    """Keys whose `start` came while an earlier start of the same key had not ended (lines: `start|end
    KEY TOKEN`, in the order they were appended)."""
    running: dict[str, set[str]] = {}
    bad = []
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue  # a line cut by a kill
        what, key, token = parts[:3]
        if what == "start":
            if running.get(key):
                bad.append(f"{key}: {token} started while {sorted(running[key])} ran")
            running.setdefault(key, set()).add(token)
        elif what in ("end", "stopped"):
            running.get(key, set()).discard(token)
    return bad


@dataclass(frozen=True)
class Write:
    at: float
    """stageTimestamp, epoch seconds."""
    replica: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str


def outside_claims(writes: list[Write], projects: set[str]) -> list[Write]:
    """Writes into a project's namespace by a replica not holding its claim then (`writes` in the order the
    API server completed them). A replica holds a claim from its write of it (create or update) until
    another replica writes it or it is deleted. The audit log is at level Metadata, so a release (an update
    by the holder emptying it) is not told apart from a re-acquisition under a new incarnation (an update
    by the same replica, after a restart or a lapsed membership): both count as holding. This misses a
    write by a replica between its release and the next holder's acquisition, never flags a right one."""
    held: dict[str, str] = {}
    bad = []
    for w in writes:
        if w.resource == "leases" and w.namespace == OPERATOR_NAMESPACE and w.name.startswith(CLAIM_PREFIX):
            held[w.name[len(CLAIM_PREFIX):]] = "" if w.verb == "delete" else w.replica
        elif w.namespace in projects and held.get(w.namespace, "") != w.replica:
            bad.append(w)
    return bad


def lost_events(log_entries: int, transfer_events: int) -> int:
    return max(0, log_entries - transfer_events)


def rss_slope(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) samples, in MiB per hour."""
    if len(samples) < 3:
        return 0.0
    xs, ys = [s[0] for s in samples], [s[1] for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 3600


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else float("nan")


def table(kinds: tuple[str, ...], injected: dict[str, int], recovery: dict[str, list[float]],
          violations: dict[str, int], lasted: dict[str, list[float]]) -> list[str]:
    """One row per fault kind; `lasted`: seconds from the injection to the fault undone (the hold, and a
    restart of the plane's part)."""
    lines = [f"{'fault':<11} {'injected':>8} {'fault lasted s':>14} {'recovery p50 s':>14} {'p99 s':>7} "
             f"{'max s':>7} {'violations':>10}"]
    for kind in kinds:
        r = recovery.get(kind) or []
        held = lasted.get(kind) or []
        lines.append(f"{kind:<11} {injected.get(kind, 0):>8} {statistics.fmean(held) if held else 0:>14.1f} "
                     f"{percentile(r, 0.5):>14.1f} {percentile(r, 0.99):>7.1f} {max(r, default=float('nan')):>7.1f} "
                     f"{violations.get(kind, 0):>10}")
    return lines


# --- processes: replicas, the slow proxy --------------------------------------------------------------------

class SlowProxy:
    """A loopback TCP proxy in front of the API server that holds every chunk `delay` seconds each way."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.delay = 0.0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                with contextlib.suppress(UnboundLocalError, OSError):
                    client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while True:
                ready, _, _ = select.select(list(peers), [], [], 30)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if self.delay:
                        time.sleep(self.delay)
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()


@dataclass
class Replica:
    name: str
    work: Path
    kubeconfig: Path
    argv: list[str]
    health: int
    store: Path
    process: subprocess.Popen[bytes] | None = None
    starts: list[float] = field(default_factory=list)
    """Epoch seconds of each start."""
    crashes: int = 0

    def start(self) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        with (self.work / f"{self.name}.log").open("ab") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                            env={**os.environ, "STEAD_HOME": str(self.work / self.name)})
        self.starts.append(time.time())

    def ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            return False
        with contextlib.suppress(OSError), \
                urllib.request.urlopen(f"http://127.0.0.1:{self.health}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
        return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait()

    def rss_mib(self) -> float:
        try:
            assert self.process is not None
            return int(Path(f"/proc/{self.process.pid}/statm").read_text().split()[1]) * PAGE / 2**20
        except (OSError, AssertionError, IndexError):
            return 0.0


def wait_for(check: Callable[[], bool], seconds: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


# --- the soak ------------------------------------------------------------------------------------------------

def stamped(key: str, stamps: Path, seconds: float) -> str:
    """A task script that records its start and end under `key` (its pid tells copies apart)."""
    return (f"t=$$-$(date +%s%N); echo \"start {key} $t\" >> {stamps}; trap 'echo \"stopped {key} $t\" >> "
            f"{stamps}; exit 143' TERM; sleep {seconds}; echo \"end {key} $t\" >> {stamps}")


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path, plane: LocalControlPlane, binaries: Binaries) -> None:
        self.args = args
        self.work = work
        self.plane = plane
        self.binaries = binaries
        self.kubeconfig = plane.info.kubeconfig
        self.rng = random.Random(args.seed + 1)
        self.projects = [f"soak-{i}" for i in range(args.projects)]
        self.stamps = work / "shared" / "stamps.log"
        self.replicas: dict[str, Replica] = {}
        self.proxy = SlowProxy(plane.ports.apiserver)
        self.runs: list[tuple[str, str, str]] = []
        """(plural, namespace, name) of every run created."""
        self.apps: dict[str, int] = dict.fromkeys(self.projects, 0)
        self.instances: dict[str, int] = dict.fromkeys(self.projects, 0)
        self.graph_runs: dict[str, int] = {}
        self.refused = 0
        self.actions = 0
        self.stop_load = threading.Event()
        self.rss: list[tuple[float, str, int, float]] = []
        self.lock = threading.Lock()
        self.nodes: Any = None

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig), "--request-timeout",
                               "20s", *args], input=input, capture_output=True, text=True, timeout=timeout)

    def apply(self, *bodies: dict[str, Any]) -> bool:
        done = self.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(b) for b in bodies))
        if done.returncode != 0:
            with self.lock:
                self.refused += 1
        return done.returncode == 0

    # -- set-up --

    def start_replicas(self) -> None:
        runs = self.work / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        runs.chmod(0o777)
        names = [f"r{i}" for i in range(self.args.replicas)]
        slow, full = names[1], names[-1]
        proxied = self.work / "kubeconfig-slow"
        proxied.write_text(self.kubeconfig.read_text().replace(f":{self.plane.ports.apiserver}",
                                                               f":{self.proxy.port}"))
        for name in names:
            store = self.work / name / "store"
            if name == full and "full-disk" in self.args.kinds:
                store.mkdir(parents=True, exist_ok=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(store)], check=True)
            kubeconfig = proxied if name == slow and "slow-api" in self.args.kinds else self.kubeconfig
            health = free_port()
            argv = [str(Path(sys.executable).parent / "stead"), "operator", "--kubeconfig", str(kubeconfig),
                    "--store", str(store), "--health-port", str(health), "--replica-id", name,
                    "--sharding", "leases", "--lease-seconds", str(self.args.lease), "--config-api-port", "0",
                    "--pipelines-state", str(runs), "--trust-local-namespaces", "soak-*",
                    "--ssh-allow", "127.0.0.0/8",
                    *(["--webhook-port", str(free_port()), "--install-crds"] if name == "r0" else
                      ["--webhook", "off", "--no-shipped-objects"])]
            self.replicas[name] = Replica(name, self.work, kubeconfig, argv, health, store)
        self.slow, self.full = slow, full
        for replica in self.replicas.values():
            replica.start()
            if not wait_for(replica.ready, 120):
                raise RuntimeError(f"{replica.name} not ready: see {self.work / f'{replica.name}.log'}")
        log(f"{len(self.replicas)} replicas ready")

    def seed_objects(self) -> None:
        from tests.e2e.test_scale_out import config_component, config_values
        from tests.e2e.test_services import entity, greeter_spec

        (self.work / "shared").mkdir(exist_ok=True)
        (self.work / "shared").chmod(0o777)
        self.stamps.touch()
        self.stamps.chmod(0o666)
        for project in self.projects:
            ok = self.kubectl("create", "namespace", project).returncode == 0
            assert ok, f"namespace {project}"
        bodies: list[dict[str, Any]] = []
        for i, project in enumerate(self.projects):
            bodies += [
                {"apiVersion": API, "kind": "Blueprint", "metadata": {"name": "work", "namespace": project},
                 "spec": {"active": True, **self.work_spec(project)}},
                {"apiVersion": API, "kind": "Blueprint", "metadata": {"name": "greeter", "namespace": project},
                 "spec": {"active": True, **greeter_spec()}},
                entity("greeter", project), config_component(project), config_values(project),
                {"apiVersion": API, "kind": "Environment", "metadata": {"name": "cfg", "namespace": project},
                 "spec": {"release": "mitaka-9.0", "components": ["so-fuel"],
                          "nodes": [{"name": "n1", "roles": ["controller"]}]}},
            ]
            if self.nodes is not None and i < self.args.graph_projects:
                bodies += self.graph_objects(project)
        for _ in range(30):  # the built-in lifecycles and the webhook come up in the background
            if self.apply(*bodies):
                break
            time.sleep(2)
        else:
            raise RuntimeError("the soak's objects were refused: " + self.kubectl(
                "apply", "-f", "-", input="\n---\n".join(json.dumps(b) for b in bodies)).stderr[-2000:])
        self.refused = 0

    def work_spec(self, project: str) -> dict[str, Any]:
        stamps = self.stamps
        return {"substrates": [{"name": "host", "type": "Local"}],
                "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
                    {"name": "hello", "type": "exec",
                     "script": stamped(f"{project}/@@{{calm_application_name}}@@/create", stamps, 1)}]}]}],
                "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
                "actions": [{"name": "work", "tasks": [
                    {"name": "one", "type": "exec",
                     "script": stamped(f"{project}/@@{{calm_application_name}}@@/one", stamps, 2)},
                    {"name": "two", "type": "exec",
                     "script": stamped(f"{project}/@@{{calm_application_name}}@@/two", stamps, 1)}],
                    "edges": [{"from": "one", "to": "two"}]}]}

    def graph_objects(self, project: str) -> list[dict[str, Any]]:
        nodes = self.nodes
        return [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "key", "namespace": project},
             "stringData": {"id_ed25519": nodes.private_key}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hosts", "namespace": project},
             "stringData": {"known_hosts": nodes.known_hosts}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "ssh", "namespace": project},
             "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                        "resourceNames": ["key", "hosts"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "ssh", "namespace": project},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ssh"},
             "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": project}]},
            {"apiVersion": API, "kind": "Environment", "metadata": {"name": "env", "namespace": project},
             "spec": {"release": "r1", "nodes": [{"name": "ctl", "roles": ["controller"],
                                                  "address": nodes.addresses[0]}],
                      "ssh": {"user": nodes.user, "port": nodes.port,
                              "privateKey": {"name": "key", "key": "id_ed25519"},
                              "knownHosts": {"name": "hosts", "key": "known_hosts"}}}},
            {"apiVersion": API, "kind": "DeploymentGraph", "metadata": {"name": "steps", "namespace": project},
             "spec": {"release": "r1", "tasks": [
                 {"id": "step", "type": "shell", "version": "2.1.0", "roles": ["controller"],
                  "parameters": {"cmd": stamped(f"{project}/graph/step", self.stamps, 2)}}]}},
        ]

    # -- the load --

    def load(self) -> None:
        while not self.stop_load.wait(self.args.interval):
            project = self.rng.choice(self.projects)
            what = self.rng.choice(["app", "run", "run", "si", "config", "graph"])
            try:
                self.act(what, project)
            except (subprocess.TimeoutExpired, OSError) as error:
                log(f"load: {what} in {project}: {error}")
            self.actions += 1

    def act(self, what: str, project: str) -> None:
        if what == "app" or (what == "run" and not self.apps[project]):
            if self.apps[project] < self.args.apps_per_project:
                name = f"a{self.apps[project]}"
                if self.apply({"apiVersion": API, "kind": "App", "metadata": {"name": name, "namespace": project},
                               "spec": {"blueprint": "work"}}):
                    self.apps[project] += 1
                    self.runs.append(("actionruns", project, f"{name}-create"))
        elif what == "run":
            app = f"a{self.rng.randrange(self.apps[project])}"
            name = f"{app}-w{len(self.runs)}"
            if self.apply({"apiVersion": API, "kind": "ActionRun", "metadata": {"name": name, "namespace": project},
                           "spec": {"app": app, "action": "work"}}):
                self.runs.append(("actionruns", project, name))
        elif what == "si":
            if self.instances[project] < 2:
                name = f"si{self.instances[project]}"
                from tests.e2e.test_services import instance
                if self.apply(instance(name, project, who="one")):
                    self.instances[project] += 1
            else:
                name = f"si{self.rng.randrange(2)}"
                who = "".join(self.rng.choice("abcdefgh") for _ in range(6))
                done = self.kubectl("patch", "serviceinstance", name, "-n", project, "--type", "merge", "-p",
                                    json.dumps({"spec": {"attributes": {"who": who}}}))
                self.refused += done.returncode != 0
        elif what == "config":
            done = self.kubectl("patch", "configvalues", "astute", "-n", project, "--type", "merge", "-p",
                                json.dumps({"spec": {"data": {"deployment_id": self.rng.randrange(10**6)}}}))
            self.refused += done.returncode != 0
        elif what == "graph" and self.nodes is not None and project in self.projects[:self.args.graph_projects]:
            last = self.graph_runs.get(project)
            if last is not None:
                state = self.kubectl("get", "graphrun", f"g{last}", "-n", project, "-o",
                                     "jsonpath={.status.state}").stdout
                if state not in TERMINAL:
                    return  # one run at a time per Environment
            n = (last or 0) + 1 if last is not None else 0
            if self.apply({"apiVersion": API, "kind": "GraphRun", "metadata": {"name": f"g{n}", "namespace": project},
                           "spec": {"environment": "env", "graphs": [{"type": "default"}]}}):
                self.graph_runs[project] = n
                self.runs.append(("graphruns", project, f"g{n}"))

    def sample_rss(self) -> None:
        while not self.stop_load.wait(5):
            for replica in list(self.replicas.values()):
                if replica.process is not None:
                    self.rss.append((time.time(), replica.name, replica.process.pid, replica.rss_mib()))

    def supervise(self, busy: set[str]) -> None:
        """A replica that exited by itself (not one a fault holds down) is counted and started again."""
        for replica in self.replicas.values():
            if replica.name not in busy and replica.process is not None and replica.process.poll() is not None:
                replica.crashes += 1
                log(f"{replica.name} exited by itself ({replica.process.returncode}): started again")
                replica.start()

    # -- faults --

    def inject(self, fault: Fault, victim: Replica) -> None:
        """The fault, held `fault.hold` seconds, then undone."""
        kind = fault.kind
        if kind == "kill9":
            victim.kill()
            time.sleep(fault.hold)
            victim.start()
        elif kind == "sigstop":
            assert victim.process is not None
            os.kill(victim.process.pid, signal.SIGSTOP)
            time.sleep(fault.hold)
            os.kill(victim.process.pid, signal.SIGCONT)
        elif kind in ("apiserver", "etcd"):
            pid = self.plane.status().pids[{"apiserver": "kube-apiserver", "etcd": "etcd"}[kind]]
            os.kill(pid, signal.SIGKILL)
            time.sleep(fault.hold)
            self.plane.up()
        elif kind == "lost-store":
            victim.kill()
            time.sleep(fault.hold)
            for entry in victim.store.iterdir():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            victim.start()
        elif kind == "full-disk":
            filler = victim.store / "filler"
            with filler.open("wb") as out, contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * 2**20)
            time.sleep(fault.hold)
            filler.unlink()
        elif kind == "slow-api":
            self.proxy.delay = self.args.latency
            time.sleep(fault.hold)
            self.proxy.delay = 0.0

    def victim_of(self, kind: str) -> Replica:
        if kind == "full-disk":
            return self.replicas[self.full]
        if kind == "slow-api":
            return self.replicas[self.slow]
        return self.replicas[self.rng.choice(sorted(self.replicas)[1:])]

    def recovered(self, tag: str) -> float | None:
        """Seconds until every replica is ready and a new Environment in every project is Ready."""
        began = time.monotonic()
        if not wait_for(lambda: all(r.ready() for r in self.replicas.values()), self.args.ready_bound):
            return None
        bodies = [{"apiVersion": API, "kind": "Environment", "metadata": {"name": f"canary-{tag}", "namespace": p},
                   "spec": {"release": "mitaka-9.0", "nodes": [{"name": "n1", "roles": ["controller"]}]}}
                  for p in self.projects]
        if not wait_for(lambda: self.apply(*bodies), self.args.ready_bound, interval=0.5):
            return None
        for project in self.projects:
            done = self.kubectl("wait", "--for=condition=Ready", "-n", project, f"environment/canary-{tag}",
                                f"--timeout={max(1, int(self.args.ready_bound - (time.monotonic() - began)))}s",
                                timeout=self.args.ready_bound + 30)
            if done.returncode != 0:
                return None
        return time.monotonic() - began

    # -- checks --

    def writes(self) -> list[Write]:
        prefix = f"{USER_AGENT}/"
        found = []
        with self.plane.info.audit_log.open("rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break
                event = json.loads(raw)
                agent = str(event.get("userAgent") or "")
                code = int((event.get("responseStatus") or {}).get("code") or 0)
                if not agent.startswith(prefix) or event.get("verb") not in WRITES or not 200 <= code < 300:
                    continue
                ref = event.get("objectRef") or {}
                at = datetime.fromisoformat(str(event["stageTimestamp"]).replace("Z", "+00:00")).timestamp()
                found.append(Write(at, agent[len(prefix):].split(" ")[0], event["verb"], ref.get("resource", ""),
                                   ref.get("subresource", ""), ref.get("namespace", ""), ref.get("name", "")))
        return found

    def objects(self, kinds: str) -> list[dict[str, Any]]:
        done = self.kubectl("get", kinds, "-A", "-o", "json", timeout=120)
        items: list[dict[str, Any]] = json.loads(done.stdout)["items"] if done.returncode == 0 else []
        return [o for o in items if o["metadata"].get("namespace") in self.projects]


def ready(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


@contextlib.contextmanager
def plane_in(work: Path) -> Iterator[tuple[LocalControlPlane, Binaries]]:
    binaries = ensure_binaries(progress=log)
    ports: list[int] = []
    while len(set(ports)) < 4:
        ports = [free_port() for _ in range(4)]
    plane = LocalControlPlane(work / "cluster", apiserver_port=ports[0], etcd_client_port=ports[1],
                              etcd_peer_port=ports[2], controller_manager_port=ports[3], binaries=binaries,
                              progress=log)
    try:
        plane.up()
        yield plane, binaries
    finally:
        plane.down()


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    seconds = args.minutes * 60
    faults = schedule(args.seed, args.kinds, seconds, args.gap, args.lease)
    log(f"{len(faults)} faults over {seconds:.0f} s: " + ", ".join(f"{f.kind}@{f.at:.0f}" for f in faults))
    with contextlib.ExitStack() as stack:
        plane, binaries = stack.enter_context(plane_in(work))
        soak = Soak(args, work, plane, binaries)
        if args.graph_projects:
            from tests.sshd import SshNodes, available
            why = available()
            if why is None:
                soak.nodes = SshNodes(work / "sshd", addresses=("127.0.0.2",)).start()
                stack.callback(soak.nodes.stop)
            else:
                log(f"no GraphRuns: {why}")
        stack.callback(lambda: [r.kill() for r in soak.replicas.values()])
        stack.callback(lambda: subprocess.run(["umount", "-l", str(work / soak.full / "store")], check=False)
                       if "full-disk" in args.kinds and hasattr(soak, "full") else None)
        soak.start_replicas()
        soak.seed_objects()
        log("load started")
        threads = [threading.Thread(target=soak.load, daemon=True),
                   threading.Thread(target=soak.sample_rss, daemon=True)]
        for thread in threads:
            thread.start()
        t0, wall0 = time.monotonic(), time.time()
        injected: dict[str, int] = {}
        recovery: dict[str, list[float]] = {}
        unrecovered: dict[str, int] = {}
        fault_times: list[tuple[float, str]] = []
        lasted: dict[str, list[float]] = {}
        skipped = 0
        for i, fault in enumerate(faults):
            if time.monotonic() - t0 + fault.hold > seconds - args.gap and fault.kind in injected:
                skipped += 1  # slow recoveries pushed it past the end, and its kind was seen: skipped
                continue
            while time.monotonic() - t0 < fault.at:
                soak.supervise(set())
                time.sleep(0.5)
            victim = soak.victim_of(fault.kind)
            log(f"fault {i}: {fault.kind} of {victim.name if fault.kind not in ('apiserver', 'etcd') else 'the plane'}"
                f" for {fault.hold:.1f} s")
            fault_times.append((time.time(), fault.kind))
            began = time.monotonic()
            soak.inject(fault, victim)
            lasted.setdefault(fault.kind, []).append(time.monotonic() - began)
            injected[fault.kind] = injected.get(fault.kind, 0) + 1
            soak.supervise(set())
            took = soak.recovered(str(i))
            if took is None:
                unrecovered[fault.kind] = unrecovered.get(fault.kind, 0) + 1
                log(f"fault {i}: {fault.kind}: NOT recovered within {args.ready_bound:.0f} s")
            else:
                recovery.setdefault(fault.kind, []).append(took)
                log(f"fault {i}: recovered in {took:.1f} s")
        while time.monotonic() - t0 < seconds:
            soak.supervise(set())
            time.sleep(0.5)
        soak.stop_load.set()
        for thread in threads:
            thread.join(timeout=60)
        log(f"load stopped after {soak.actions} actions ({soak.refused} refused): checking")
        report = check(soak, args, wall0, fault_times, injected, recovery, unrecovered)
        report["lasted"] = lasted
        report["skipped"] = skipped
        return report


def check(soak: Soak, args: argparse.Namespace, wall0: float, fault_times: list[tuple[float, str]],
          injected: dict[str, int], recovery: dict[str, list[float]], unrecovered: dict[str, int]) -> dict[str, Any]:
    found: dict[str, list[tuple[float, str]]] = {}

    def blame(at: float) -> str:
        return next((kind for t, kind in reversed(fault_times) if t <= at), "none")

    # every run terminal and every object Ready within the bound
    kinds = "apps,actionruns,graphruns,serviceinstances,environments,blueprints,serviceentities,configvalues"
    deadline = time.monotonic() + args.ready_bound
    while True:
        objects = soak.objects(kinds)
        by_key = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        runs = {(p, ns, n): by_key.get(("ActionRun" if p == "actionruns" else "GraphRun", ns, n))
                for p, ns, n in soak.runs}
        lost = [k for k, o in runs.items() if o is None or ((o.get("status") or {}).get("state") not in TERMINAL)]
        unready = [k for k, o in by_key.items() if k[0] not in ("ActionRun", "GraphRun") and not ready(o)]
        if (not lost and not unready) or time.monotonic() > deadline:
            break
        time.sleep(2)
    now = time.time()
    found["run lost"] = [(now, f"{p}/{ns}/{n}") for p, ns, n in lost]
    found["not Ready after the last fault"] = [(now, "/".join(k)) for k in unready]
    failed = [k for k, o in runs.items() if o is not None and (o.get("status") or {}).get("state") != "Succeeded"]

    # one writer per project at a time
    writes = soak.writes()
    found["object written by a replica not holding its project"] = [
        (w.at, f"{w.replica} {w.verb} {w.resource}{'/' + w.subresource if w.subresource else ''} "
               f"{w.namespace}/{w.name}")
        for w in outside_claims(writes, set(soak.projects))]
    by_object: dict[tuple[str, str, str], set[str]] = {}
    for w in writes:
        if w.namespace in soak.projects and w.resource != "events":
            by_object.setdefault((w.resource, w.namespace, w.name), set()).add(w.replica)

    # no step twice at once
    found["step running twice at once"] = [(now, b) for b in step_overlaps(soak.stamps.read_text().splitlines())]

    # no Event lost for an instance that exists
    listed = soak.kubectl("get", "events", "-A", "-o", "json", timeout=120).stdout
    events = json.loads(listed or '{"items": []}')["items"]
    transfers: dict[tuple[str, str], int] = {}
    for e in events:
        ref = e.get("involvedObject") or {}
        if ref.get("kind") == "ServiceInstance" and e.get("reason") in ("Transfer", "TransferError"):
            key = (ref.get("namespace", ""), ref.get("name", ""))
            transfers[key] = transfers.get(key, 0) + int(e.get("count") or 1)
    found["Event lost"] = []
    for o in objects:
        if o["kind"] == "ServiceInstance":
            key = (o["metadata"]["namespace"], o["metadata"]["name"])
            transfers_done = len((o.get("status") or {}).get("log") or [])
            missing = lost_events(transfers_done, transfers.get(key, 0))
            if missing:
                found["Event lost"].append((now, f"{key[0]}/{key[1]}: {missing} of {transfers_done}"))

    # RSS flat: r0 (never faulted), after warm-up
    warm = wall0 + max(60.0, args.minutes * 60 * 0.25)
    r0 = [(t - wall0, mib) for t, name, _, mib in soak.rss if name == "r0" and t >= warm and mib > 0]
    slope = rss_slope(r0)
    mean = statistics.fmean(m for _, m in r0) if r0 else 0.0
    found["RSS growth"] = ([(now, f"r0 grows {slope:.1f} MiB/h (mean {mean:.0f} MiB)")]
                           if len(r0) >= 10 and slope * (args.minutes / 60) > max(0.1 * mean, 20) else [])

    per_fault: dict[str, int] = {}
    for items in found.values():
        for at, _ in items:
            kind = blame(at)
            per_fault[kind] = per_fault.get(kind, 0) + 1
    for kind, n in unrecovered.items():
        per_fault[kind] = per_fault.get(kind, 0) + n
    crashes = {name: r.crashes for name, r in soak.replicas.items()}
    return {
        "seed": args.seed, "minutes": args.minutes, "replicas": args.replicas, "projects": len(soak.projects),
        "kinds": list(args.kinds), "injected": injected, "recovery": recovery, "unrecovered": unrecovered,
        "violations_by_fault": per_fault, "violations": {k: [v for _, v in items] for k, items in found.items()},
        "load": {"actions": soak.actions, "refused": soak.refused, "runs": len(soak.runs),
                 "runs_not_succeeded": len(failed), "writes": len(writes),
                 "objects_with_several_writers_over_time": sum(1 for v in by_object.values() if len(v) > 1)},
        "rss_r0": {"samples": len(r0), "mean_mib": round(mean, 1), "slope_mib_per_hour": round(slope, 1)},
        "crashes": crashes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=3, choices=(2, 3))
    parser.add_argument("--projects", type=int, default=6)
    parser.add_argument("--graph-projects", type=int, default=2,
                        help="projects with GraphRuns on an sshd node (0: none)")
    parser.add_argument("--apps-per-project", type=int, default=3)
    parser.add_argument("--faults", default=",".join(KINDS), help=f"the fault kinds, of {', '.join(KINDS)}")
    parser.add_argument("--gap", type=float, default=25, help="mean seconds between faults")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between load actions")
    parser.add_argument("--lease", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.3, help="slow-api: seconds added per chunk each way")
    parser.add_argument("--ready-bound", type=float, default=120)
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit log)")
    args = parser.parse_args()
    args.kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        parser.error(f"--faults: unknown kinds {sorted(unknown)} (known: {', '.join(KINDS)})")
    print(f"load at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    work = Path(tempfile.mkdtemp(prefix="stead-soak-"))
    work.chmod(0o755)  # the Apps' scripts run as nobody and append to work/shared/stamps.log
    try:
        report = run(args, work)
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"load at end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"soak: {args.minutes:g} min, seed {args.seed}, {args.replicas} replicas, {report['projects']} projects; "
          f"load {report['load']}")
    for line in table(args.kinds, report["injected"], report["recovery"], report["violations_by_fault"],
                      report["lasted"]):
        print(line)
    if report["skipped"]:
        print(f"{report['skipped']} scheduled faults not injected: slow recoveries pushed them past the end")
    print(f"r0 RSS after warm-up: {report['rss_r0']}; replicas exited by themselves: {report['crashes']}")
    total = 0
    for name, items in report["violations"].items():
        total += len(items)
        print(f"invariant {name}: {len(items)} violations" + "".join(f"\n  {v}" for v in items[:10]))
    unrec = sum(report["unrecovered"].values())
    if unrec:
        print(f"faults not recovered within {args.ready_bound:.0f} s: {report['unrecovered']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if total == 0 and unrec == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
