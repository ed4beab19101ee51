"""The local control plane of `$STEAD_HOME`, its node and its demo SSH node, as `stead cluster up|down|status|
build|load-image|demo-node` and `stead operator --local` start, stop and look at them. Imported only when one of
those runs (`operators.cli.cluster` holds the parsers; the paths are `operators.cli.cluster_paths`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from operators.cli.cluster import local_plane_ports
from operators.cluster import (
    ControlPlaneError,
    LocalControlPlane,
    LocalNode,
    NodeNetwork,
    PortInUse,
    default_home,
    ensure_binaries,
)
from operators.cluster.build import ensure_flux_binaries, ensure_node_binaries
from operators.cluster.images import pause_archive
from operators.cluster.node import node_unavailable_reason
from operators.cluster.ports import PORT_SETTINGS
from operators.cluster.sshd import DemoNode, DemoNodeInfo


def cmd_cluster(args: argparse.Namespace) -> int:
    try:
        if args.action == "build":
            ensure_binaries(progress=say)
            ensure_node_binaries(progress=say)
            pause_archive(progress=say)
            if args.flux:
                flux = ensure_flux_binaries(progress=say)
                print(f"{flux.source_controller}\n{flux.kustomize_controller}")
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
    DemoNode(plane.home).down()
    LocalNode(plane).down()
    plane.down()


def home() -> Path:
    return default_home()


def node_network() -> NodeNetwork:
    """The network of a new node: ``$STEAD_NODE_BRIDGE`` and ``$STEAD_NODE_SUBNET``, else the defaults
    (a node started before keeps the network it recorded)."""
    default = NodeNetwork()
    return NodeNetwork(bridge=os.environ.get("STEAD_NODE_BRIDGE") or default.bridge,
                       subnet=os.environ.get("STEAD_NODE_SUBNET") or default.subnet)


def local_plane(given: Mapping[str, int | None] | None = None) -> LocalControlPlane:
    """The local control plane of `$STEAD_HOME`, on the ports `local_plane_ports` chooses."""
    home = default_home()
    try:
        ports = local_plane_ports(given or {}, os.environ, home)
        return LocalControlPlane(home, apiserver_port=ports.apiserver, etcd_client_port=ports.etcd_client,
                                 etcd_peer_port=ports.etcd_peer, controller_manager_port=ports.controller_manager)
    except ValueError as error:  # a variable that is no port, or two equal ports
        raise ControlPlaneError(str(error)) from None
