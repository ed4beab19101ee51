"""Supervising a workflow run from a kind's step: what every kind that runs workflows shares.

A kind that runs a workflow (ActionRun today; a graph run or a lifecycle's realization next)
describes the run (`RunRequest`: the workflow, where its scripts run, how to read its secrets)
and what its object shows of it (`RunObserver`), then calls `follow_run` from its step.
`follow_run` starts the runner (`python -m pipelines run`, a process of its own), follows it
through the files it writes, starts it again when it dies (it skips the steps that finished),
aborts it when the observer says so, and asks the observer for a status patch at most once a
second, only when what a user sees changed. It returns when the run is over.

Everything a run needs to survive an operator restart is on disk under the run's directory:
the workflow, the run store, and, once the outcome has reached the kind's objects, its
conclusion (`write_conclusion`): a restarted operator finds the run, follows a runner still
alive or starts it again, and a concluded run is never concluded twice. Runners live in sessions
of their own, so an operator that stops (SIGTERM, a new version) leaves them running; an operator
that the user interrupts on a terminal (`make run`, then Ctrl-C) stops them with it (`stop_runs`)
and the next operator resumes them.

A runner's stderr is kept in ``runner.log`` in the run's directory (bounded, masked by the runner),
and a runner that has to be started again is explained on the run (`restart_reason`: its exit code
or signal, or that the operator stopped it, and its last stderr lines) as a `RunnerRestarted` Event.

Where scripts run is decided here, from the operator's settings: on this host (namespaces it
trusts; when the operator is root, as a uid of the namespace's own, `script_uid`, or as
`script_user`) or as Jobs in the object's namespace, with a
short-lived token of that namespace's service account (`runner_credentials`), never the
operator's own rights. A run with `kubernetes` steps (`RunRequest.kube_api`) gets that token
wherever its scripts run, and the Secrets a run names are read with it in every case
(`SecretReader`). Every runner gets the operator's ssh settings (`SshOptions`: the
networks ssh steps may reach although they are this host's, the files root, the reboot command).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import functools
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import xxhash

from operators.runtime.core.clock import utc_now
from operators.runtime.core.pipeline import PermanentError, Pipeline, StepContext, StepFn, TemporaryError
from operators.runtime.kube.client import ApiError, core_path, load_configuration
from operators.runtime.settings import RunnerSettings, SlotsSettings
from pipelines.control import (
    RunProcess,
    is_running,
    prepare_run,
    read_progress,
    read_status,
    request_abort,
    run_paths,
    start_run,
    stop_runner,
)
from pipelines.hooks import new_run_key, seal
from pipelines.kubeapi import CREDENTIALS_ENV, KubeApiError, RestKubeApi, write_credentials
from pipelines.model import FINAL_STEP_STATES, Workflow
from pipelines.paths import RunPaths, private_dir, write_private

log = logging.getLogger(__name__)

FINAL_RUN_STATES = frozenset({"Succeeded", "Failed", "Aborted"})
ENDED_RUN_PHASES = frozenset({"Failed", "Aborted"})
"""The phases of a run that ended without succeeding (a run that succeeded is `Provisioned`): its state."""
MAX_RUNNER_STARTS = 5
PATCH_INTERVAL = 1.0
POLL_INTERVAL = 0.25
CONTROL_INTERVAL = 1.0
TOKEN_SECONDS = 3600
RUNNER_CREDENTIALS = "kube-credentials.json"
"""The runner's credentials (0600, in the run's directory): a token of the namespace's service account."""
STOPPED = "stead-stopped.json"
"""Written in the run's directory when the operator stopped its runner on purpose (`stop_runs`): the
next start says so, instead of an unexplained exit."""
RUNNER_LOG_LIMIT = 256 * 1024
"""``runner.log`` beyond this size is cut to its last quarter before a runner is started."""
RESTART_TAIL_LINES = 5
RESTART_TAIL_CHARS = 300
CONCLUSION = "stead-conclusion.json"
"""Written in the run's directory once the run's outcome reached the kind's objects: supervising
it again (after an operator restart, or for an event that waited behind the run) repeats nothing."""

