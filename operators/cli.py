"""`stead` (also `kubectl stead`): run the operators, generate CRDs, drive the local control plane."""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators.cluster.ports import PORT_SETTINGS, Ports, choose_ports, parse_port, remembered_ports

if TYPE_CHECKING:
    from operators.cluster import LocalControlPlane, LocalNode, NodeNetwork
    from operators.cluster.sshd import DemoNodeInfo
    from operators.runtime.engine.addons import Addon
    from operators.runtime.engine.runs import SshOptions

CRD_DIRS = (Path("crds"), Path("charts/stead/files/crds"))  # checked in, and the chart's copy
POLICIES_DIR = Path("charts/stead/files/policies")  # the shard-label ValidatingAdmissionPolicy, for the chart
OBJECTS_DIR = Path("charts/stead/files/objects")  # the objects Stead ships (built-in ClusterLifecycles), for the chart

SCHEME = """\
Commands are the kinds' names as kubectl knows them, followed by an action, and take the
kinds' short names too: `stead actionrun logs R` is `stead ar logs R` or `stead run logs R`,
as `kubectl get actionrun R` is `kubectl get ar R`. `stead run` followed by operator flags is the
older spelling of `stead operator`. `stead COMMAND -h` shows a command's
actions and flags.
"""


EPIPE_EXIT = 141
"""The exit code of a command whose reader went away (`stead service get X | head -1`): what a shell reports
for a tool that SIGPIPE ended (128 + 13), quietly, as such tools end."""


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given == ["run"]:  # once an operator with every default: now too easily typed for `stead run logs R`
        print("stead run: the operator is `stead operator` (`stead run` with its flags still works); "
              "`stead run logs|abort R` follows or aborts an ActionRun", file=sys.stderr)
        return 2
    words = canonical_argv(given)
    parser = _parser(words)
    args = parser.parse_args(words)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is seen below rather than at the interpreter's exit
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        quiet_stdout()
        return EPIPE_EXIT
    return code


def quiet_stdout() -> None:
    """The reader of stdout has gone: what is still buffered goes nowhere, so that the interpreter's last
    flush does not print 'Exception ignored ... BrokenPipeError' (Python's documented way, see `signal`)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# --- the command nouns ------------------------------------------------------------------------------
# Only the parser of the noun on the command line is built, so only its module is imported: `stead
# --help`, `stead cluster kubeconfig` or `stead actionrun logs` never import the catalog of kinds, their
# models, Kopf or the Kubernetes client unless the command itself needs them.


@dataclass(frozen=True)
class Noun:
    """A command of `stead` (a noun, followed by its action)."""

    name: str
    help: str
    add: Callable[[Any, Noun], None]
    """Adds the noun's parser, with its actions and flags, to the subparsers (importing what it needs)."""
    kind_module: str | None = None
    """The module whose `KIND` this noun is about: its short names are the noun's aliases."""
    older: tuple[str, ...] = ()
    """Earlier spellings, still accepted."""

    def aliases(self) -> tuple[str, ...]:
        short = kind_short_names(self.kind_module) if self.kind_module else ()
        return tuple(dict.fromkeys(a for a in (*short, *self.older) if a != self.name))


def _noun_parser(sub: Any, noun: Noun) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(noun.name, help=noun.help, description=noun.help)
    return parser


def _add_operator(sub: Any, noun: Noun) -> None:
    _operator_arguments(_noun_parser(sub, noun))


def _add_app(sub: Any, noun: Noun) -> None:
    from operators.calm.cli import add_app_actions

    add_app_actions(_noun_parser(sub, noun))


def _add_actionrun(sub: Any, noun: Noun) -> None:
    from operators.calm.cli import add_actionrun_actions

    add_actionrun_actions(_noun_parser(sub, noun))


def _add_blueprint(sub: Any, noun: Noun) -> None:
    from operators.calm.cli import add_blueprint_actions

    add_blueprint_actions(_noun_parser(sub, noun))


