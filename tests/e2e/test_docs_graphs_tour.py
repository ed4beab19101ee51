"""docs/graphs.md's opening tour, run as written: its first shell block, line by line, by bash, against the
test session's control plane and operator (`kubectl` and `stead` on the PATH, KUBECONFIG set), from the
repository's root, as a reader would run it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from operators.cluster import Binaries, ClusterInfo
from tests.e2e.conftest import STEAD, Kubectl, OperatorProcess

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "graphs.md"


def first_shell_block(text: str) -> tuple[int, str]:
    """The first ```sh block of a page, and the line it starts on."""
    match = re.search(r"^```sh\n(.*?)^```$", text, re.S | re.M)
    assert match is not None, "no ```sh block"
    return text[:match.start()].count("\n") + 2, match.group(1)


def test_the_graphs_tour_runs_as_written(operator: OperatorProcess, cluster: ClusterInfo, binaries: Binaries,
                                         kubectl: Kubectl) -> None:
    first, block = first_shell_block(PAGE.read_text())
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "PATH": os.pathsep.join((str(binaries.kubectl.parent), str(STEAD.parent), os.environ.get("PATH", "")))}
    try:
        for number, line in enumerate(block.splitlines(), first):
            if not line.strip():
                continue
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == 0, f"docs/graphs.md:{number}: {line}\n{done.stdout}\n{done.stderr}"
        assert "compute-service" in done.stdout and "planned" in done.stdout, done.stdout  # the last line's plan
    finally:
        kubectl("delete", "namespace", "team", "--wait=false", check=False)
