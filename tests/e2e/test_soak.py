"""A smoke of the chaos soak (bench/soak.py, issue 33 item 5): a short run with a fixed seed, the fewest
processes that still prove something (its own control plane, two replicas, no sshd node), and the fault
kinds whose recovery fits in it. The soak itself, an hour of every fault kind, is not run in CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT

KINDS = ("kill9", "sigstop", "apiserver", "lost-store")


def test_a_short_seeded_soak_injects_each_fault_and_finds_no_invariant_broken(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the soak mounts a tmpfs for the full-disk fault: needs root")
    report = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", "1.3", "--seed", "5", "--replicas", "2",
         "--projects", "2", "--graph-projects", "0", "--gap", "6", "--lease", "2", "--interval", "1",
         "--ready-bound", "120", "--faults", ",".join(KINDS), "--json", str(report)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert report.exists(), done.stderr[-4000:]
    found = json.loads(report.read_text())
    print(done.stdout)
    assert {k: v for k, v in found["violations"].items() if v} == {}, done.stdout
    assert found["unrecovered"] == {}, done.stdout
    assert set(found["injected"]) == set(KINDS), found["injected"]
    assert found["load"]["runs"] > 0 and found["load"]["writes"] > 0
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
