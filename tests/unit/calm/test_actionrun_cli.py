"""`stead run logs` output and the `stead run logs|abort` spelling."""

from __future__ import annotations

from operators.calm.cli import format_run, progress_bar, rewrite_argv


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


def test_run_logs_and_abort_are_subcommands_of_run_only_for_those_words() -> None:
    assert rewrite_argv(["run", "logs", "x", "-f"]) == ["runs", "logs", "x", "-f"]
    assert rewrite_argv(["run", "--local", "auto"]) == ["run", "--local", "auto"]