AccountCredentials = Callable[[], Awaitable[Path]]
"""The credentials file of the namespace's service account (a short-lived token, `runner_credentials`),
minted on the first call of a runner start and reused after."""
SecretReader = Callable[[AccountCredentials], Awaitable[str]]
"""Reads one secret's value when a runner starts. A Secret reference is read with the namespace's
service account (the credentials it is given), wherever the run's scripts run: the operator's own
rights never read a tenant's Secret, so a namespace reads only what its account may."""


def run_pipeline(phases: tuple[str, ...], steps: Mapping[str, StepFn]) -> Pipeline:
    """The pipeline of a run kind (ActionRun, GraphRun): its last step, which follows the run, is announced
    and is where a spec change (`abort`) goes; and a run that ended shows it. A PermanentError whose facts
    give the state `Failed` or `Aborted` is the run's end, whatever step raised it (a missing environment
    at Init, a task at Running): the PHASE column says `Failed` or `Aborted`, never `Running` or `Planning`
    as if the run went on, nor `Provisioned` as if it succeeded."""

    def ending(step: StepFn) -> StepFn:
        @functools.wraps(step)
        async def wrapped(ctx: StepContext) -> Mapping[str, Any]:
            try:
                return await step(ctx)
            except PermanentError as error:
                state = error.facts.get("state")
                if error.phase is None and state in ENDED_RUN_PHASES:
                    error.phase = str(state)
                raise

        return wrapped

    last = phases[-2]
    return Pipeline(phases=phases, steps={phase: ending(step) for phase, step in steps.items()},
                    update_phase=last, announce=frozenset({last}), ended=ENDED_RUN_PHASES)


@dataclass(frozen=True)
class SshOptions:
    """What every runner's ssh steps may do (`stead operator --ssh-...`): Calm's Existing substrates,
    deployment graphs' node tasks. Passed to each runner as ``python -m pipelines run --ssh-...``."""

    allow: tuple[str, ...] = ()
    """Networks ssh steps may reach although loopback, link-local or this host's own (default: none)."""
    files_root: Path | None = None
    """The only directory whose files ssh.copy_files and ssh.sync may send (None: those steps fail)."""
    reboot_command: str | None = None
    """What ssh.reboot runs on a node (None: the runner's default, ``shutdown -r now``)."""
    connect_timeout: float | None = None
    """Bound of an ssh step's connect, handshake and authentication (None: the runner's default)."""

    def runner_args(self) -> list[str]:
        """The runner's flags for these options."""
        argv: list[str] = []
        for network in self.allow:
            argv += ["--ssh-allow", network]
        if self.files_root is not None:
            argv += ["--ssh-files-root", str(self.files_root)]
        if self.reboot_command:
            argv += ["--ssh-reboot-command", self.reboot_command]
        if self.connect_timeout is not None:
            argv += ["--ssh-connect-timeout", f"{self.connect_timeout:g}"]
        return argv


@dataclass(frozen=True)
class RunSettings:
    """How this operator runs workflows (`stead run` flags; the defaults are the flags' own)."""

    state_dir: Path  # where runs keep their state (one directory per run)
    trusted_local_namespaces: tuple[str, ...] = ()  # shell patterns: their scripts may run on this host
    script_user: str | None = None  # UID:GID local scripts run as (None: the operator's own user)
    script_uids: tuple[int, int] | None = None
    """FIRST, LAST: local scripts of each namespace run as a uid of their own from this range
    (`script_uid`), instead of `script_user`; None: all as `script_user`."""
    exec_in_jobs: bool = False  # other namespaces' scripts run as Jobs in their namespace (else refused)
    job_image: str = RunnerSettings.job_image
    job_service_account: str = RunnerSettings.job_service_account  # per namespace: script Jobs, runners act as it
    runner_token_seconds: int = TOKEN_SECONDS
    http_allow: tuple[str, ...] = ()  # networks http steps may reach although not public (`egress`)
    service_cidrs: tuple[str, ...] = ()  # networks http and ssh steps never reach, allowed or not
    max_concurrent: int = SlotsSettings.max_concurrent_runs  # runs at once (others queued); 0: `slots.default_limit`
    ssh: SshOptions = field(default_factory=SshOptions)  # every runner's ssh steps (`SshOptions`)

    def runner_deny_args(self) -> list[str]:
        """The runner's ``--deny`` flags: the Service CIDRs, refused to http and ssh steps alike."""
        return [arg for cidr in self.service_cidrs for arg in ("--deny", cidr)]

    @classmethod
    def beside(cls, store_path: Path, **given: Any) -> RunSettings:
        """Settings whose runs keep their state next to the operator's store."""
        return cls(state_dir=store_path.with_name(store_path.name + "-runs"), **given)