def _add_service(sub: Any, noun: Noun) -> None:
    from operators.lsm.cli import add_service_actions

    add_service_actions(_noun_parser(sub, noun))


def _add_graph(sub: Any, noun: Noun) -> None:
    from operators.graphs.cli import add_graph_actions

    add_graph_actions(_noun_parser(sub, noun))


def _add_config(sub: Any, noun: Noun) -> None:
    from operators.config.cli import add_config_commands

    add_config_commands(sub)


def _add_cluster(sub: Any, noun: Noun) -> None:
    _cluster_actions(_noun_parser(sub, noun))


def _add_crds(sub: Any, noun: Noun) -> None:
    crds = _noun_parser(sub, noun)
    crds.add_argument("--dir", type=Path, action="append", help="write here instead (repeatable)")
    crds.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    crds.set_defaults(func=_cmd_crds)


NOUNS: tuple[Noun, ...] = (
    Noun("operator", "run the operators in the foreground", _add_operator, older=("run",)),
    Noun("app", "Apps: launch one from a blueprint, run an action", _add_app, kind_module="operators.calm.app"),
    Noun("actionrun", "ActionRuns: logs (follow one), abort", _add_actionrun,
         kind_module="operators.calm.actionrun", older=("runs",)),
    Noun("blueprint", "Blueprints: deps (their dependencies, one per line)", _add_blueprint,
         kind_module="operators.calm.blueprint"),
    Noun("service", "service instances: catalog, list, create, get, update, set-state, delete, log", _add_service),
    Noun("graph", "deployment graphs: upload, download, list, delete, execute (a GraphRun), plan, status, logs, "
         "history", _add_graph),
    Noun("config", "read and change configuration values (the configuration API)", _add_config),
    Noun("cluster", "the local control plane (kube-apiserver, etcd, controller-manager)", _add_cluster),
    Noun("crds", "write crds/*.yaml and the chart's copies from the models (or --check them)", _add_crds),
)


def kind_short_names(module: str) -> tuple[str, ...]:
    """The short names of the kind `module` declares (`KIND = Kind(..., short_names=(...))`, closed by a `)`
    at the start of a line): the CLI's aliases of that kind's noun, so that they have one source. Read from
    that statement of the module's source, because importing the module (its models, the compiler, the
    Kubernetes client: ~0.7 s), or even parsing all of it (~15 ms each), is what `stead --help` must not pay;
    imported after all when the source does not spell them so."""
    import ast
    import importlib
    import importlib.util
    import re

    spec = importlib.util.find_spec(module)
    source = Path(spec.origin).read_text() if spec is not None and spec.origin and spec.origin.endswith(".py") else ""
    statement = re.search(r"^KIND = Kind\(.*?^\)$", source, re.DOTALL | re.MULTILINE)
    try:
        node = ast.parse(statement.group(0)).body[0] if statement else None
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for keyword in node.value.keywords:
                if keyword.arg == "short_names":
                    return tuple(str(name) for name in ast.literal_eval(keyword.value))
    except (SyntaxError, ValueError):
        pass
    return tuple(importlib.import_module(module).KIND.short_names)


def _noun_index(words: Sequence[str]) -> int | None:
    """Where the noun is: the first word that is not an option (`stead` itself takes only -h)."""
    return next((i for i, word in enumerate(words) if not word.startswith("-")), None)


