"""`stead operator` (and `stead run` with operator flags, as it was first spelled): run the operators in the
foreground, with the flags of the settings tree (`operators.runtime.settings`, added by
`operators.cli.operator_args`). Imported only when the operator runs: it needs the catalog, Kopf and the engine."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import operators.cluster
from operators.catalog import API_EXTENSIONS, DOMAINS, KINDS
from operators.cli import local
from operators.cli.console import operator_console
from operators.cluster.sshd import demo_allow_network
from operators.runtime import process
from operators.runtime.domain import AddonContext, platform_addons
from operators.runtime.engine.runs import (
    DEFAULT_SCRIPT_UIDS,
    INTERRUPTED,
    RunSettings,
    SshOptions,
    parse_uid_range,
    stop_runs,
)
from operators.runtime.serving.eventloop import event_loop_factory
from operators.runtime.settings import OperatorSettings, RunnerSettings, from_args
from pipelines.executors import ScriptUser


def trusted_namespaces(explicit: Sequence[str] | None, on_local_plane: bool) -> tuple[str, ...]:
    """Namespaces whose scripts run on this host. Unless named, every namespace of the control plane
    Stead started on this machine (it is the user's own), and none of any other cluster, even
    with `--local auto`: a reachable real cluster's tenants must not get a shell on this host."""
    if explicit is not None:
        return tuple(explicit)
    return ("*",) if on_local_plane else ()


def script_user(given: str, euid: int) -> str | None:
    """Who local scripts run as (None: the operator's own user). Only root can switch users."""
    if given == "none":
        return None
    if given == "auto":
        return "65534:65534" if euid == 0 else None
    if euid != 0:
        raise ValueError(f"--script-user {given}: the operator must run as root to run scripts as another user")
    return str(ScriptUser.parse(given))


def script_uids(given: str, user: str, euid: int) -> tuple[int, int] | None:
    """The range of per-namespace script uids (None: every namespace's scripts run as --script-user)."""
    if given == "none":
        return None
    if given == "auto":
        return DEFAULT_SCRIPT_UIDS if euid == 0 and user == "auto" else None
    if euid != 0:
        raise ValueError(f"--script-uid-range {given}: the operator must run as root to run scripts as other users")
    return parse_uid_range(given, euid)


def ssh_allow(explicit: Sequence[str], demo_node: str | None) -> tuple[str, ...]:
    """The networks ssh steps may reach although not public: those `--ssh-allow` names, and on the local
    plane Stead started, its demo node's address (`demo_node`; None elsewhere): the tour reaches it
    with no flag, as `--trust-local-namespaces` lets it run scripts. Nothing else of loopback."""
    return tuple(dict.fromkeys([*explicit, *demo_allow_network(demo_node)]))


def ssh_options(args: argparse.Namespace, demo_node: str | None = None) -> SshOptions:
    """The runners' ssh settings from `stead operator`'s parsed --ssh-* flags (and the local plane's demo node)."""
    return runner_ssh(from_args(args).runs, demo_node)


def runner_ssh(runs: RunnerSettings, demo_node: str | None = None) -> SshOptions:
    """The runners' ssh settings from the operator's settings (and the local plane's demo node)."""

    return SshOptions(allow=ssh_allow(runs.ssh_allow, demo_node), files_root=runs.ssh_files_root,
                      reboot_command=runs.ssh_reboot_command or None)


def cmd_run(args: argparse.Namespace) -> int:
    """`stead operator`: the settings of the command line, the local control plane when asked, the operator."""
    return run_operator_with(from_args(args))


def run_operator_with(settings: OperatorSettings) -> int:
    cluster, runs = settings.cluster, settings.runs
    logging.basicConfig(
        level=logging.DEBUG if settings.log.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not settings.log.verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    home = local.home()
    kubeconfig: Path | None = cluster.kubeconfig
    started = None
    on_local_plane = False
    demo_node: str | None = None
    if cluster.local == "always" or (cluster.local != "never"
                                     and not operators.cluster.reaches_cluster(kubeconfig)):
        try:
            plane = local.local_plane()
            was_running = plane.status().running
            info = plane.up()
        except operators.cluster.ControlPlaneError as error:
            print(f"stead run: local control plane: {error}", file=sys.stderr)
            return 1
        try:
            local.start_node(plane, cluster.node)
        except operators.cluster.ControlPlaneError as error:
            print(f"stead run: local node: {error}", file=sys.stderr)
            if not was_running:
                local.stop_local(plane)
            return 1
        demo = local.start_demo_node(plane)
        demo_node = demo.address if demo is not None else None
        started = None if was_running else plane
        on_local_plane = True
        kubeconfig = info.kubeconfig
        print(f"local control plane at {info.server}; export KUBECONFIG={info.kubeconfig}", file=sys.stderr)
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(kubeconfig)  # Kopf's login reads it too
    try:
        run_scripts_as = script_user(runs.script_user, os.geteuid())
        uid_range = script_uids(runs.script_uid_range, runs.script_user, os.geteuid())
    except ValueError as error:
        print(f"stead run: {error}", file=sys.stderr)
        return 2
    trusted = trusted_namespaces(runs.trust_local_namespaces, on_local_plane)
    if trusted and run_scripts_as is None:
        logging.getLogger("stead").warning(
            "scripts of trusted namespaces (%s) run as the operator's own user and can read its files; run the "
            "operator as root (scripts then run as an unprivileged user) or use --exec-in-jobs", ", ".join(trusted))
    hook = settings.webhook
    webhook = None
    if hook.mode == "local":
        webhook = process.WebhookOptions(listen=hook.listen, port=hook.port, register_url=f"https://{hook.listen}:{hook.port}",
                                 client_ca=hook.client_ca)
    elif hook.mode == "mounted":
        webhook = process.WebhookOptions(listen=hook.listen, port=hook.port, certfile=hook.cert_dir / "tls.crt",
                                 keyfile=hook.cert_dir / "tls.key", client_ca=hook.client_ca)
    store_path = cluster.store or home / "store"
    given: dict[str, Any] = dict(trusted_local_namespaces=trusted, script_user=run_scripts_as, script_uids=uid_range,
                 exec_in_jobs=runs.exec_in_jobs,
                 job_image=runs.job_image, job_service_account=runs.job_service_account,
                 http_allow=tuple(runs.http_allow_networks), service_cidrs=tuple(runs.service_cidr),
                 max_concurrent=settings.slots.max_concurrent_runs,
                 ssh=runner_ssh(runs, demo_node))
    options = process.OperatorOptions(
        store_path=store_path,
        replica=cluster.replica,
        sharding=cluster.sharding,
        lease_seconds=cluster.lease_seconds,
        placement=cluster.placement,
        placement_epsilon=cluster.placement_epsilon,
        namespace=cluster.operator_namespace,
        kubeconfig=kubeconfig,
        namespaces=tuple(cluster.namespaces),
        install_crds=cluster.install_crds or cluster.local != "never",
        shipped_objects=cluster.shipped_objects,
        webhook=webhook,
        health_listen=settings.health.listen,
        health_port=settings.health.port,
        runs=RunSettings(state_dir=runs.pipelines_state, **given) if runs.pipelines_state
        else RunSettings.beside(store_path, **given),
        stop_runs_on_interrupt=on_local_plane,  # `make run`, Ctrl-C: "stops everything", runs included
    )
    context = AddonContext(settings, home, options.runs.state_dir if options.runs is not None else None,
                           API_EXTENSIONS)
    addons = [*(addon for domain in DOMAINS for addon in domain.addons(context)), *platform_addons(context),
              *operator_console(settings, home, kubeconfig)]  # last: it reaches the API server started before it
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(process.run_operator(KINDS, options, addons=addons))
    except KeyboardInterrupt:  # before the operator was ready (its own handler then): the runs stop too
        if options.stop_runs_on_interrupt and options.runs is not None:
            stop_runs(options.runs.state_dir, INTERRUPTED)
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        print(f"stead operator: {error.strerror}: another process (another `make run`?) listens there; "
              "choose a free port with --health-port, --webhook-port or --config-api-port", file=sys.stderr)
        return 1
    finally:
        if started is not None:
            # stdout may be a closed pipe (`make run | tee log`, then Ctrl-C): nothing written
            # may stand between the interrupt and stopping what this command started
            with contextlib.suppress(OSError):
                print("stopping the local control plane", file=sys.stderr)
            local.stop_local(started)
    return 0
