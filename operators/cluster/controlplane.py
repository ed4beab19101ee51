"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.

``LocalControlPlane`` starts the three processes from the binaries ``build.py`` caches, keeps
every piece of state under one *home* directory, and stops exactly the processes it started:

    <home>/pki/           certificates and keys (pki.py)
    <home>/kubeconfig     admin credentials (CN=stead-admin, O=system:masters)
    <home>/config/        audit policy, the controller-manager's kubeconfig
    <home>/etcd/          etcd's data (kept across down/up, like a stopped cluster)
    <home>/logs/          <component>.log (the previous run's in <component>.log.1)
    <home>/audit/         audit.log: one JSON event per request, level Metadata
    <home>/run/           <component>.json pid records (processes.py), cluster.json (ports, versions)
    <home>/ports.json     the ports it last started on (ports.py: kept across down, used by the next up)

What the three processes are told (their flags, kubeconfigs, audit policy, admission configuration)
is planeconfig.py's; this module starts, checks and stops them.

Pods run on the local node (``node.py``) where the machine allows one; without it CRDs, webhooks,
RBAC, namespaces (deletion included), garbage collection, ServiceAccounts and Job→Pod creation
still behave as in a real cluster, and Pods stay Pending.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from operators.cluster.atomicwrite import write_file_atomically
from operators.cluster.build import (
    Binaries,
    ControlPlaneError,
    Progress,
    ensure_binaries,
    log_tail,
)
from operators.cluster.home import kubeconfig_path
from operators.cluster.pki import ADMIN_USER, CONTROLLER_MANAGER_USER, PkiFiles, ensure_pki
from operators.cluster.planeconfig import (
    AUDIT_POLICY,
    JwtIssuer,
    apiserver_argv,
    controller_manager_argv,
    etcd_argv,
    render_admission_config,
    render_authentication_config,
    render_kubeconfig,
    render_webhook_client_kubeconfig,
)
from operators.cluster.ports import (
    DEFAULT_APISERVER_PORT,
    DEFAULT_CONTROLLER_MANAGER_PORT,
    DEFAULT_ETCD_CLIENT_PORT,
    DEFAULT_ETCD_PEER_PORT,
    PORT_SETTINGS,
    PORTS_FILE,
    Ports,
)
from operators.cluster.probes import http_status
from operators.cluster.processes import LOOPBACK, ProcessTable, describe_pid, port_in_use, port_owner
from operators.cluster.versions import ETCD_VERSION, KUBERNETES_VERSION

logger = logging.getLogger(__name__)

START_TIMEOUT_SECONDS: Final = 120.0
STOP_TIMEOUT_SECONDS: Final = 20.0

ETCD: Final = "etcd"
APISERVER: Final = "kube-apiserver"
CONTROLLER_MANAGER: Final = "kube-controller-manager"
PROCESS_NAMES: Final = (ETCD, APISERVER, CONTROLLER_MANAGER)
PORT_OWNERS: Final = {"apiserver": APISERVER, "etcd_client": ETCD, "etcd_peer": ETCD,
                      "controller_manager": CONTROLLER_MANAGER}
"""Which process listens on each port of `Ports`."""
"""Start order; they stop in reverse."""

class PortInUse(ControlPlaneError):
    """A port the plane would listen on is taken (by another plane, or anything else)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field
        """Which one: a field of `Ports`."""


@dataclass(frozen=True)
class ClusterInfo:
    """What a client of a running local control plane needs to reach and inspect it."""

    server: str
    kubeconfig: Path
    home: Path
    ca_cert: Path
    """The serving CA: verifies the apiserver's certificate."""
    audit_log: Path
    webhook_client_ca: Path | None = None
    """The CA of the client certificate the API server presents to admission webhooks."""


@dataclass(frozen=True)
class ClusterStatus:
    """A snapshot of one home's control plane, for ``stead cluster status``."""

    running: bool
    """Every process is alive and the apiserver answers /readyz."""
    pids: Mapping[str, int]
    """Live processes of this control plane, by component name (missing ones are not running)."""
    server: str
    kubeconfig: Path
    home: Path
    versions: Mapping[str, str]
    ports: Ports
    """The ports it runs on (while it runs), else those its next `up` uses."""

    def describe(self, extra: Sequence[tuple[str, str]] = ()) -> str:
        """A few lines for a terminal: the state, how to reach the plane, pids and versions, and
        ``extra`` rows (the local node's)."""
        if self.running:
            state = "running"
        elif not self.pids:
            state = "stopped (start it with `stead cluster up`)"
        elif len(self.pids) == len(PROCESS_NAMES):
            state = "not ready (every process is alive, but kube-apiserver does not answer /readyz)"
        else:
            state = "not running (some components are down; `stead cluster up` restarts them)"
        rows = [("control plane", state), ("server", self.server), ("kubeconfig", str(self.kubeconfig)),
                ("home", str(self.home)), ("ports", self.ports.describe())]
        rows += [(name, f"pid {self.pids[name]}" if name in self.pids else "not running") for name in PROCESS_NAMES]
        rows.append(("versions", ", ".join(f"{name} {version}" for name, version in self.versions.items())))
        rows += extra
        width = max(len(label) for label, _ in rows) + 2
        return "\n".join(f"{label + ':':<{width}}{value}" for label, value in rows)


WEBHOOK_CLIENT_CA_CONFIGMAP: Final = "stead-webhook-client-ca"
"""ConfigMap in kube-system (key `ca.crt`) where the plane publishes the CA of the certificate its
API server presents to webhooks: `stead operator --webhook-client-ca auto` reads it."""


def publish_webhook_client_ca(port: int, admin: ssl.SSLContext, ca_pem: bytes) -> bool:
    """Server-side apply of the webhook client CA's ConfigMap; True once the API server took it."""
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": WEBHOOK_CLIENT_CA_CONFIGMAP, "namespace": "kube-system",
                                    "labels": {"app.kubernetes.io/part-of": "stead"}},
                       "data": {"ca.crt": ca_pem.decode("ascii")}})
    path = (f"/api/v1/namespaces/kube-system/configmaps/{WEBHOOK_CLIENT_CA_CONFIGMAP}"
            "?fieldManager=stead-cluster&force=true")
    connection = http.client.HTTPSConnection(LOOPBACK, port, timeout=5, context=admin)
    try:
        connection.request("PATCH", path, body, {"Content-Type": "application/apply-patch+yaml"})
        response = connection.getresponse()
        response.read()
        return response.status in (200, 201)
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def wait_for_start(
    condition: Callable[[], bool],
    what: str,
    started: Mapping[str, subprocess.Popen[bytes]],
    deadline: float,
    timeout: float,
    log_path: Callable[[str], Path],
) -> None:
    """Poll ``condition`` until true; fail early, with the tail of its log, if a process just
    started exits, or at ``deadline`` (``timeout`` seconds after the start) with the last one's.
    The local node's start waits the same way (node.py)."""
    interval = 0.05
    while True:
        for name, process in started.items():
            code = process.poll()
            if code is not None:
                log = log_path(name)
                raise ControlPlaneError(f"{name} exited with code {code} while starting; log: {log}", log_tail(log))
        if condition():
            return
        if time.monotonic() > deadline:
            log = log_path(list(started)[-1])
            raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}; log: {log}", log_tail(log))
        time.sleep(interval)
        interval = min(interval * 2, 0.5)