DEFAULT_SCRIPT_UIDS = (1 << 30, (1 << 31) - 2)
"""`--script-uid-range auto` (the operator is root): 2^30 uids, far above any a distribution or a
container runtime allocates, below 2^31 (some tools read uids as signed)."""


def script_uid(namespace: str, first: int, last: int) -> int:
    """The uid (and gid) the local scripts of `namespace` run as: a stable function of its name into
    ``[first, last]``, so that a restarted operator, or another replica, picks the same one.

    Scripts of two namespaces with different uids cannot read each other's processes (their
    environment in /proc), working files or signals. Two namespaces share a uid only if their hashes
    collide: with N trusted namespaces in a range of R uids, a chance of about N^2 / 2R (1,000
    namespaces in the default range: 0.05%); `RunSettings.script_uids` is validated so that the range
    never holds root or the operator's own uid.
    """
    return first + xxhash.xxh3_64_intdigest(namespace.encode()) % (last - first + 1)


def parse_uid_range(text: str, operator_uid: int) -> tuple[int, int]:
    """``FIRST-LAST`` into a range of uids scripts may run as; `ValueError` naming what is wrong."""
    first_text, dash, last_text = text.partition("-")
    if not dash or not first_text.isdigit() or not last_text.isdigit():
        raise ValueError(f"--script-uid-range {text}: expected FIRST-LAST, two uids")
    first, last = int(first_text), int(last_text)
    if not 0 < first <= last < (1 << 32) - 1:
        raise ValueError(f"--script-uid-range {text}: need 0 < FIRST <= LAST < 4294967295")
    if first <= operator_uid <= last:
        raise ValueError(f"--script-uid-range {text}: holds the operator's own uid {operator_uid}")
    return first, last


def local_script_user(settings: RunSettings, namespace: str) -> str | None:
    """Who a namespace's scripts run as on this host (UID:GID; None: the operator's own user)."""
    if settings.script_uids is None:
        return settings.script_user
    uid = script_uid(namespace, *settings.script_uids)
    return f"{uid}:{uid}"


class UntrustedNamespace(Exception):
    """The run has scripts for this host, its namespace is not trusted, and Jobs are off."""


@dataclass(frozen=True)
class RunRequest:
    """One run of a workflow, as a kind describes it."""

    paths: RunPaths
    workflow: Mapping[str, Any]  # a pipelines Workflow, without its secrets
    secrets: Mapping[str, SecretReader] = field(default_factory=dict)
    hooks: str | None = None  # MODULE:ATTR of the runner's hooks (macro rendering, masking)
    scripts_on_runner: Sequence[str] = ()  # steps whose scripts would run on this host (names, for messages)
    kube_api: bool = False
    """The run has `kubernetes` steps: the runner gets a short-lived token of the namespace's service
    account (`runner_credentials`) and acts with its rights, wherever the scripts run."""


@dataclass(frozen=True)
class Abort:
    """Abort the run. `reason`: why the run failed, when it is not the user's own abort (a lock
    that expired, say); None lets the run end as Aborted."""

    reason: str | None = None


class RunObserver(Protocol):
    """What a kind's object shows of its run."""

    async def abort(self) -> Abort | None:
        """Asked about once a second: whether the run must be aborted now (its object asks for it,
        a lock it holds expired, ...)."""
        ...

    def progress_patch(self, status: Mapping[str, Any], progress: Mapping[str, Any]) -> Mapping[str, Any]:
        """The status patch that shows this state of the run (`status.json`, `progress.json`). The
        same patch twice is written once."""
        ...

    def queue_patch(self, waiting: str | None) -> Mapping[str, Any]:
        """The status patch that shows the run waiting for a slot (`waiting` says why and behind
        how many), or, with None, that it has one and runs."""
        ...

    async def write(self, patch: Mapping[str, Any]) -> None:
        """Write a patch returned by `progress_patch` or `queue_patch` (the supervision may add its
        counters)."""
        ...