def canonical_argv(argv: Sequence[str]) -> list[str]:
    """The command line with its noun spelled canonically: a kind's short name or an older spelling
    becomes the noun (`ar`, `run`, `runs` -> `actionrun`, `bp` -> `blueprint`). `run` is both the
    ActionRun's short name and the operator's older spelling: `stead run logs|abort ...` is about
    ActionRuns, `stead run` with anything else (operator flags) starts the operator (`main` refuses a bare
`stead run`)."""
    words = list(argv)
    i = _noun_index(words)
    if i is None or words[i] in {noun.name for noun in NOUNS}:
        return words
    if words[i] == "run":
        from operators.calm.cli import ACTIONRUN_ACTIONS

        words[i] = "actionrun" if words[i + 1:i + 2] and words[i + 1] in ACTIONRUN_ACTIONS else "operator"
        return words
    for noun in NOUNS:
        if words[i] in noun.aliases():
            words[i] = noun.name
            break
    return words


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of `argv` (canonical): the noun it names is built whole, the others as names only.
    Without a noun, `stead --help` lists every noun with its aliases."""
    i = _noun_index(argv)
    named = argv[i] if i is not None else None
    listing = named not in {noun.name for noun in NOUNS}
    parser = argparse.ArgumentParser(prog="stead", usage="%(prog)s [-h] [--version] COMMAND [ACTION] [ARGS ...]",
                                     description=__doc__, epilog=SCHEME if listing else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version of Stead and exit")
    sub = parser.add_subparsers(prog="stead", metavar="COMMAND", help=argparse.SUPPRESS, title="commands",
                                description=commands_table() if listing else None)
    for noun in NOUNS:
        if noun.name == named:
            noun.add(sub, noun)
        else:
            sub.add_parser(noun.name, help=argparse.SUPPRESS)
    return parser


class _Version(argparse.Action):
    """`stead --version`: the installed distribution's version (looked up only when asked)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"stead {version('stead')}")
        except PackageNotFoundError:
            print("stead (not installed: run from a source tree)")
        parser.exit()


def commands_table() -> str:
    """The nouns of `stead --help`, each with its aliases (`stead COMMAND -h` shows its actions)."""
    names = [", ".join((noun.name, *noun.aliases())) for noun in NOUNS]
    width = max(len(name) for name in names) + 2
    rows = [f"{name:<{width}}{noun.help}" for name, noun in zip(names, NOUNS, strict=True)]
    return "\n".join(rows)


def _cluster_actions(cluster: argparse.ArgumentParser) -> None:
    csub = cluster.add_subparsers(metavar="ACTION")
    for name, help_ in [("up", "start it (idempotent)"), ("down", "stop what `up` started"),
                        ("status", "show whether it runs, where, and on which ports"),
                        ("kubeconfig", "print the path of its admin kubeconfig"),
                        ("kubectl", "print the path of the cached kubectl of the pinned Kubernetes version"),
                        ("helm", "print the path of the cached helm of the pinned version"),
                        ("build", "build and cache the binaries"),
                        ("load-image", "copy an image from buildah's storage (`make image`) into the node"),
                        ("demo-node", "print a Secret and an Environment that reach the plane's demo SSH node, "
                         "for `kubectl apply -f -` (it holds the node's private key)")]:
        action = csub.add_parser(name, help=help_, description=help_)
        action.set_defaults(func=_cmd_cluster, action=name)
        if name == "up":
            for setting in PORT_SETTINGS:
                action.add_argument(setting.flag, type=_port, dest=setting.argument, metavar="N",
                                    help=f"the {setting.label} port (default: ${setting.variable}, else the port "
                                    f"this home used last, else {setting.default})")
            _node_argument(action)
        if name == "demo-node":
            action.add_argument("-n", "--namespace", default="default",
                                help="the namespace of the Secret and the Environment (default: default)")
            action.add_argument("--name", default="demo-node", type=_object_name,
                                help="the name of the Secret, the Environment and its node (default: demo-node)")
            action.add_argument("--release", default="demo",
                                help="the Environment's release: its graphs are the release's (default: demo)")
            action.add_argument("--role", action="append", dest="roles", metavar="ROLE",
                                help="a role of the node, repeatable (default: controller and compute)")
        if name == "load-image":
            action.add_argument("image", help="an image reference in buildah's storage, e.g. localhost/stead:dev")


