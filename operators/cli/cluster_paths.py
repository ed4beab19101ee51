"""`stead cluster kubeconfig|kubectl|helm`: print a path, and nothing else to import or read
(`$(stead cluster kubeconfig)` is instant: none of what starting a plane needs)."""

from __future__ import annotations

import argparse
import os
import sys

from operators.cluster.build import HELM, KUBERNETES, component_dir
from operators.cluster.home import default_home, kubeconfig_path


def cmd_path(args: argparse.Namespace) -> int:
    if args.action == "kubeconfig":
        print(kubeconfig_path(default_home()))
        return 0
    tool = component_dir(KUBERNETES if args.action == "kubectl" else HELM) / args.action
    if not os.access(tool, os.X_OK):
        version = (KUBERNETES if args.action == "kubectl" else HELM).version
        print(f"stead cluster {args.action}: {args.action} {version} is not built yet; `stead cluster build` "
              "builds it (once)", file=sys.stderr)
        return 1
    print(tool)
    return 0