@dataclass
class Followed:
    """What a supervision saw: how often it started the runner and wrote status, and why it
    aborted the run, if it did."""

    starts: int
    writes: int
    aborted_for: str | None = None
    restarts: list[str] = field(default_factory=list)
    """Why the runner was started again, each time it was (`restart_reason`)."""
    status: Mapping[str, Any] = field(default_factory=dict)
    progress: Mapping[str, Any] = field(default_factory=dict)


SERVICE_CIDRS_PATH = "/apis/networking.k8s.io/v1/servicecidrs"


def cidrs_of(listing: Mapping[str, Any]) -> tuple[str, ...]:
    """The networks of a ServiceCIDR list (every object's ``spec.cidrs``), in order, once each."""
    found = [str(cidr) for item in listing.get("items") or [] for cidr in (item.get("spec") or {}).get("cidrs") or []]
    return tuple(dict.fromkeys(found))


async def discover_service_cidrs(kube: Any) -> tuple[str, ...]:
    """The cluster's Service CIDRs, from its ServiceCIDR objects (networking.k8s.io/v1, Kubernetes
    1.33+), so that no ClusterIP is reachable from http and ssh steps even when an allowed network
    covers it. Unreadable (an older cluster, no RBAC): none, and a warning naming the flag."""
    try:
        return cidrs_of(await kube.request("GET", SERVICE_CIDRS_PATH))
    except Exception as error:  # ApiError, ApiUnreachable: start anyway, the private ranges stay refused
        log.warning("cannot read the cluster's Service CIDRs (%s); ClusterIPs are refused only as private "
                    "addresses: pass --service-cidr to refuse them even inside an allowed network", error)
        return ()


def run_settings(ctx: StepContext) -> RunSettings:
    """The operator's run settings as the engine's `Services` holds them (the core's protocol names only
    the two fields domains read)."""
    settings = ctx.services.runs
    if not isinstance(settings, RunSettings):
        raise TypeError(f"the operator's services hold no RunSettings: {type(settings).__name__}")
    return settings


def paths_for(ctx: StepContext) -> RunPaths:
    """The run directory of the object this step handles (one run per object uid)."""
    settings = run_settings(ctx)
    return run_paths(settings.state_dir, ctx.obj.uid)


def in_jobs(ctx: StepContext, request: RunRequest) -> bool:
    """Whether the run's scripts run as Jobs in the object's namespace (True) or on this host.

    Raises `UntrustedNamespace` when they would have to run on this host and may not.
    """
    if not request.scripts_on_runner:
        return False
    settings = run_settings(ctx)
    if any(fnmatch.fnmatchcase(ctx.obj.namespace, pattern) for pattern in settings.trusted_local_namespaces):
        return False
    if settings.exec_in_jobs:
        return True
    where = ", ".join(request.scripts_on_runner)
    raise UntrustedNamespace(
        f"namespace {ctx.obj.namespace} is not trusted to run scripts on the operator's host (Local "
        f"substrates or the runner: {where}); the operator allows it with --trust-local-namespaces, "
        "or runs them as Jobs in the namespace with --exec-in-jobs")


def _read_record(path: Path) -> dict[str, Any] | None:
    """A JSON object the operator wrote in a run's directory; None when absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_conclusion(paths: RunPaths) -> dict[str, Any] | None:
    return _read_record(paths.run_dir / CONCLUSION)


def write_conclusion(paths: RunPaths, result: Mapping[str, Any]) -> None:
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    private_dir(paths.run_dir, upto=paths.state_dir)
    write_private(paths.run_dir / CONCLUSION, json.dumps(dict(result)))


@functools.cache
def _api_server() -> tuple[str, str | None]:
    """The API server's URL and CA (PEM) as the operator reaches it: the runner uses the same ones."""
    cfg = load_configuration(None)  # $KUBECONFIG (set by `stead run`) or the in-cluster service account
    ca = Path(cfg.ssl_ca_cert).read_text() if cfg.ssl_ca_cert else None
    return str(cfg.host).rstrip("/"), ca


