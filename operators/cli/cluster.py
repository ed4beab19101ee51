"""`stead cluster`: the local control plane (kube-apiserver, etcd, controller-manager), its node and its demo
SSH node; and what `stead operator --local` uses of them to start the plane it runs on."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from operators.cluster.ports import PORT_SETTINGS, Ports, choose_ports, parse_port, remembered_ports
from operators.runtime.settings import ClusterSettings, add_flag

if TYPE_CHECKING:
    from operators.cluster import LocalControlPlane, LocalNode, NodeNetwork
    from operators.cluster.sshd import DemoNodeInfo


def cluster_actions(cluster: argparse.ArgumentParser) -> None:
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
        action.set_defaults(func=cmd_cluster, action=name)
        if name == "up":
            for setting in PORT_SETTINGS:
                action.add_argument(setting.flag, type=_port, dest=setting.argument, metavar="N",
                                    help=f"the {setting.label} port (default: ${setting.variable}, else the port "
                                    f"this home used last, else {setting.default})")
            node_argument(action)
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


def node_argument(parser: argparse.ArgumentParser) -> None:
    """`--node`, as `stead operator` takes it (one declaration: the settings tree's)."""
    add_flag(parser, ClusterSettings, "node")



def _object_name(text: str) -> str:
    import re

    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes name (lower-case letters, digits and '-', "
                                         "at most 63)")
    return text



def cmd_cluster(args: argparse.Namespace) -> int:
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

            ensure_binaries(progress=say)
            ensure_node_binaries(progress=say)
            pause_archive(progress=say)
        elif args.action == "up":
            plane = local_plane({s.argument: getattr(args, s.argument) for s in PORT_SETTINGS})
            info = plane.up()
            print(f"control plane up at {info.server}\nexport KUBECONFIG={info.kubeconfig}")
            node = start_node(plane, args.node)
            if node is not None:
                print(f"node {node.name} Ready ({node.network.node_ip} on bridge {node.network.bridge})")
            start_demo_node(plane)
        elif args.action == "down":
            stop_local(local_plane())
            print("control plane stopped")
        elif args.action == "demo-node":
            from operators.cluster.sshd import DemoNode

            try:
                sys.stdout.write(DemoNode(home()).manifest(
                    args.namespace, args.name, args.release, args.roles or ["controller", "compute"]))
            except RuntimeError as error:
                print(f"stead cluster demo-node: {error}", file=sys.stderr)
                return 1
        elif args.action == "load-image":
            LocalNode(local_plane()).load_image(args.image)
            print(f"{args.image} loaded into the local node")
        else:
            plane = local_plane()
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



def say(line: str) -> None:
    print(line, file=sys.stderr)


def start_node(plane: LocalControlPlane, policy: str) -> LocalNode | None:
    """The local node of `plane` as `--node` asks: started (or found running) where the machine allows it;
    otherwise, with `auto`, None after saying why not (Pods then stay Pending)."""
    from operators.cluster import LocalNode
    from operators.cluster.node import node_unavailable_reason

    if policy == "never":
        return None
    reason = node_unavailable_reason()
    if reason is not None and policy == "auto":
        say(f"no local node: {reason}")
        return None
    node = LocalNode(plane, network=node_network(), progress=say)
    node.up()
    return node


def start_demo_node(plane: LocalControlPlane) -> DemoNodeInfo | None:
    """The plane's demo SSH node (operators/cluster/sshd.py), started or found running; None after saying
    why not (no sshd here): the plane runs without it."""
    from operators.cluster.sshd import DemoNode

    try:
        info = DemoNode(plane.home).up()
    except RuntimeError as error:
        say(f"no demo SSH node: {error}")
        return None
    say(f"demo SSH node at {info.address}:{info.port} (user {info.user}): `stead cluster demo-node -n NAMESPACE "
         "| kubectl apply -f -` gives a namespace its Secret and Environment")
    return info


def stop_local(plane: LocalControlPlane) -> None:
    """The demo node, the local node (if one ran) and then the plane of their home."""
    from operators.cluster import LocalNode
    from operators.cluster.sshd import DemoNode

    DemoNode(plane.home).down()
    LocalNode(plane).down()
    plane.down()


def home() -> Path:
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


def node_network() -> NodeNetwork:
    """The network of a new node: ``$STEAD_NODE_BRIDGE`` and ``$STEAD_NODE_SUBNET``, else the defaults
    (a node started before keeps the network it recorded)."""
    from operators.cluster import NodeNetwork

    default = NodeNetwork()
    return NodeNetwork(bridge=os.environ.get("STEAD_NODE_BRIDGE") or default.bridge,
                       subnet=os.environ.get("STEAD_NODE_SUBNET") or default.subnet)


def local_plane(given: Mapping[str, int | None] | None = None) -> LocalControlPlane:
    """The local control plane of `$STEAD_HOME`, on the ports `local_plane_ports` chooses."""
    from operators.cluster import ControlPlaneError, LocalControlPlane, default_home

    home = default_home()
    try:
        ports = local_plane_ports(given or {}, os.environ, home)
        return LocalControlPlane(home, apiserver_port=ports.apiserver, etcd_client_port=ports.etcd_client,
                                 etcd_peer_port=ports.etcd_peer, controller_manager_port=ports.controller_manager)
    except ValueError as error:  # a variable that is no port, or two equal ports
        raise ControlPlaneError(str(error)) from None
