"""How this operator runs workflows: its run settings, and what follows from them alone.

Why a module of its own: the settings (`RunSettings`, `SshOptions`) are built by the command line and
the process before any run exists, and read by every other part of run supervision; keeping them
apart from starting and following runners lets the CLI and the process import them without the
supervision. Here too what is derived from the settings only: the uid a namespace's local scripts
run as (`script_uid`), the cluster's Service CIDRs that http and ssh steps never reach
(`discover_service_cidrs`), and where a step's object keeps its run (`paths_for`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from operators.runtime.core.pipeline import StepContext
from operators.runtime.settings import RunnerSettings, SlotsSettings
from pipelines.control import run_paths
from pipelines.paths import RunPaths

log = logging.getLogger(__name__)

TOKEN_SECONDS = 3600


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