async def runner_credentials(ctx: StepContext, paths: RunPaths) -> float:
    """Mint a short-lived token of the namespace's service account (TokenRequest) for the runner.

    Written to a 0600 file in the run's directory, whose path alone reaches the runner's (otherwise
    scrubbed) environment; the runner reads the file again when it changes. Returns when to refresh it.
    """
    settings = run_settings(ctx)
    namespace, account, seconds = ctx.obj.namespace, settings.job_service_account, settings.runner_token_seconds
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}}
    try:
        answer = await ctx.services.kube.request(
            "POST", core_path("serviceaccounts", namespace, account) + "/token", body)
    except ApiError as error:
        raise TemporaryError(
            "RunnerCredentials", f"cannot get a token of service account {namespace}/{account}: {error.message}",
            delay=10) from None
    server, ca = await asyncio.to_thread(_api_server)
    write_credentials(paths.run_dir / RUNNER_CREDENTIALS, server, str(answer["status"]["token"]), ca)
    return time.monotonic() + seconds / 2


def secret_forbidden(namespace: str, account: str, name: str) -> str:
    """What a run says when its account may not read a Secret: the grant that is missing, as commands."""
    role = f"read-{name}"[:253]
    return (f"Secret {name}: service account {namespace}/{account} may not read it: it needs get on secrets/{name} "
            f"in namespace {namespace} (kubectl -n {namespace} create role {role} --verb=get --resource=secrets "
            f"--resource-name={name}; kubectl -n {namespace} create rolebinding {role} --role={role} "
            f"--serviceaccount={namespace}:{account})")


async def read_account_secret(credentials: Path, namespace: str, account: str, name: str, key: str) -> str:
    """A key of a Secret of the run's namespace, read as the namespace's service account (`credentials`: a
    token of it, `runner_credentials`), never with the operator's rights: a namespace reads only what its
    own account may. A Secret that exists but may not be read is `SecretForbidden`, naming the missing
    grant (it was reported as not found, and nothing said what to grant); one that does not exist, or
    lacks the key, `SecretNotFound`; anything else `SecretUnreadable`. Messages never quote a value."""
    try:
        api = RestKubeApi.from_credentials_file(credentials)
        secret = await asyncio.to_thread(api.get, "v1", "Secret", namespace, name)
    except (KubeApiError, OSError, ValueError) as error:
        if getattr(error, "status", None) == 403:
            raise PermanentError("SecretForbidden", secret_forbidden(namespace, account, name)) from None
        raise PermanentError("SecretUnreadable", f"Secret {name}: {error}") from None
    if secret is None:
        raise PermanentError("SecretNotFound", f"Secret {name}: not found in namespace {namespace}")
    value = (secret.get("data") or {}).get(key)
    if value is None:
        raise PermanentError("SecretNotFound", f"Secret {name} has no key {key}")
    return base64.b64decode(value).decode()


async def start_runner(ctx: StepContext, request: RunRequest, jobs: bool) -> RunProcess:
    """Seal the secrets for this runner, write the workflow and start the runner (it skips what finished)."""
    paths = request.paths
    key = new_run_key()
    credentials = paths.run_dir / RUNNER_CREDENTIALS
    runner_needs = jobs or request.kube_api  # then `_follow` minted it and keeps it fresh for the runner
    minted = runner_needs

    async def account() -> Path:
        nonlocal minted
        if not minted:
            await runner_credentials(ctx, paths)
            minted = True
        return credentials

    try:
        sealed = {name: seal(await read(account), key, name) for name, read in request.secrets.items()}
    finally:
        if minted and not runner_needs:  # read for the secrets only: the runner (and its scripts) never see it
            credentials.unlink(missing_ok=True)
    prepare_run(paths.state_dir, paths.uid, Workflow.model_validate({**request.workflow, "secrets": sealed}))
    settings = run_settings(ctx)
    command: dict[str, Any]
    env: dict[str, str] = {}
    if jobs:
        command = {"kube_api": "pipelines.kubeapi:from_environment", "exec_backend": "job",
                   "job_namespace": ctx.obj.namespace, "job_service_account": settings.job_service_account,
                   "job_image": settings.job_image}
        env = {CREDENTIALS_ENV: str(credentials)}
    else:
        command = {"script_user": local_script_user(settings, ctx.obj.namespace)}
        if request.kube_api:
            command["kube_api"] = "pipelines.kubeapi:from_environment"
            env = {CREDENTIALS_ENV: str(paths.run_dir / RUNNER_CREDENTIALS)}
    log_fd = open_runner_log(paths)
    try:
        return await start_run(paths, secret_key=key, hooks=request.hooks,
                               extra=["--events", "none", *settings.ssh.runner_args(), *settings.runner_deny_args()],
                               stderr=log_fd, env=env, http_allow=settings.http_allow, **command)
    finally:
        os.close(log_fd)


