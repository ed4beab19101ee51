"""kstatus conformance: every Stead kind, captured live at each phase (tests/e2e/phases.py), judged by
kstatus' own Go code (tools/kstatus calls sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute), the
library Flux decides health with. Ready at its generation is Current; reconciling, queued, waiting or
running is InProgress; Stalled (a failed run too) is Failed; a generation not yet observed is never
Current. The chart's Argo CD health checks judge the same objects and must agree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from operators.cluster.build import ensure_kstatus
from tests import argocd
from tests.e2e.phases import KINDS, Captured, phase_objects  # noqa: F401  (the session's captured objects)

EXPECTED: dict[tuple[str, str], str] = {
    **{(kind, "Ready"): "Current" for kind in KINDS},
    **{(kind, "Unobserved"): "InProgress" for kind in KINDS},
    ("ConfigValues", "Stalled"): "Failed",
    ("Blueprint", "Stalled"): "Failed",
    ("ServiceEntity", "Stalled"): "Failed",
    ("App", "Stalled"): "Failed",
    ("App", "Waiting"): "InProgress",
    ("App", "Launching"): "InProgress",
    ("App", "Failed"): "Failed",
    ("App", "ActionFailed"): "Current",
    ("GraphRun", "Stalled"): "Failed",
    ("GraphRun", "Failed"): "Failed",
    ("GraphRun", "Queued"): "InProgress",
    ("GraphRun", "Running"): "InProgress",
    ("GraphRun", "Aborted"): "Failed",
    ("ActionRun", "Running"): "InProgress",
    ("ActionRun", "Queued"): "InProgress",
    ("ActionRun", "Aborted"): "Failed",
    ("ActionRun", "Failed"): "Failed",
    ("ServiceInstance", "Stalled"): "Failed",
    ("ServiceInstance", "Reconciling"): "InProgress",
}


@pytest.fixture(scope="module")
def kstatus() -> Path:
    """Built once from the Go module proxy and cached outside the repository (build.py)."""
    return ensure_kstatus()


def judge(kstatus: Path, objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """kstatus' verdict ({kind, name, status, message} or {error}) for each object, in order."""
    done = subprocess.run([str(kstatus)], input=json.dumps({"items": objects}), capture_output=True, text=True,
                          timeout=60, check=True)
    verdicts: list[dict[str, str]] = json.loads(done.stdout)
    return verdicts


def test_kstatus_judges_every_kind_at_every_phase_as_stead_means_it(kstatus: Path, phase_objects: Captured) -> None:  # noqa: F811
    assert {kind for kind, _ in phase_objects} == set(KINDS)
    keys = sorted(phase_objects)
    verdicts = dict(zip(keys, judge(kstatus, [phase_objects[key] for key in keys]), strict=True))
    table = "\n".join(f"{kind:16} {phase:12} {v.get('status') or v.get('error')}: {v.get('message', '')}"
                      for (kind, phase), v in verdicts.items())
    print(f"\n{table}")
    for key in keys:
        obj = phase_objects[key]
        if key[1] == "Unobserved":  # the capture is what it claims to be
            assert obj["metadata"]["generation"] > (obj.get("status") or {}).get("observedGeneration", 0), key
    wrong = {key: (EXPECTED.get(key), v.get("status") or v.get("error"), v.get("message"))
             for key, v in verdicts.items() if v.get("status") != EXPECTED.get(key)}
    assert not wrong, wrong
    assert all(v["status"] != "Current" for (_, phase), v in verdicts.items() if phase == "Unobserved")


ARGO_CD_FOR: dict[str, set[str]] = {"Current": {"Healthy", "Suspended"}, "InProgress": {"Progressing"},
                                    "Failed": {"Degraded"}}
"""Argo CD's health for each kstatus verdict: the two tools read the same conditions."""
ARGO_CD_SAYS_MORE: dict[tuple[str, str], str] = {("App", "ActionFailed"): "Degraded"}
"""Where Argo CD's health check says more than kstatus (docs/gitops.md): an App whose last action failed is
realized (kstatus: Current), and Argo CD shows the failure on the App itself."""


def test_argo_cd_health_checks_agree_with_kstatus_on_every_kind_at_every_phase(phase_objects: Captured) -> None:  # noqa: F811
    """The chart's Lua health checks (run as Argo CD runs them, tests/argocd.py) judge the same live objects."""
    wrong = {}
    for key, obj in sorted(phase_objects.items()):
        verdict = argocd.health(obj)
        wanted = {ARGO_CD_SAYS_MORE[key]} if key in ARGO_CD_SAYS_MORE else ARGO_CD_FOR[EXPECTED[key]]
        if verdict.status not in wanted or not verdict.message:
            wrong[key] = (sorted(wanted), verdict.status, verdict.message)
    assert not wrong, wrong
