"""`stead cluster`: the local control plane (kube-apiserver, etcd, controller-manager), its node and its demo
SSH node. Its actions and flags, and the plane's ports; what they run is `operators.cli.cluster_paths` (the
paths) and `operators.cli.local` (the plane, also for `stead operator --local`)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path

from operators.cluster.ports import PORT_SETTINGS, Ports, choose_ports, parse_port, remembered_ports
from operators.runtime.cli.nouns import command
from operators.runtime.settings import ClusterSettings, add_flag

PATHS = ("kubeconfig", "kubectl", "helm")
"""The actions that print a path (`$(stead cluster kubeconfig)` is instant): `operators.cli.cluster_paths`;
the others start, stop or look at the plane: `operators.cli.local`."""


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
        action.set_defaults(func=command("operators.cli.cluster_paths:cmd_path" if name in PATHS
                                            else "operators.cli.local:cmd_cluster"), action=name)
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
        if name == "build":
            action.add_argument("--flux", action="store_true",
                                help="also Flux's source-controller and kustomize-controller, with their CRDs "
                                "(the GitOps loop of tests/e2e/test_gitops_flux.py; it builds them itself too)")
        if name == "load-image":
            action.add_argument("image", help="an image reference in buildah's storage, e.g. localhost/stead:dev")


def node_argument(parser: argparse.ArgumentParser) -> None:
    """`--node`, as `stead operator` takes it (one declaration: the settings tree's)."""
    add_flag(parser, ClusterSettings, "node")


def _object_name(text: str) -> str:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kubernetes name (lower-case letters, digits and '-', "
                                         "at most 63)")
    return text


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