def _node_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", choices=("auto", "always", "never"), default=os.environ.get("STEAD_NODE", "auto"),
                        help="with the local control plane, a local node (containerd, kubelet, scheduler) where Pods "
                        "run: where this machine allows it (auto: root, containerd installed), always (fail saying "
                        "why not), or never (default: $STEAD_NODE, else auto)")


def _operator_arguments(run: argparse.ArgumentParser) -> None:
    """The operator's flags (`stead operator`, and `stead run` as it was spelled first)."""
    run.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    run.add_argument("--local", choices=["auto", "always", "never"], default="never",
                     help="start the local control plane: when no cluster is reachable (auto), always, or never")
    _node_argument(run)
    run.add_argument("--store", type=Path, help="LMDB store directory (default: $STEAD_HOME/store)")
    run.add_argument("--replica-id", "--replica", dest="replica", metavar="ID", default=default_replica_id(),
                     help="this replica's identity: its membership Lease, its user agent, its Events (default: "
                     "$STEAD_REPLICA, else $POD_NAME, else the host name)")
    run.add_argument("--sharding", choices=["off", "leases"], default="off",
                     help="off (the default): this replica handles every project; leases: replicas split the "
                     "projects by claims (Leases in --operator-namespace), each handling only the projects it "
                     "holds (docs/operations.md)")
    run.add_argument("--lease-seconds", type=_positive, default=15, metavar="S",
                     help="with --sharding leases: the membership Lease's duration; a dead replica's projects "
                     "are adopted within about S + 3 seconds (default 15)")
    run.add_argument("--namespace", action="append", default=[], help="watch only these namespaces")
    run.add_argument("--operator-namespace", default=os.environ.get("STEAD_NAMESPACE", "stead-system"),
                     help="the operator's own namespace: vault key and ciphertexts (default $STEAD_NAMESPACE)")
    run.add_argument("--install-crds", action="store_true", help="apply the CRDs before starting")
    run.add_argument("--no-shipped-objects", dest="shipped_objects", action="store_false",
                     help="do not install or update the objects Stead ships (the built-in ClusterLifecycles)")
    run.add_argument("--webhook", choices=["local", "mounted", "off"], default="local",
                     help="local: serve on loopback and register it; mounted: certificates from --webhook-cert-dir")
    run.add_argument("--webhook-listen", default="127.0.0.1")
    run.add_argument("--webhook-port", type=int, default=9443)
    run.add_argument("--webhook-cert-dir", type=Path, default=Path("/etc/stead/webhook"))
    run.add_argument("--webhook-client-ca", default="auto", metavar="auto|off|PATH",
                     help="serve admission reviews only to clients with a certificate of this CA (the API "
                     "server's webhook client certificate): a CA bundle file; auto (the default): the local "
                     "control plane's (ConfigMap kube-system/stead-webhook-client-ca), else off with a warning; "
                     "off: any client that reaches the port")
    run.add_argument("--config-api-port", type=int, default=8443, help="the configuration HTTP API's port (0: off)")
    run.add_argument("--config-api-listen", default="127.0.0.1")
    run.add_argument("--config-api-cert-dir", type=Path,
                     help="tls.crt/tls.key to serve the config API with (default: made at start-up, CA in "
                     "$STEAD_HOME/config-api/ca.crt)")
    run.add_argument("--config-api-basic-secret", metavar="NAMESPACE/NAME", type=_namespaced_name,
                     help="also accept HTTP Basic credentials (username, password) from this Secret")
    run.add_argument("--config-api-client-ca", default="auto", metavar="auto|off|PATH",
                     help="accept client certificates (user = CN, groups = O; then RBAC, as for tokens) signed by: "
                     "auto (the default), the cluster's client CA (ConfigMap "
                     "kube-system/extension-apiserver-authentication; none when absent), a CA bundle file, or off")
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
    run.add_argument("--script-uid-range", default="auto", metavar="FIRST-LAST",
                     help="run the scripts of each trusted namespace as a uid of its own from this range (a "
                     "stable hash of the namespace), so that one namespace's scripts cannot read another's "
                     "processes or files: auto (the default) is 1073741824-2147483646 when the operator runs as "
                     "root and --script-user is auto, off otherwise; 'none' runs all as --script-user")
    run.add_argument("--exec-in-jobs", action="store_true",
                     help="run the scripts of namespaces not trusted with --trust-local-namespaces as Jobs in "
                     "their namespace, under its service account (the runner gets a short-lived token of that "
                     "account, never the operator's credentials); default: off (those runs fail)")
    run.add_argument("--job-image", default="python:3.11-slim", help="the image of script Jobs (--exec-in-jobs)")
    run.add_argument("--job-service-account", default="default",
                     help="the service account, in each namespace, that script Jobs and the runner act as")
    run.add_argument("--pipelines-state", type=Path, help="where workflow runs keep their state "
                     "(default: next to the store)")
    run.add_argument("--http-allow-networks", nargs="*", default=[], metavar="CIDR", type=_network,
                     help="networks that http tasks may reach although they are not public (private, "
                          "loopback, link-local, the operator's own addresses); default: none")
    run.add_argument("--service-cidr", action="append", default=[], metavar="CIDR", type=_network,
                     help="the cluster's Service network, which http and ssh tasks never reach even inside an "
                     "allowed network; repeatable; default: read from the cluster's ServiceCIDR objects")
    run.add_argument("--ssh-allow", action="append", default=[], metavar="CIDR", type=_network,
                     help="a network that ssh tasks (Calm's Existing substrates, deployment graphs' nodes) may "
                     "reach although it is not public (private, loopback, link-local, the operator's own "
                     "addresses); repeatable; default: none, but on the local control plane Stead starts, its "
                     "demo SSH node's address (`stead cluster demo-node`)")
    run.add_argument("--ssh-files-root", type=_directory, metavar="DIR",
                     help="the only directory whose files ssh.copy_files and ssh.sync tasks may send to nodes "
                     "(default: none, those tasks fail)")
    run.add_argument("--ssh-reboot-command", metavar="CMD",
                     help="what ssh.reboot tasks run on the node (default: the runner's, shutdown -r now)")
    run.add_argument("--vault-grace-seconds", type=float, default=120.0, metavar="S",
                     help="age after which a vault entry no object refers to is removed (longer than any "
                          "admission request)")
    run.add_argument("--vault-collect-seconds", type=float, default=60.0, metavar="S",
                     help="how often unreferenced vault entries are looked for")
    run.add_argument("--max-concurrent-runs", type=_non_negative, default=0, metavar="N",
                     help="workflow runs at once (each a process of ~50 MiB); the others are queued, shown as "
                     "Queued, and let in fairly across namespaces (default 0: half of the memory the operator "
                     "may use at 64 MiB a run, between 2 and 64)")
    run.add_argument("-v", "--verbose", action="store_true")
    run.set_defaults(func=_cmd_run)