# --- the control plane -----------------------------------------------------------------------


class LocalControlPlane:
    """etcd, kube-apiserver and kube-controller-manager on 127.0.0.1, state under ``home``.

    ``up`` is idempotent and ``down`` stops only the processes recorded under ``home`` (checked
    against /proc, so a stale pid file never leads to killing an unrelated process). Several
    control planes can run side by side with different homes and ports.
    """

    def __init__(
        self,
        home: Path,
        *,
        apiserver_port: int = DEFAULT_APISERVER_PORT,
        etcd_client_port: int = DEFAULT_ETCD_CLIENT_PORT,
        etcd_peer_port: int = DEFAULT_ETCD_PEER_PORT,
        controller_manager_port: int = DEFAULT_CONTROLLER_MANAGER_PORT,
        binaries: Binaries | None = None,
        start_timeout: float = START_TIMEOUT_SECONDS,
        progress: Progress | None = None,
    ) -> None:
        self.home = home.expanduser().absolute()
        self.ports = Ports(apiserver_port, etcd_client_port, etcd_peer_port,
                           controller_manager_port)
        if len(set(self.ports.labelled().values())) != 4:
            raise ValueError(f"the control plane's ports must differ: {self.ports}")
        self._binaries = binaries
        self.start_timeout = start_timeout
        self._progress: Progress = progress or logger.info
        """Where start-up steps are reported (default: this module's logger at INFO)."""
        self._processes = ProcessTable(self._run_dir, owner_mark=str(self.home))
        """The components started from this home, by this object or an earlier invocation."""

    # -- layout --

    @property
    def kubeconfig_path(self) -> Path:
        return kubeconfig_path(self.home)

    @property
    def pki(self) -> PkiFiles:
        return PkiFiles(self.home / "pki")

    @property
    def audit_log_path(self) -> Path:
        return self.home / "audit" / "audit.log"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def _run_dir(self) -> Path:
        return self.home / "run"

    @property
    def _config_dir(self) -> Path:
        return self.home / "config"

    @property
    def _cluster_state_path(self) -> Path:
        return self._run_dir / "cluster.json"

    def log_path(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def server_url(self, ports: Ports | None = None) -> str:
        return f"https://{LOOPBACK}:{(ports or self.ports).apiserver}"

    @property
    def info(self) -> ClusterInfo:
        pki = self.pki
        return ClusterInfo(
            server=self.server_url(self._recorded_ports() or self.ports),
            kubeconfig=self.kubeconfig_path,
            home=self.home,
            ca_cert=pki.serving_ca_cert,
            audit_log=self.audit_log_path,
            webhook_client_ca=pki.webhook_client_ca_cert,
        )

    # -- public operations --

    def up(self) -> ClusterInfo:
        """Start the control plane (or find it running) and return how to reach it.

        Returns at once when all three processes are ours, alive and /readyz answers. When some
        of them are alive and healthy on the same ports and versions (the API server died, say),
        starts only the others. Otherwise stops any leftovers of ours, builds the binaries if
        needed, and starts etcd, the apiserver and the controller-manager, waiting for each to be
        healthy and for the
        ``default`` ServiceAccount (the sign that the controllers work). On any failure
        everything started is stopped again and ControlPlaneError carries the failing log's tail.
        """
        recorded = self._recorded_ports()
        if self._all_alive() and recorded is not None and self._apiserver_ready(recorded):
            if recorded != self.ports:
                raise ControlPlaneError(
                    f"a control plane is already running in {self.home} on other ports "
                    f"({recorded}); stop it with `stead cluster down` first"
                )
            return self.info
        keep = self._healthy_to_keep(recorded)
        if not keep:
            self.down()
        binaries = self._binaries or ensure_binaries(progress=self._progress)
        self._prepare_files()
        self.check_ports_free(skip=keep)
        deadline = time.monotonic() + self.start_timeout
        try:
            self._start_all(binaries, deadline, keep)
        except BaseException:
            self.down()
            raise
        state = {"ports": asdict(self.ports),
                 "versions": {"kubernetes": KUBERNETES_VERSION, "etcd": ETCD_VERSION},
                 "binaries": {name: str(path) for name, path in asdict(binaries).items()}}
        write_file_atomically(self._cluster_state_path, json.dumps(state, indent=2).encode())
        write_file_atomically(self.home / PORTS_FILE, (json.dumps(asdict(self.ports), indent=2) + "\n").encode())
        return self.info

    def down(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop this home's processes: SIGTERM, then SIGKILL after ``timeout`` seconds.

        The apiserver and controller-manager go first so that etcd outlives its clients. Pid
        records whose process is gone or is not ours (pid reused) are only deleted.
        """
        for group in ((CONTROLLER_MANAGER, APISERVER), (ETCD,)):
            survivors = self._processes.stop(group, timeout)
            if survivors:
                pids = ", ".join(f"{record.name} pid {record.pid}" for record in survivors)
                raise ControlPlaneError(f"could not stop {pids} even with SIGKILL")
        self._cluster_state_path.unlink(missing_ok=True)

    def status(self) -> ClusterStatus:
        """Which of this home's processes are alive, and whether the apiserver is ready."""
        pids = self._processes.alive(PROCESS_NAMES)
        ports = self._recorded_ports() or self.ports
        running = len(pids) == len(PROCESS_NAMES) and self._apiserver_ready(ports)
        versions = self._recorded_versions() or {"kubernetes": KUBERNETES_VERSION,
                                                 "etcd": ETCD_VERSION}
        return ClusterStatus(running=running, pids=pids, server=self.server_url(ports),
                             kubeconfig=self.kubeconfig_path, home=self.home, versions=versions, ports=ports)

    def _healthy_to_keep(self, recorded: Ports | None) -> frozenset[str]:
        """The processes of a partly running plane (same ports and versions) that are alive and
        healthy: `up` starts only the others, so that a dead API server does not cost a restart of
        a healthy etcd and controller-manager. Alive but unhealthy ones are stopped here."""
        if recorded != self.ports or self._recorded_versions() != {"kubernetes": KUBERNETES_VERSION,
                                                                    "etcd": ETCD_VERSION}:
            return frozenset()
        alive = self._processes.alive(PROCESS_NAMES)
        healthy = {name for name in alive if self._healthy(name)}
        if ETCD not in healthy:
            return frozenset()  # everything depends on etcd: start all of it again
        unhealthy = [name for name in alive if name not in healthy]
        if unhealthy and self._processes.stop(unhealthy, STOP_TIMEOUT_SECONDS):
            return frozenset()
        return frozenset(healthy)

    def _healthy(self, name: str) -> bool:
        ports = self.ports
        if name == ETCD:
            return http_status(ports.etcd_client, "/health") == 200
        if name == APISERVER:
            return self._apiserver_ready(ports)
        return http_status(ports.controller_manager, "/healthz", self._client_context(with_admin_cert=False)) == 200

    def check_ports_free(self, skip: frozenset[str] = frozenset()) -> None:
        """Raise PortInUse naming the first configured port something already listens on (the
        ports of the processes in `skip`, kept running, are theirs)."""
        for setting in PORT_SETTINGS:
            if PORT_OWNERS[setting.field] in skip:
                continue
            port = getattr(self.ports, setting.field)
            if port_in_use(port):
                owner = port_owner(port)
                by = f" by {describe_pid(owner)}" if owner is not None else ""
                raise PortInUse(
                    f"port {port} ({setting.label}) is in use{by}; stop it or choose another port",
                    setting.field,
                )

    # -- starting --

    def _prepare_files(self) -> None:
        for directory in (self.logs_dir, self.audit_log_path.parent, self._run_dir,
                          self._config_dir, self.home / "etcd"):
            directory.mkdir(parents=True, exist_ok=True)
        (self.home / "etcd").chmod(0o700)
        pki = ensure_pki(self.home / "pki")
        server = self.server_url()
        serving_ca = pki.serving_ca_cert.read_bytes()
        write_file_atomically(
            self.kubeconfig_path,
            render_kubeconfig(server, serving_ca, pki.admin_cert.read_bytes(),
                              pki.admin_key.read_bytes(), user=ADMIN_USER).encode(),
            0o600,
        )
        write_file_atomically(
            self._controller_manager_kubeconfig,
            render_kubeconfig(server, serving_ca, pki.controller_manager_client_cert.read_bytes(),
                              pki.controller_manager_client_key.read_bytes(),
                              user=CONTROLLER_MANAGER_USER).encode(),
            0o600,
        )
        write_file_atomically(self._audit_policy, AUDIT_POLICY.encode())
        write_file_atomically(
            self._webhook_client_kubeconfig,
            render_webhook_client_kubeconfig(pki.apiserver_webhook_client_cert.read_bytes(),
                                             pki.apiserver_webhook_client_key.read_bytes()).encode(),
            0o600,
        )
        write_file_atomically(self._admission_config,
                              render_admission_config(self._webhook_client_kubeconfig).encode())
        if not self.authentication_config_path.exists():  # issuers set by `set_jwt_issuers` stay across a restart
            write_file_atomically(self.authentication_config_path, render_authentication_config().encode())

    @property
    def _controller_manager_kubeconfig(self) -> Path:
        return self._config_dir / "controller-manager.kubeconfig"

    @property
    def _audit_policy(self) -> Path:
        return self._config_dir / "audit-policy.yaml"

    @property
    def _webhook_client_kubeconfig(self) -> Path:
        return self._config_dir / "webhook-client.kubeconfig"

    @property
    def _admission_config(self) -> Path:
        return self._config_dir / "admission.yaml"

    @property
    def authentication_config_path(self) -> Path:
        """The API server's AuthenticationConfiguration (`set_jwt_issuers` writes it)."""
        return self._config_dir / "authentication.yaml"

    def set_jwt_issuers(self, issuers: Sequence[JwtIssuer]) -> None:
        """Make the API server accept these OIDC issuers' id_tokens (and no other issuer's), without a restart:
        it reloads `authentication_config_path` when the file changes (written whole, by a rename). It then
        fetches each issuer's discovery document and keys before the new authenticators count, so a caller
        polls until a token of the issuer authenticates."""
        self._config_dir.mkdir(parents=True, exist_ok=True)
        write_file_atomically(self.authentication_config_path, render_authentication_config(issuers).encode())

    def _start_all(self, binaries: Binaries, deadline: float, keep: frozenset[str] = frozenset()) -> None:
        """Start etcd, the apiserver and the controller-manager in that order, but those in `keep`
        (running and healthy), each waited for before the next."""
        ports, pki = self.ports, self.pki
        admin = self._client_context(with_admin_cert=True)
        anonymous = self._client_context(with_admin_cert=False)
        started: dict[str, subprocess.Popen[bytes]] = {}

        if ETCD not in keep:
            self._progress(f"starting etcd on {LOOPBACK}:{ports.etcd_client}")
            started[ETCD] = self._launch(ETCD, etcd_argv(binaries.etcd, ports, self.home / "etcd"))
            self._wait(lambda: http_status(ports.etcd_client, "/health") == 200,
                       "etcd to report healthy", started, deadline)

        if APISERVER not in keep:
            self._progress(f"starting kube-apiserver on {self.server_url()}")
            started[APISERVER] = self._launch(APISERVER, apiserver_argv(
                binaries, pki, ports, audit_policy=self._audit_policy, audit_log=self.audit_log_path,
                admission_config=self._admission_config, authentication_config=self.authentication_config_path))
            self._wait(lambda: http_status(ports.apiserver, "/readyz", admin) == 200,
                       "kube-apiserver /readyz", started, deadline)

        if CONTROLLER_MANAGER not in keep:
            self._progress("starting kube-controller-manager")
            started[CONTROLLER_MANAGER] = self._launch(
                CONTROLLER_MANAGER, controller_manager_argv(
                    binaries, pki, ports, kubeconfig=self._controller_manager_kubeconfig,
                    volume_plugin_dir=self.home / "volume-plugins")
            )
            self._wait(lambda: http_status(ports.controller_manager, "/healthz", anonymous) == 200,
                       "kube-controller-manager /healthz", started, deadline)
        default_sa = "/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(lambda: http_status(ports.apiserver, default_sa, admin) == 200,
                   "the controller-manager to create the default ServiceAccount",
                   started, deadline)
        self._wait(lambda: publish_webhook_client_ca(ports.apiserver, admin,
                                                     pki.webhook_client_ca_cert.read_bytes()),
                   f"the webhook client CA in ConfigMap kube-system/{WEBHOOK_CLIENT_CA_CONFIGMAP}",
                   started, deadline)

    def _client_context(self, *, with_admin_cert: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.serving_ca_cert))
        if with_admin_cert:
            context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _launch(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        return self._processes.launch(name, argv, log=self.log_path(name), cwd=self.home)

    def _wait(
        self,
        condition: Callable[[], bool],
        what: str,
        started: Mapping[str, subprocess.Popen[bytes]],
        deadline: float,
    ) -> None:
        wait_for_start(condition, what, started, deadline, self.start_timeout, self.log_path)

    # -- recorded state --

    def _recorded_state(self) -> dict[str, object] | None:
        try:
            state = json.loads(self._cluster_state_path.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def _recorded_ports(self) -> Ports | None:
        state = self._recorded_state()
        ports = state.get("ports") if state else None
        if not isinstance(ports, dict):
            return None
        try:
            return Ports(**{key: int(value) for key, value in ports.items()})
        except (TypeError, ValueError):
            return None

    def _recorded_versions(self) -> dict[str, str] | None:
        state = self._recorded_state()
        versions = state.get("versions") if state else None
        if not isinstance(versions, dict):
            return None
        return {str(key): str(value) for key, value in versions.items()}

    def _all_alive(self) -> bool:
        return len(self._processes.alive(PROCESS_NAMES)) == len(PROCESS_NAMES)

    def _apiserver_ready(self, ports: Ports) -> bool:
        try:
            context = self._client_context(with_admin_cert=True)
        except (OSError, ssl.SSLError):
            return False
        return http_status(ports.apiserver, "/readyz", context) == 200