RUNNER_START = "--- runner started at "


def open_runner_log(paths: RunPaths) -> int:
    """The runner's stderr: ``runner.log`` in the run's directory (0600), appended to, a line marking
    each start; cut to its last quarter first when beyond `RUNNER_LOG_LIMIT`, so that a run restarted
    many times keeps a bounded file. The runner masks what it writes there (`pipelines.__main__`)."""
    path = paths.runner_log
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > RUNNER_LOG_LIMIT:
            with path.open("rb") as old:
                old.seek(-(RUNNER_LOG_LIMIT // 4), os.SEEK_END)
                kept = old.read()
            write_private(path, kept.decode("utf-8", "replace").partition("\n")[2])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.write(fd, f"{RUNNER_START}{utc_now()} ---\n".encode())
    return fd


def runner_log_tail(paths: RunPaths, lines: int = RESTART_TAIL_LINES) -> list[str]:
    """The last non-empty lines the latest runner wrote on its stderr (each cut to
    `RESTART_TAIL_CHARS`), oldest first."""
    try:
        with paths.runner_log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 16 * 1024))
            text = file.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    latest = text.rpartition(RUNNER_START)[2].partition("\n")[2] if RUNNER_START in text else text
    found = [line.rstrip() for line in latest.splitlines() if line.strip()]
    return [line if len(line) <= RESTART_TAIL_CHARS else line[:RESTART_TAIL_CHARS] + "..." for line in found[-lines:]]


def restart_reason(returncode: int | None, stopped: Mapping[str, Any] | None, tail: Sequence[str]) -> str:
    """Why a runner is started again, for the run's `RunnerRestarted` Event and the operator's log.

    `returncode`: the exit status of a runner this operator process started (negative: the signal that
    killed it), None for one it did not (started before an operator restart); `stopped`: what
    `stop_runs` recorded when the operator stopped it on purpose; `tail`: its last stderr lines."""
    if stopped is not None:
        why = f"the operator stopped it at {stopped.get('at', '?')}: {stopped.get('why', 'no reason recorded')}"
    elif returncode is None:
        why = "it ended while no operator process that started it was there to see how (exit status unknown)"
    elif returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        why = f"it was killed by signal {name}" + (" (the kernel's OOM killer, or someone, sent it)"
                                                  if name == "SIGKILL" else "")
    else:
        why = f"it exited with code {returncode} before the run ended"
    said = "; its last stderr lines: " + " | ".join(tail) if tail else "; it wrote nothing on its stderr"
    return why + said


INTERRUPTED = "the operator was interrupted (Ctrl-C) and stopped its runs with it"


def stop_runs(state_dir: Path, why: str) -> list[str]:
    """Stop every live runner of this operator's runs (`pipelines.control.stop_runner`: the runner
    and what its running steps started), recording `why` for the next start, which resumes them.
    Returns the uids of the runs stopped. For an operator the user interrupts on a terminal."""
    stopped: list[str] = []
    root = state_dir / "runs"
    if not root.is_dir():
        return stopped
    for run_dir in sorted(root.iterdir()):
        try:
            paths = run_paths(state_dir, run_dir.name)
        except ValueError:
            continue
        if not is_running(paths):
            continue
        write_private(paths.run_dir / STOPPED, json.dumps({"at": utc_now(), "why": why}))
        if stop_runner(paths):
            stopped.append(paths.uid)
        else:
            (paths.run_dir / STOPPED).unlink(missing_ok=True)
    return stopped


def _read_stopped(paths: RunPaths) -> dict[str, Any] | None:
    return _read_record(paths.run_dir / STOPPED)