def _object_name(text: str) -> str:
    import re

    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes name (lower-case letters, digits and '-', "
                                         "at most 63)")
    return text


def _namespaced_name(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _directory(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return path.resolve()


def _network(text: str) -> str:
    import ipaddress

    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a network (CIDR): {error}") from None


def default_replica_id(environ: Mapping[str, str] = os.environ) -> str:
    """`--replica-id`'s default: $STEAD_REPLICA, else $POD_NAME (the chart sets both), else the host name."""
    import socket

    return (environ.get("STEAD_REPLICA") or environ.get("POD_NAME") or environ.get("HOSTNAME")
            or socket.gethostname() or "stead-0")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _cmd_crds(args: argparse.Namespace) -> int:
    from operators.catalog import KINDS
    from operators.runtime.kube import crds as crdgen
    from operators.runtime.shard.policy import shard_label_policy

    stale = []
    files = [(directory / f"{kind.plural}.yaml", crdgen.render(kind)) for directory in args.dir or CRD_DIRS
             for kind in KINDS]
    if not args.dir:
        files += [(OBJECTS_DIR / f"{kind.plural}-{obj['metadata']['name']}.yaml", crdgen.render_object(obj))
                  for kind in KINDS for obj in crdgen.shipped_objects(kind)]
        files += [(POLICIES_DIR / "shard-labels.yaml", crdgen.render_object(shard_label_policy()[0]))]
    for path, text in files:
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale CRDs or shipped objects (run `stead crds`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    if args.action == "kubeconfig":  # paths: nothing else to import or read (`$(stead cluster ...)` is instant)
        from operators.cluster.home import default_home, kubeconfig_path

        print(kubeconfig_path(default_home()))
        return 0
    if args.action in ("kubectl", "helm"):
        from operators.cluster.build import HELM, KUBERNETES, component_dir

        tool = component_dir(KUBERNETES if args.action == "kubectl" else HELM) / args.action
        if not os.access(tool, os.X_OK):
            version = (KUBERNETES if args.action == "kubectl" else HELM).version
            print(f"stead cluster {args.action}: {args.action} {version} is not built yet; `stead cluster build` "
                  "builds it (once)", file=sys.stderr)
            return 1
        print(tool)
        return 0
    from operators.cluster import ControlPlaneError, LocalNode, PortInUse, ensure_binaries

    try:
        if args.action == "build":
            from operators.cluster.build import ensure_node_binaries
            from operators.cluster.images import pause_archive

            ensure_binaries(progress=_say)
            ensure_node_binaries(progress=_say)
            pause_archive(progress=_say)
        elif args.action == "up":
            plane = _local_plane({s.argument: getattr(args, s.argument) for s in PORT_SETTINGS})
            info = plane.up()
            print(f"control plane up at {info.server}\nexport KUBECONFIG={info.kubeconfig}")
            node = _start_node(plane, args.node)
            if node is not None:
                print(f"node {node.name} Ready ({node.network.node_ip} on bridge {node.network.bridge})")
            _start_demo_node(plane)
        elif args.action == "down":
            _stop_local(_local_plane())
            print("control plane stopped")
        elif args.action == "demo-node":
            from operators.cluster.sshd import DemoNode

            try:
                sys.stdout.write(DemoNode(_home()).manifest(
                    args.namespace, args.name, args.release, args.roles or ["controller", "compute"]))
            except RuntimeError as error:
                print(f"stead cluster demo-node: {error}", file=sys.stderr)
                return 1
        elif args.action == "load-image":
            LocalNode(_local_plane()).load_image(args.image)
            print(f"{args.image} loaded into the local node")
        else:
            plane = _local_plane()
            status = plane.status()
            from operators.cluster.sshd import DemoNode

            print(status.describe(extra=[*LocalNode(plane).status().rows(), DemoNode(plane.home).status_row()]))
            return 0 if status.running else 3
    except PortInUse as error:
        setting = next(s for s in PORT_SETTINGS if s.field == error.field)
        print(f"stead cluster {args.action}: {error}: {setting.flag} N (or ${setting.variable})", file=sys.stderr)
        return 1
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


def script_uids(given: str, user: str, euid: int) -> tuple[int, int] | None:
    """The range of per-namespace script uids (None: every namespace's scripts run as --script-user)."""
    from operators.runtime.engine.runs import DEFAULT_SCRIPT_UIDS, parse_uid_range

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
    from operators.cluster.sshd import demo_allow_network

    return tuple(dict.fromkeys([*explicit, *demo_allow_network(demo_node)]))


def ssh_options(args: argparse.Namespace, demo_node: str | None = None) -> SshOptions:
    """The runners' ssh settings from `stead operator`'s --ssh-* flags (and the local plane's demo node)."""
    from operators.runtime.engine.runs import SshOptions

    return SshOptions(allow=ssh_allow(args.ssh_allow, demo_node), files_root=args.ssh_files_root,
                      reboot_command=args.ssh_reboot_command or None)


def _cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    from operators.catalog import API_EXTENSIONS, KINDS
    from operators.runtime.engine.runs import RunSettings
    from operators.runtime.process import OperatorOptions, WebhookOptions, run_operator
    from operators.runtime.serving.eventloop import event_loop_factory

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
    demo_node: str | None = None
    if args.local != "never":
        from operators.cluster import ControlPlaneError, reaches_cluster

        if args.local == "always" or not reaches_cluster(kubeconfig):
            try:
                plane = _local_plane()
                was_running = plane.status().running
                info = plane.up()
            except ControlPlaneError as error:
                print(f"stead run: local control plane: {error}", file=sys.stderr)
                return 1
            try:
                _start_node(plane, args.node)
            except ControlPlaneError as error:
                print(f"stead run: local node: {error}", file=sys.stderr)
                if not was_running:
                    _stop_local(plane)
                return 1
            demo = _start_demo_node(plane)
            demo_node = demo.address if demo is not None else None
            started = None if was_running else plane
            on_local_plane = True
            kubeconfig = info.kubeconfig
            print(f"local control plane at {info.server}; export KUBECONFIG={info.kubeconfig}", file=sys.stderr)
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(kubeconfig)  # Kopf's login reads it too
    try:
        run_scripts_as = script_user(args.script_user, os.geteuid())
        uid_range = script_uids(args.script_uid_range, args.script_user, os.geteuid())
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
                                 register_url=f"https://{args.webhook_listen}:{args.webhook_port}",
                                 client_ca=args.webhook_client_ca)
    elif args.webhook == "mounted":
        webhook = WebhookOptions(listen=args.webhook_listen, port=args.webhook_port,
                                 certfile=args.webhook_cert_dir / "tls.crt", keyfile=args.webhook_cert_dir / "tls.key",
                                 client_ca=args.webhook_client_ca)
    store_path = args.store or home / "store"
    runs = dict(trusted_local_namespaces=trusted, script_user=run_scripts_as, script_uids=uid_range,
                exec_in_jobs=args.exec_in_jobs,
                job_image=args.job_image, job_service_account=args.job_service_account,
                http_allow=tuple(args.http_allow_networks), service_cidrs=tuple(args.service_cidr),
                max_concurrent=args.max_concurrent_runs,
                ssh=ssh_options(args, demo_node))
    options = OperatorOptions(
        store_path=store_path,
        replica=args.replica,
        sharding=args.sharding,
        lease_seconds=args.lease_seconds,
        namespace=args.operator_namespace,
        kubeconfig=kubeconfig,
        namespaces=tuple(args.namespace),
        install_crds=args.install_crds or args.local != "never",
        shipped_objects=args.shipped_objects,
        webhook=webhook,
        health_listen=args.health_listen,
        health_port=args.health_port,
        runs=RunSettings(state_dir=args.pipelines_state, **runs) if args.pipelines_state
        else RunSettings.beside(store_path, **runs),
        stop_runs_on_interrupt=on_local_plane,  # `make run`, Ctrl-C: "stops everything", runs included
    )
    from operators.calm.vaultgc import VaultCollector
    from operators.graphs.autorunner import AutoRunner

    addons: list[Addon] = [VaultCollector(grace=args.vault_grace_seconds, interval=args.vault_collect_seconds),
                           AutoRunner()]
    if args.config_api_port:
        from operators.runtime.api.server import ApiServer

        addons.append(ApiServer(
            listen=args.config_api_listen, port=args.config_api_port,
            tls_dir=args.config_api_cert_dir or home / "config-api", mounted=args.config_api_cert_dir is not None,
            basic_secret=args.config_api_basic_secret, workers=args.config_api_workers,
            client_ca=args.config_api_client_ca,
            extensions=API_EXTENSIONS,
            runs_state_dir=options.runs.state_dir if options.runs is not None else None,
        ))
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(run_operator(KINDS, options, addons=addons))
    except KeyboardInterrupt:  # before the operator was ready (its own handler then): the runs stop too
        if options.stop_runs_on_interrupt and options.runs is not None:
            from operators.runtime.engine.runs import INTERRUPTED, stop_runs

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
            _stop_local(started)
    return 0


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _start_node(plane: LocalControlPlane, policy: str) -> LocalNode | None:
    """The local node of `plane` as `--node` asks: started (or found running) where the machine allows it;
    otherwise, with `auto`, None after saying why not (Pods then stay Pending)."""
    from operators.cluster import LocalNode
    from operators.cluster.node import node_unavailable_reason

    if policy == "never":
        return None
    reason = node_unavailable_reason()
    if reason is not None and policy == "auto":
        _say(f"no local node: {reason}")
        return None
    node = LocalNode(plane, network=_node_network(), progress=_say)
    node.up()
    return node


def _start_demo_node(plane: LocalControlPlane) -> DemoNodeInfo | None:
    """The plane's demo SSH node (operators/cluster/sshd.py), started or found running; None after saying
    why not (no sshd here): the plane runs without it."""
    from operators.cluster.sshd import DemoNode

    try:
        info = DemoNode(plane.home).up()
    except RuntimeError as error:
        _say(f"no demo SSH node: {error}")
        return None
    _say(f"demo SSH node at {info.address}:{info.port} (user {info.user}): `stead cluster demo-node -n NAMESPACE "
         "| kubectl apply -f -` gives a namespace its Secret and Environment")
    return info


def _stop_local(plane: LocalControlPlane) -> None:
    """The demo node, the local node (if one ran) and then the plane of their home."""
    from operators.cluster import LocalNode
    from operators.cluster.sshd import DemoNode

    DemoNode(plane.home).down()
    LocalNode(plane).down()
    plane.down()


def _home() -> Path:
    from operators.cluster import default_home

    return default_home()


PORT_VARIABLES = {setting.argument: setting.variable for setting in PORT_SETTINGS}
"""`LocalControlPlane`'s port keywords and the variables that set them."""


def _port(text: str) -> int:
    try:
        return parse_port(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def local_plane_ports(given: Mapping[str, int | None], environ: Mapping[str, str], home: Path) -> Ports:
    """The ports of the plane of `home`: each from `given` (the flags of `stead cluster up`, by `LocalControlPlane`
    keyword), else `$STEAD_*_PORT`, else the ports that home's plane last started on, else the defaults; so that
    two homes run side by side, and each finds its own plane again."""
    return choose_ports({s.field: given.get(s.argument) for s in PORT_SETTINGS}, environ, remembered_ports(home))


def _node_network() -> NodeNetwork:
    """The network of a new node: ``$STEAD_NODE_BRIDGE`` and ``$STEAD_NODE_SUBNET``, else the defaults
    (a node started before keeps the network it recorded)."""
    from operators.cluster import NodeNetwork

    default = NodeNetwork()
    return NodeNetwork(bridge=os.environ.get("STEAD_NODE_BRIDGE") or default.bridge,
                       subnet=os.environ.get("STEAD_NODE_SUBNET") or default.subnet)


def _local_plane(given: Mapping[str, int | None] | None = None) -> LocalControlPlane:
    """The local control plane of `$STEAD_HOME`, on the ports `local_plane_ports` chooses."""
    from operators.cluster import ControlPlaneError, LocalControlPlane, default_home

    home = default_home()
    try:
        ports = local_plane_ports(given or {}, os.environ, home)
        return LocalControlPlane(home, apiserver_port=ports.apiserver, etcd_client_port=ports.etcd_client,
                                 etcd_peer_port=ports.etcd_peer, controller_manager_port=ports.controller_manager)
    except ValueError as error:  # a variable that is no port, or two equal ports
        raise ControlPlaneError(str(error)) from None
