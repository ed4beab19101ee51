"""A command whose reader goes away (`stead service get X | head -1`) ends quietly: a closed pipe is not
"cannot reach the API server ... Broken pipe" (an API error, exit 1), it is the end of the output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

# A cluster command (in `crds`'s place, to have a noun) whose output is far longer than a pipe holds.
SCRIPT = """\
import asyncio, sys
from pathlib import Path
import operators.cli as cli
import operators.cli.crds as crds
from operators.runtime.cli.commands import with_cluster

async def handler(kube):
    for i in range(200000):
        print("line", i)
    return 0

crds.cmd_crds = lambda args: asyncio.run(with_cluster("stead service get", Path(sys.argv[1]), handler))
sys.exit(cli.main(["crds"]))
"""


def test_a_closed_stdout_ends_the_command_quietly(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(kubeconfig)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err  # as a tool that SIGPIPE ended
    assert err == ""
