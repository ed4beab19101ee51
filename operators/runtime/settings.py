"""The operator process's settings, one typed tree (as Kopf's `OperatorSettings`): every flag of
`stead operator` is a field here, and its flag name, help and parser are the field's metadata.

Why one tree: the flags' defaults, the process's options and the addons' settings were written apart
(`--health-port 8080` in the parser, `health_port: int = 8080` in the process's options, the vault
collector's 120 s twice), and drifted. Here each default is written once; the parser
(`add_flags`) and the settings a command line gives (`from_args`) are derived from the tree, and the
runtime's and the domains' options take their defaults from it.

Standard library only: `stead operator --help` builds its parser from this module without importing
the runtime it configures.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Flag:
    """How a setting is spelled on the command line: what `argparse.add_argument` is given, bar the default
    (the field's own)."""

    names: tuple[str, ...]
    help: str | None = None
    parser: Callable[[str], Any] | None = None
    """Turns the word given into the value (argparse's `type`), refusing bad input with the flag's name."""
    choices: Sequence[str] | None = None
    metavar: str | None = None
    action: str | None = None
    nargs: str | None = None
    dest: str | None = None
    """The attribute of the parsed namespace (default: the first long name's, as argparse makes it)."""

    @property
    def attribute(self) -> str:
        long = next((name for name in self.names if name.startswith("--")), self.names[0])
        return self.dest or long.lstrip("-").replace("-", "_")


def flag(*names: str, **given: Any) -> dict[str, Flag]:
    """The metadata of a field of the tree: its flag. The field's default (or `default_factory`, for defaults
    read from the environment when the parser is built, and lists) is the one default of both."""
    return {"flag": Flag(names, **given)}


# --- the flags' parsers: each names what it expected, for argparse's "argument --x: ..." message ----------


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def above_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def namespaced_name(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def directory(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return path.resolve()


def network(text: str) -> str:
    import ipaddress

    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a network (CIDR): {error}") from None


OPERATOR_NAMESPACE = "stead-system"
"""The operator's own namespace unless $STEAD_NAMESPACE (or `--operator-namespace`) says another."""

LAST_RESORT_REPLICA = "stead-0"
"""A replica's identity when nothing names it (no $STEAD_REPLICA, $POD_NAME or host name)."""


def default_replica_id(environ: Mapping[str, str] = os.environ) -> str:
    """`--replica-id`'s default: $STEAD_REPLICA, else $POD_NAME (the chart sets both), else the host name."""
    return (
        environ.get("STEAD_REPLICA")
        or environ.get("POD_NAME")
        or environ.get("HOSTNAME")
        or socket.gethostname()
        or LAST_RESORT_REPLICA
    )


def _node_default() -> str:
    return os.environ.get("STEAD_NODE", "auto")


def _operator_namespace_default() -> str:
    return os.environ.get("STEAD_NAMESPACE", OPERATOR_NAMESPACE)


# --- the tree ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSettings:
    """Which cluster, which objects, and who this replica is among others."""

    kubeconfig: Path | None = field(
        default=None,
        metadata=flag(
            "--kubeconfig", parser=Path, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
        ),
    )
    local: str = field(
        default="never",
        metadata=flag(
            "--local",
            choices=["auto", "always", "never"],
            help="start the local control plane: when no cluster is reachable (auto), always, or never",
        ),
    )
    node: str = field(
        default_factory=_node_default,
        metadata=flag(
            "--node",
            choices=("auto", "always", "never"),
            help="with the local control plane, a local node (containerd, kubelet, scheduler) where Pods run: where "
            "this machine allows it (auto: root, containerd installed), always (fail saying why not), or never "
            "(default: $STEAD_NODE, else auto)",
        ),
    )
    store: Path | None = field(
        default=None, metadata=flag("--store", parser=Path, help="LMDB store directory (default: $STEAD_HOME/store)")
    )
    replica: str = field(
        default_factory=default_replica_id,
        metadata=flag(
            "--replica-id",
            "--replica",
            dest="replica",
            metavar="ID",
            help="this replica's identity: its membership Lease, its user agent, its Events (default: $STEAD_REPLICA, "
            "else $POD_NAME, else the host name)",
        ),
    )
    sharding: str = field(
        default="off",
        metadata=flag(
            "--sharding",
            choices=["off", "leases"],
            help="off (the default): this replica handles every project; leases: replicas split the projects by claims "
            "(Leases in --operator-namespace), each handling only the projects it holds (docs/operations.md)",
        ),
    )
    lease_seconds: int = field(
        default=15,
        metadata=flag(
            "--lease-seconds",
            parser=positive,
            metavar="S",
            help="with --sharding leases: the membership Lease's duration; a dead replica's projects are adopted "
            "within about S + 3 seconds (default %(default)s)",
        ),
    )
    placement: str = field(
        default="ring",
        metadata=flag(
            "--placement",
            choices=["ring", "bounded"],
            help="with --sharding leases: which replica should own each assignment bucket: ring (consistent "
            "hashing, the default) or bounded (consistent hashing with bounded loads: no replica places more "
            "than (1 + --placement-epsilon) x the mean of the buckets; docs/operations.md has the figures)",
        ),
    )
    placement_epsilon: float = field(
        default=0.05,
        metadata=flag(
            "--placement-epsilon",
            parser=above_zero,
            metavar="E",
            help="with --placement bounded: the slack over the mean (default %(default)s; smaller balances "
            "tighter and moves more buckets on every change of replicas)",
        ),
    )
    namespaces: list[str] = field(
        default_factory=list,
        metadata=flag("--namespace", action="append", dest="namespace", help="watch only these namespaces"),
    )
    operator_namespace: str = field(
        default_factory=_operator_namespace_default,
        metadata=flag(
            "--operator-namespace",
            help="the operator's own namespace: vault key and ciphertexts (default $STEAD_NAMESPACE)",
        ),
    )
    install_crds: bool = field(
        default=False, metadata=flag("--install-crds", action="store_true", help="apply the CRDs before starting")
    )
    shipped_objects: bool = field(
        default=True,
        metadata=flag(
            "--no-shipped-objects",
            dest="shipped_objects",
            action="store_false",
            help="do not install or update the objects Stead ships (the built-in ClusterLifecycles)",
        ),
    )


@dataclass(frozen=True)
class WebhookSettings:
    """The admission webhook server: where it listens and who may call it."""

    mode: str = field(
        default="local",
        metadata=flag(
            "--webhook",
            choices=["local", "mounted", "off"],
            help="local: serve on loopback and register it; mounted: certificates from --webhook-cert-dir",
        ),
    )
    listen: str = field(default="127.0.0.1", metadata=flag("--webhook-listen"))
    port: int = field(default=9443, metadata=flag("--webhook-port", parser=int))
    cert_dir: Path = field(default=Path("/etc/stead/webhook"), metadata=flag("--webhook-cert-dir", parser=Path))
    client_ca: str = field(
        default="auto",
        metadata=flag(
            "--webhook-client-ca",
            metavar="auto|off|PATH",
            help="serve admission reviews only to clients with a certificate of this CA (the API server's webhook "
            "client certificate): a CA bundle file; auto (the default): the local control plane's (ConfigMap "
            "kube-system/stead-webhook-client-ca), else off with a warning; off: any client that reaches the port",
        ),
    )


@dataclass(frozen=True)
class ConfigApiSettings:
    """The configuration HTTP API (and the domains' routes it serves)."""

    port: int = field(
        default=8443, metadata=flag("--config-api-port", parser=int, help="the configuration HTTP API's port (0: off)")
    )
    listen: str = field(default="127.0.0.1", metadata=flag("--config-api-listen"))
    cert_dir: Path | None = field(
        default=None,
        metadata=flag(
            "--config-api-cert-dir",
            parser=Path,
            help="tls.crt/tls.key to serve the config API with (default: made at start-up, CA in "
            "$STEAD_HOME/config-api/ca.crt)",
        ),
    )
    basic_secret: tuple[str, str] | None = field(
        default=None,
        metadata=flag(
            "--config-api-basic-secret",
            metavar="NAMESPACE/NAME",
            parser=namespaced_name,
            help="also accept HTTP Basic credentials (username, password) from this Secret",
        ),
    )
    client_ca: str = field(
        default="auto",
        metadata=flag(
            "--config-api-client-ca",
            metavar="auto|off|PATH",
            help="accept client certificates (user = CN, groups = O; then RBAC, as for tokens) signed by: auto (the "
            "default), the cluster's client CA (ConfigMap kube-system/extension-apiserver-authentication; none when "
            "absent), a CA bundle file, or off",
        ),
    )
    workers: int = field(
        default=0,
        metadata=flag(
            "--config-api-workers",
            parser=non_negative,
            metavar="N",
            help="serve the config API from N processes of its own on its port, each with its own watches (0, the "
            "default: from the operator's process)",
        ),
    )


@dataclass(frozen=True)
class HealthSettings:
    """The health and metrics endpoints."""

    listen: str = field(default="127.0.0.1", metadata=flag("--health-listen"))
    port: int = field(default=8080, metadata=flag("--health-port", parser=int))


@dataclass(frozen=True)
class ConsoleSettings:
    """The web console, served by the operator's process beside its reconcilers (`make run`); in a cluster it
    is a Deployment of its own (`stead console`)."""

    port: int = field(
        default=0, metadata=flag("--console-port", parser=int,
                                 help="serve the web console on this port (0, the default: not here; `make run`: "
                                      "8090)"))
    listen: str = field(default="127.0.0.1", metadata=flag("--console-listen"))


@dataclass(frozen=True)
class RunnerSettings:
    """How workflow runs are started: where scripts run and as whom, what their tasks may reach."""

    trust_local_namespaces: list[str] | None = field(
        default=None,
        metadata=flag(
            "--trust-local-namespaces",
            nargs="*",
            metavar="PATTERN",
            help="namespaces (shell patterns) whose actions may run scripts on this host (Local substrates); default: "
            "all when Stead runs on the local control plane it starts (--local always, or auto finding no cluster), "
            "none on any other cluster",
        ),
    )
    script_user: str = field(
        default="auto",
        metadata=flag(
            "--script-user",
            metavar="USER[:GROUP]",
            help="the user the scripts of trusted namespaces run as on this host, so that they cannot read the "
            "operator's keys, credentials or other runs' files: auto (the default) is 65534:65534 (nobody) when the "
            "operator runs as root, its own user otherwise; 'none' keeps the operator's user",
        ),
    )
    script_uid_range: str = field(
        default="auto",
        metadata=flag(
            "--script-uid-range",
            metavar="FIRST-LAST",
            help="run the scripts of each trusted namespace as a uid of its own from this range (a stable hash of the "
            "namespace), so that one namespace's scripts cannot read another's processes or files: auto (the "
            "default) is 1073741824-2147483646 when the operator runs as root and --script-user is auto, off "
            "otherwise; 'none' runs all as --script-user",
        ),
    )
    exec_in_jobs: bool = field(
        default=False,
        metadata=flag(
            "--exec-in-jobs",
            action="store_true",
            help="run the scripts of namespaces not trusted with --trust-local-namespaces as Jobs in their namespace, "
            "under its service account (the runner gets a short-lived token of that account, never the operator's "
            "credentials); default: off (those runs fail)",
        ),
    )
    job_image: str = field(
        default="python:3.11-slim", metadata=flag("--job-image", help="the image of script Jobs (--exec-in-jobs)")
    )
    job_service_account: str = field(
        default="default",
        metadata=flag(
            "--job-service-account",
            help="the service account, in each namespace, that script Jobs and the runner act as",
        ),
    )
    pipelines_state: Path | None = field(
        default=None,
        metadata=flag(
            "--pipelines-state", parser=Path, help="where workflow runs keep their state (default: next to the store)"
        ),
    )
    http_allow_networks: list[str] = field(
        default_factory=list,
        metadata=flag(
            "--http-allow-networks",
            nargs="*",
            metavar="CIDR",
            parser=network,
            help="networks that http tasks may reach although they are not public (private, loopback, link-local, "
            "the operator's own addresses); default: none",
        ),
    )
    service_cidr: list[str] = field(
        default_factory=list,
        metadata=flag(
            "--service-cidr",
            action="append",
            metavar="CIDR",
            parser=network,
            help="the cluster's Service network, which http and ssh tasks never reach even inside an allowed network; "
            "repeatable; default: read from the cluster's ServiceCIDR objects",
        ),
    )
    ssh_allow: list[str] = field(
        default_factory=list,
        metadata=flag(
            "--ssh-allow",
            action="append",
            metavar="CIDR",
            parser=network,
            help="a network that ssh tasks (Calm's Existing substrates, deployment graphs' nodes) may reach although "
            "it is not public (private, loopback, link-local, the operator's own addresses); repeatable; default: "
            "none, but on the local control plane Stead starts, its demo SSH node's address (`stead cluster "
            "demo-node`)",
        ),
    )
    ssh_files_root: Path | None = field(
        default=None,
        metadata=flag(
            "--ssh-files-root",
            parser=directory,
            metavar="DIR",
            help="the only directory whose files ssh.copy_files and ssh.sync tasks may send to nodes (default: none, "
            "those tasks fail)",
        ),
    )
    ssh_reboot_command: str | None = field(
        default=None,
        metadata=flag(
            "--ssh-reboot-command",
            metavar="CMD",
            help="what ssh.reboot tasks run on the node (default: the runner's, shutdown -r now)",
        ),
    )


@dataclass(frozen=True)
class VaultSettings:
    """The collection of vault entries no object refers to any more."""

    grace_seconds: float = field(
        default=120.0,
        metadata=flag(
            "--vault-grace-seconds",
            parser=float,
            metavar="S",
            help="age after which a vault entry no object refers to is removed (longer than any admission request)",
        ),
    )
    collect_seconds: float = field(
        default=60.0,
        metadata=flag(
            "--vault-collect-seconds",
            parser=float,
            metavar="S",
            help="how often unreferenced vault entries are looked for",
        ),
    )


@dataclass(frozen=True)
class SlotsSettings:
    """How many workflow runs go at once."""

    max_concurrent_runs: int = field(
        default=0,
        metadata=flag(
            "--max-concurrent-runs",
            parser=non_negative,
            metavar="N",
            help="workflow runs at once (each a process of ~50 MiB); the others are queued, shown as Queued, and let "
            "in fairly across namespaces (default 0: half of the memory the operator may use at 64 MiB a run, "
            "between 2 and 64)",
        ),
    )


@dataclass(frozen=True)
class LogSettings:
    verbose: bool = field(default=False, metadata=flag("-v", "--verbose", action="store_true"))


@dataclass(frozen=True)
class OperatorSettings:
    """Every setting of `stead operator`, by part (the order of the sections is that of `--help`)."""

    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    webhook: WebhookSettings = field(default_factory=WebhookSettings)
    config_api: ConfigApiSettings = field(default_factory=ConfigApiSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    runs: RunnerSettings = field(default_factory=RunnerSettings)
    vault: VaultSettings = field(default_factory=VaultSettings)
    slots: SlotsSettings = field(default_factory=SlotsSettings)
    log: LogSettings = field(default_factory=LogSettings)


def _sections() -> Iterator[tuple[str, type[Any]]]:
    for section in dataclasses.fields(OperatorSettings):
        yield section.name, section.default_factory  # type: ignore[misc]


def flag_of(section: type[Any], name: str) -> tuple[Flag, dataclasses.Field[Any]]:
    """The flag of one setting and its field (for a command that takes one of the operator's flags too)."""
    found = next(f for f in dataclasses.fields(section) if f.name == name)
    return found.metadata["flag"], found


def add_flag(parser: argparse.ArgumentParser, section: type[Any], name: str) -> None:
    """Add the flag of `section`'s setting `name` to `parser`, its default evaluated now."""
    flag, found = flag_of(section, name)
    default = found.default_factory() if found.default_factory is not dataclasses.MISSING else found.default
    given: dict[str, Any] = {
        "help": flag.help,
        "type": flag.parser,
        "choices": flag.choices,
        "metavar": flag.metavar,
        "action": flag.action,
        "nargs": flag.nargs,
        "dest": flag.dest,
    }
    parser.add_argument(
        *flag.names, default=default, **{key: value for key, value in given.items() if value is not None}
    )


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of the tree, in its order."""
    for _, section in _sections():
        for setting_field in dataclasses.fields(section):
            add_flag(parser, section, setting_field.name)


def from_args(args: argparse.Namespace) -> OperatorSettings:
    """The settings of a command line parsed by a parser `add_flags` made."""
    parts = {
        name: section(**{f.name: getattr(args, f.metadata["flag"].attribute) for f in dataclasses.fields(section)})
        for name, section in _sections()
    }
    return OperatorSettings(**parts)
