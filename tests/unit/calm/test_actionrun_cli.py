"""`stead actionrun logs` output, and the spellings of `stead actionrun` (`ar`, `run`, `runs`)."""

from __future__ import annotations

from operators.calm.cli import format_run, progress_bar
from operators.cli import canonical_argv


def test_run_logs_show_the_tree_with_outputs_and_the_reason() -> None:
    obj = {"metadata": {"name": "r1"}, "spec": {"app": "shop", "action": "fail"}, "status": {
        "state": "Failed", "progress": {"done": 1, "total": 2}, "failedTask": "boom", "reason": "exit 3",
        "runLog": [{"task": "ok", "type": "exec", "state": "success",
                    "replicas": [{"target": "", "state": "success", "attempts": 1, "exitCode": 0, "output": "fine"}]},
                   {"task": "boom", "type": "exec", "state": "failure",
                    "replicas": [{"target": "tier-0", "state": "failure", "attempts": 1, "exitCode": 3,
                                  "message": "script exited with code 3"}]}]}}
    text = format_run(obj)
    assert text.splitlines()[0] == "run r1  app shop  action fail  Failed  [##########..........] 1/2"
    assert "  runner  success  attempts 1  exit 0" in text and "    | fine" in text
    assert "  tier-0  failure  attempts 1  exit 3  script exited with code 3" in text
    assert text.endswith("reason: boom exit 3")
    assert progress_bar(0, 0, 4) == "[....] 0/0"  # nothing to do is not done: an empty bar (was full)


def test_run_is_the_actionrun_before_logs_or_abort_and_the_operator_otherwise() -> None:
    for spelling in ("actionrun", "ar", "run", "runs"):
        assert canonical_argv([spelling, "logs", "x", "-f"]) == ["actionrun", "logs", "x", "-f"]
        assert canonical_argv([spelling, "abort", "x"]) == ["actionrun", "abort", "x"]
    assert canonical_argv(["run", "--local", "auto"]) == ["operator", "--local", "auto"]
    assert canonical_argv(["run"]) == ["operator"]
    assert canonical_argv(["run", "-h"]) == ["operator", "-h"]
    assert canonical_argv(["operator", "--local", "auto"]) == ["operator", "--local", "auto"]
    assert canonical_argv(["app", "run", "shop", "create"]) == ["app", "run", "shop", "create"]  # only the noun
