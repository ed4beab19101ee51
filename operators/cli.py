"""`stead` (also `kubectl stead`): run the operators, generate CRDs, drive the local control plane."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from operators.catalog import KINDS
from operators.runtime.kube import crds as crdgen
from operators.runtime.serving.eventloop import event_loop_factory

if TYPE_CHECKING:
    from operators.cluster import LocalControlPlane
    from operators.runtime.engine.addons import Addon

CRD_DIRS = (Path("crds"), Path("charts/stead/files/crds"))  # checked in, and the chart's copy


def main(argv: Sequence[str] | None = None) -> int:
    from operators.calm.cli import rewrite_argv

    parser = _parser()
    args = parser.parse_args(rewrite_argv(sys.argv[1:] if argv is None else argv))
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stead", description=__doc__)
    sub = parser.add_subparsers(metavar="COMMAND")

    run = sub.add_parser("run", help="run the operators in the foreground")
    run.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    run.add_argument("--local", choices=["auto", "always", "never"], default="never",
                     help="start the local control plane: when no cluster is reachable (auto), always, or never")
    run.add_argument("--store", type=Path, help="LMDB store directory (default: $STEAD_HOME/store)")
    run.add_argument("--replica", default=os.environ.get("STEAD_REPLICA", os.environ.get("HOSTNAME", "stead-0")))
    run.add_argument("--namespace", action="append", default=[], help="watch only these namespaces")
    run.add_argument("--operator-namespace", default=os.environ.get("STEAD_NAMESPACE", "stead-system"),
                     help="the operator's own namespace: vault key and ciphertexts (default $STEAD_NAMESPACE)")
    run.add_argument("--install-crds", action="store_true", help="apply the CRDs before starting")
    run.add_argument("--webhook", choices=["local", "mounted", "off"], default="local",
                     help="local: serve on loopback and register it; mounted: certificates from --webhook-cert-dir")
    run.add_argument("--webhook-listen", default="127.0.0.1")
    run.add_argument("--webhook-port", type=int, default=9443)
    run.add_argument("--webhook-cert-dir", type=Path, default=Path("/etc/stead/webhook"))
    run.add_argument("--config-api-port", type=int, default=8443, help="the configuration HTTP API's port (0: off)")
    run.add_argument("--config-api-listen", default="127.0.0.1")
    run.add_argument("--config-api-cert-dir", type=Path,
                     help="tls.crt/tls.key to serve the config API with (default: made at start-up, CA in "
                     "$STEAD_HOME/config-api/ca.crt)")
    run.add_argument("--config-api-basic-secret", metavar="NAMESPACE/NAME", type=_namespaced_name,
                     help="also accept HTTP Basic credentials (username, password) from this Secret")
    run.add_argument("--config-api-workers", type=_non_negative, default=0, metavar="N",
                     help="serve the config API from N processes of its own on its port, each with its own "
                     "watches (0, the default: from the operator's process)")
    run.add_argument("--health-listen", default="127.0.0.1")
    run.add_argument("--health-port", type=int, default=8080)
    run.add_argument("--trust-local-namespaces", nargs="*", metavar="PATTERN",
                     help="namespaces (shell patterns) whose actions may run scripts on this host (Local "
                     "substrates); default: all when Stead runs on the local control plane it starts (--local "
                     "always, or auto finding no cluster), none on any other cluster")
    run.add_argument("--script-user", default="auto", metavar="USER[:GROUP]",
                     help="the user the scripts of trusted namespaces run as on this host, so that they cannot "
                     "read the operator's keys, credentials or other runs' files: auto (the default) is "
                     "65534:65534 (nobody) when the operator runs as root, its own user otherwise; 'none' keeps "
                     "the operator's user")
    run.add_argument("--exec-in-jobs", action="store_true",
                     help="run the scripts of namespaces not trusted with --trust-local-namespaces as Jobs in "
                     "their namespace, under its service account (the runner gets a short-lived token of that "
                     "account, never the operator's credentials); default: off (those runs fail)")
    run.add_argument("--job-image", default="python:3.11-slim", help="the image of script Jobs (--exec-in-jobs)")
    run.add_argument("--job-service-account", default="default",
                     help="the service account, in each namespace, that script Jobs and the runner act as")
    run.add_argument("--pipelines-state", type=Path, help="where workflow runs keep their state "
                     "(default: next to the store)")
    run.add_argument("--http-allow-networks", nargs="*", default=[], metavar="CIDR",
                     help="networks that http tasks may reach although they are the operator's own host "
                          "(loopback, its pod addresses) or link-local; default: none")
    run.add_argument("--vault-grace-seconds", type=float, default=120.0, metavar="S",
                     help="age after which a vault entry no object refers to is removed (longer than any "
                          "admission request)")
    run.add_argument("--vault-collect-seconds", type=float, default=60.0, metavar="S",
                     help="how often unreferenced vault entries are looked for")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=_cmd_run)

    crds = sub.add_parser("crds", help="write crds/*.yaml and the chart's copies from the models (or --check them)")
    crds.add_argument("--dir", type=Path, action="append", help="write here instead (repeatable)")
    crds.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    crds.set_defaults(func=_cmd_crds)

    from operators.config.cli import add_config_commands

    add_config_commands(sub)

    from operators.calm.cli import add_app_commands

    add_app_commands(sub)

    cluster = sub.add_parser("cluster", help="the local control plane (kube-apiserver, etcd, controller-manager)")
    csub = cluster.add_subparsers(metavar="ACTION")
    for name, help_ in [("up", "start it (idempotent)"), ("down", "stop what `up` started"),
                        ("status", "show whether it runs"), ("kubeconfig", "print the kubeconfig path"),
                        ("build", "build and cache the binaries")]:
        action = csub.add_parser(name, help=help_)
        action.set_defaults(func=_cmd_cluster, action=name)
    return parser


def _namespaced_name(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _cmd_crds(args: argparse.Namespace) -> int:
    stale = []
    for directory in args.dir or CRD_DIRS:
        for kind in KINDS:
            path = directory / f"{kind.plural}.yaml"
            text = crdgen.render(kind)
            if args.check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path))
            else:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                print(f"wrote {path}")
    if stale:
        print(f"stale CRDs (run `stead crds`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    from operators.cluster import ControlPlaneError, ensure_binaries

    plane = _local_plane()
    try:
        if args.action == "build":
            ensure_binaries(progress=lambda line: print(line, file=sys.stderr))
        elif args.action == "up":
            info = plane.up()
            print(f"control plane up at {info.server}\nexport KUBECONFIG={info.kubeconfig}")
        elif args.action == "down":
            plane.down()
            print("control plane stopped")
        elif args.action == "status":
            status = plane.status()
            print(status.describe())
            return 0 if status.running else 3
        else:
            print(plane.kubeconfig_path)
    except ControlPlaneError as error:
        print(f"stead cluster {args.action}: {error}", file=sys.stderr)
        return 1
    return 0


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
    from pipelines.executors import ScriptUser

    return str(ScriptUser.parse(given))


def _cmd_run(args: argparse.Namespace) -> int:
    from operators.runtime.engine.runs import RunSettings
    from operators.runtime.process import OperatorOptions, WebhookOptions, run_operator

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    home = _home()
    kubeconfig: Path | None = args.kubeconfig
    started = None
    on_local_plane = False
    if args.local != "never":
        from operators.cluster import ControlPlaneError, reaches_cluster

        if args.local == "always" or not reaches_cluster(kubeconfig):
            plane = _local_plane()
            try:
                was_running = plane.status().running
                info = plane.up()
            except ControlPlaneError as error:
                print(f"stead run: local control plane: {error}", file=sys.stderr)
                return 1
            started = None if was_running else plane
            on_local_plane = True
            kubeconfig = info.kubeconfig
            print(f"local control plane at {info.server}; export KUBECONFIG={info.kubeconfig}", file=sys.stderr)
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(kubeconfig)  # Kopf's login reads it too
    try:
        run_scripts_as = script_user(args.script_user, os.geteuid())
    except ValueError as error:
        print(f"stead run: {error}", file=sys.stderr)
        return 2
    trusted = trusted_namespaces(args.trust_local_namespaces, on_local_plane)
    if trusted and run_scripts_as is None:
        logging.getLogger("stead").warning(
            "scripts of trusted namespaces (%s) run as the operator's own user and can read its files; run the "
            "operator as root (scripts then run as an unprivileged user) or use --exec-in-jobs", ", ".join(trusted))
    webhook = None
    if args.webhook == "local":
        webhook = WebhookOptions(listen=args.webhook_listen, port=args.webhook_port,
                                 register_url=f"https://{args.webhook_listen}:{args.webhook_port}")
    elif args.webhook == "mounted":
        webhook = WebhookOptions(listen=args.webhook_listen, port=args.webhook_port,
                                 certfile=args.webhook_cert_dir / "tls.crt", keyfile=args.webhook_cert_dir / "tls.key")
    store_path = args.store or home / "store"
    runs = dict(trusted_local_namespaces=trusted, script_user=run_scripts_as, exec_in_jobs=args.exec_in_jobs,
                job_image=args.job_image, job_service_account=args.job_service_account,
                http_allow=tuple(args.http_allow_networks))
    options = OperatorOptions(
        store_path=store_path,
        replica=args.replica,
        namespace=args.operator_namespace,
        kubeconfig=kubeconfig,
        namespaces=tuple(args.namespace),
        install_crds=args.install_crds or args.local != "never",
        webhook=webhook,
        health_listen=args.health_listen,
        health_port=args.health_port,
        runs=RunSettings(state_dir=args.pipelines_state, **runs) if args.pipelines_state
        else RunSettings.beside(store_path, **runs),
    )
    from operators.calm.vaultgc import VaultCollector

    addons: list[Addon] = [VaultCollector(grace=args.vault_grace_seconds, interval=args.vault_collect_seconds)]
    if args.config_api_port:
        from operators.config.server import ConfigApiServer

        addons.append(ConfigApiServer(
            listen=args.config_api_listen, port=args.config_api_port,
            tls_dir=args.config_api_cert_dir or home / "config-api", mounted=args.config_api_cert_dir is not None,
            basic_secret=args.config_api_basic_secret, workers=args.config_api_workers,
        ))
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(run_operator(KINDS, options, addons=addons))
    except KeyboardInterrupt:
        pass
    finally:
        if started is not None:
            print("stopping the local control plane", file=sys.stderr)
            started.down()
    return 0


def _home() -> Path:
    from operators.cluster import default_home

    return default_home()


PORT_VARIABLES = {
    "apiserver_port": "STEAD_APISERVER_PORT",
    "etcd_client_port": "STEAD_ETCD_CLIENT_PORT",
    "etcd_peer_port": "STEAD_ETCD_PEER_PORT",
    "controller_manager_port": "STEAD_CONTROLLER_MANAGER_PORT",
}


def _local_plane() -> LocalControlPlane:
    """The local control plane of `$STEAD_HOME`, on the ports `$STEAD_*_PORT` name (else the defaults),
    so that two homes can run side by side."""
    from operators.cluster import LocalControlPlane, default_home
    from operators.cluster.controlplane import (
        DEFAULT_APISERVER_PORT,
        DEFAULT_CONTROLLER_MANAGER_PORT,
        DEFAULT_ETCD_CLIENT_PORT,
        DEFAULT_ETCD_PEER_PORT,
    )

    def port(argument: str, default: int) -> int:
        value = os.environ.get(PORT_VARIABLES[argument])
        return int(value) if value else default

    return LocalControlPlane(
        default_home(),
        apiserver_port=port("apiserver_port", DEFAULT_APISERVER_PORT),
        etcd_client_port=port("etcd_client_port", DEFAULT_ETCD_CLIENT_PORT),
        etcd_peer_port=port("etcd_peer_port", DEFAULT_ETCD_PEER_PORT),
        controller_manager_port=port("controller_manager_port", DEFAULT_CONTROLLER_MANAGER_PORT),
    )