async def follow_run(ctx: StepContext, request: RunRequest, observer: RunObserver, *, starts: int = 0,
                     writes: int = 0) -> Followed:
    """Run `request` to its end (see the module's docstring); `starts` and `writes` carry on the
    counts of an earlier supervision of the same run (an operator restart)."""
    paths = request.paths
    jobs = in_jobs(ctx, request)
    followed = Followed(starts, writes)
    slots = ctx.services.run_slots
    waited = False

    async def queued(ahead: int, running: int) -> None:
        nonlocal waited
        waited = True
        await _write_quietly(observer, observer.queue_patch(
            f"queued: {running} runs in progress (this operator runs at most {slots.limit} at once), "
            f"{ahead} queued before this one"))

    await slots.acquire(ctx.obj.namespace, queued, at_once=is_running(paths))
    try:
        if waited:
            await _write_quietly(observer, observer.queue_patch(None))
        await _follow(ctx, request, observer, jobs, followed)
    finally:
        slots.release(ctx.obj.namespace)
    followed.status = read_status(paths) or {}
    followed.progress = read_progress(paths) or {}
    _observe_steps(ctx, followed.status)
    return followed


async def _write_quietly(observer: RunObserver, patch: Mapping[str, Any]) -> None:
    with contextlib.suppress(ApiError):  # shown at the next write; the run goes on meanwhile
        await observer.write(patch)


async def _follow(ctx: StepContext, request: RunRequest, observer: RunObserver, jobs: bool,
                  followed: Followed) -> None:
    paths = request.paths
    process: RunProcess | None = None
    shown: Mapping[str, Any] | None = None
    last_patch = 0.0
    last_control = time.monotonic()
    refresh_at = await runner_credentials(ctx, paths) if jobs or request.kube_api else None
    try:
        while True:
            if refresh_at is not None and time.monotonic() >= refresh_at:
                with contextlib.suppress(TemporaryError):  # the current token is still valid for a while
                    refresh_at = await runner_credentials(ctx, paths)
            progress = read_progress(paths)
            final = progress is not None and progress.get("finishedAt") and progress.get("phase") in FINAL_RUN_STATES
            alive = process is not None and process.process.returncode is None
            if final and not alive:
                break
            if not alive and not final and not is_running(paths):
                stopped = _read_stopped(paths)
                if followed.starts >= MAX_RUNNER_STARTS and stopped is None:
                    followed.aborted_for = f"the runner stopped {followed.starts} times before the run finished"
                    break
                if process is not None or followed.starts:
                    _restarted(ctx, followed, restart_reason(
                        process.process.returncode if process is not None else None, stopped,
                        await asyncio.to_thread(runner_log_tail, paths)), deliberate=stopped is not None)
                process = await start_runner(ctx, request, jobs)
                (paths.run_dir / STOPPED).unlink(missing_ok=True)
                followed.starts += 1
            if time.monotonic() - last_control >= CONTROL_INTERVAL and not paths.abort_file.exists():
                last_control = time.monotonic()
                abort = await observer.abort()
                if abort is not None:
                    followed.aborted_for = abort.reason
                    request_abort(paths)
            if progress is not None and time.monotonic() - last_patch >= PATCH_INTERVAL:
                view = observer.progress_patch(read_status(paths) or {}, progress)
                if view != shown:
                    with contextlib.suppress(ApiError):
                        await observer.write({**view, "runnerStarts": followed.starts,
                                              "statusWrites": followed.writes + 1})
                        followed.writes += 1
                    shown, last_patch = view, time.monotonic()
            await asyncio.sleep(POLL_INTERVAL)
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                await process.wait()
    finally:
        with contextlib.suppress(FileNotFoundError):
            (paths.run_dir / RUNNER_CREDENTIALS).unlink()


def _restarted(ctx: StepContext, followed: Followed, why: str, deliberate: bool) -> None:
    """Say on the run (an Event, the operator's log) why its runner is started again."""
    message = f"the run's runner is started again (start {followed.starts + 1}): {why}"
    followed.restarts.append(why)
    log.warning("run %s/%s: %s", ctx.obj.namespace, ctx.obj.name, message)
    ctx.services.events.record(ctx.obj, "Normal" if deliberate else "Warning", "RunnerRestarted", message)


def _observe_steps(ctx: StepContext, status: Mapping[str, Any]) -> None:
    """Each finished step instance into the step-duration histogram (`stead_workflow_step_duration_seconds`)."""
    for step in status.get("steps") or []:
        started, finished = step.get("startedAt"), step.get("finishedAt")
        if not started or not finished or step.get("state") not in FINAL_STEP_STATES:
            continue
        try:
            seconds = (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
        except (TypeError, ValueError):
            continue
        ctx.services.metrics.observe_step(ctx.obj.kind, str(step.get("type") or ""), str(step["state"]),
                                          max(0.0, seconds))
