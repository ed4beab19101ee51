"""`stead actionrun logs`: the terminal view (rich), the plain text off a terminal, -o json|yaml, the 0/0 bar."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from operators.calm import cli_runs, cli_terminal
from operators.calm.cli import dump_status, duration, format_run, progress_bar
from operators.calm.cli_terminal import render_run
from operators.cli import _parser, canonical_argv

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2025, 1, 1, 12, 2, 0, tzinfo=UTC)


def run(state: str = "Running", done: int = 3, total: int = 5) -> dict[str, Any]:
    final = state in ("Failed", "Succeeded", "Aborted")
    status: dict[str, Any] = {
        "state": state, "progress": {"done": done, "total": total}, "startTime": "2025-01-01T12:00:00Z",
        "runLog": [
            {"task": "prepare", "step": "s0", "type": "noop", "state": "success", "replicas": [
                {"target": "", "state": "success", "attempts": 1, "startedAt": "2025-01-01T12:00:00.000Z",
                 "finishedAt": "2025-01-01T12:00:00.200Z"}]},
            {"task": "db-install", "step": "s1", "type": "exec", "state": "success", "replicas": [
                {"target": "db-0", "state": "success", "attempts": 1, "exitCode": 0,
                 "startedAt": "2025-01-01T12:00:01.000Z", "finishedAt": "2025-01-01T12:00:13.000Z",
                 "output": "installing postgres\ncreating database shop for user shop"}]},
            {"task": "app-deploy", "step": "s2", "type": "exec", "state": "failure" if final else "running",
             "replicas": [
                 {"target": "tier-0", "state": "success", "attempts": 1, "exitCode": 0,
                  "startedAt": "2025-01-01T12:00:14.000Z", "finishedAt": "2025-01-01T12:01:20.000Z",
                  "output": "pulling\nstarted"},
                 {"target": "tier-1", "state": "failure" if final else "running", "attempts": 2,
                  "startedAt": "2025-01-01T12:00:14.000Z", "output": "pulling\nretrying: connection refused",
                  **({"exitCode": 3, "finishedAt": "2025-01-01T12:01:50.000Z",
                      "message": "script exited with code 3"} if final else {})}]},
            {"task": "lb-register", "step": "s3", "type": "exec", "state": "aborted" if final else "pending",
             "replicas": []}]}
    if final:
        status.update(endTime="2025-01-01T12:01:51Z", failedTask="app-deploy@tier-1",
                      reason="script exited with code 3")
    return {"metadata": {"name": "shop-create"}, "spec": {"app": "shop", "action": "create"}, "status": status}


def draw(obj: Mapping[str, Any], tail: int | None = 0) -> str:
    console = Console(record=True, width=100, force_terminal=True)
    console.print(render_run(obj, tail=tail, now=NOW))
    return console.export_text()


def test_the_terminal_view_shows_tasks_replicas_states_durations_and_progress() -> None:
    text = draw(run())
    lines = text.splitlines()
    assert lines[0] == "run shop-create  app shop  action create  ● Running  2m00s"
    assert lines[1].split() == ["TASK", "STATE", "ATTEMPTS", "EXIT", "DURATION", "MESSAGE"]
    row = {line.split()[0].strip("├└─"): line for line in lines[2:] if line.split()}
    assert row["prepare"].split() == ["prepare", "(noop)", "✔", "success", "0.2s"]
    assert row["db-install"].split() == ["db-install", "(exec)", "✔", "success", "12s"]
    assert "db-0" in text and "✔ success         1     0       12s" in text
    assert row["app-deploy"].split() == ["app-deploy", "(exec)", "●", "running", "1m46s"]  # still running: to now
    assert "├─ tier-0" in text and "✔ success         1     0     1m06s" in text
    assert "└─ tier-1" in text and "● running         2           1m46s" in text
    assert row["lb-register"].split() == ["lb-register", "(exec)", "◷", "pending"]
    assert lines[-1].endswith(" 3/5 60%") and "━" in lines[-1]
    assert "|" not in text  # -f shows no output unless asked (--tail N)


def test_the_terminal_view_of_a_failed_run_shows_exit_code_message_reason_and_output_tails() -> None:
    text = draw(run("Failed", 5, 5), tail=1)
    assert text.splitlines()[0] == "run shop-create  app shop  action create  ✖ Failed  1m51s"
    assert "✖ failure         2     3     1m36s  script exited with code 3" in text
    assert "app-deploy  (exec)   ✖ failure" in text and "lb-register  (exec)  ⊘ aborted" in text
    assert "| creating database shop for user shop" in text and "| retrying: connection refused" in text
    assert "| installing postgres" not in text and "| pulling" not in text  # only the last line of each
    assert " 5/5 100%" in text and text.rstrip().endswith("reason: app-deploy@tier-1 script exited with code 3")
    everything = draw(run("Failed", 5, 5), tail=None)
    assert "| installing postgres" in everything and everything.count("| pulling") == 2


def test_a_run_with_nothing_to_do_yet_shows_an_empty_bar_on_a_terminal_and_in_plain_text() -> None:
    pending = {"metadata": {"name": "r0"}, "spec": {"app": "a", "action": "create"}, "status": {}}
    console = Console(record=True, width=100, force_terminal=True)
    console.print(render_run(pending, now=NOW))
    styled = console.export_text(styles=True, clear=False)
    assert console.export_text().splitlines()[1:] == ["(no tasks yet)", "━" * 40 + " 0/0 0%"]
    assert "\x1b[90m" + "━" * 40 + "\x1b[0m" in styled  # all of it the empty (grey) part of the bar
    assert progress_bar(0, 0) == "[....................] 0/0"  # was a full bar: a bug
    assert format_run(pending) == "run r0  app a  action create  Pending  [....................] 0/0"
    assert progress_bar(5, 5, 4) == "[####] 5/5" and progress_bar(1, 4, 4) == "[#...] 1/4"


def test_durations_are_short() -> None:
    assert [duration(s) for s in (0.2, 9.96, 12, 65, 3600 + 180, -1)] == \
        ["0.2s", "10.0s", "12s", "1m05s", "1h03m", "0.0s"]


class Kube:
    """Answers the GETs of the ActionRun with the given objects, the last one from then on."""

    def __init__(self, objs: Sequence[Mapping[str, Any]]) -> None:
        self.objs, self.gets = list(objs), 0

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Mapping[str, Any]:
        assert method == "GET" and path.endswith("/actionruns/shop-create")
        self.gets += 1
        return self.objs[min(self.gets, len(self.objs)) - 1]


def logs(kube: Kube, console: Console | None = None, **options: Any) -> int:
    args = argparse.Namespace(run="shop-create", namespace="default", follow=False, output=None, tail=None)
    vars(args).update(options)
    return asyncio.run(cli_runs.logs(kube, args, console))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sleep(_: float) -> None:
        return None

    for module in (cli_runs, cli_terminal):  # the plain and the terminal views of `logs -f` poll once a second
        monkeypatch.setattr(module, "pause", sleep)


def test_not_on_a_terminal_the_plain_text_is_printed_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    assert logs(Kube([run()])) == 0
    out = capsys.readouterr().out
    assert out == format_run(run()) + "\n" and "\x1b" not in out
    assert out.splitlines()[:6] == [
        "run shop-create  app shop  action create  Running  [############........] 3/5",
        "prepare  success", "db-install  (exec)  success", "  db-0  success  attempts 1  exit 0",
        "    | installing postgres", "    | creating database shop for user shop"]
    # -f: the whole tree again on every change, nothing redrawn, until the run is final
    assert logs(Kube([run(), run(), run(done=4), run("Failed", 5, 5)]), follow=True) == 1
    out = capsys.readouterr().out
    assert out == "\n".join(format_run(o) for o in (run(), run(done=4), run("Failed", 5, 5))) + "\n"
    assert "\x1b" not in out


def test_on_a_terminal_follow_draws_live_until_the_run_is_final() -> None:
    console = Console(record=True, width=100, force_terminal=True)
    kube = Kube([run(), run(done=4), run("Failed", 5, 5)])
    assert logs(kube, console, follow=True) == 1 and kube.gets == 3
    text = console.export_text()
    assert "✖ Failed" in text and " 5/5 100%" in text and "reason: app-deploy@tier-1" in text
    console = Console(record=True, width=100, force_terminal=True)
    assert logs(Kube([run()]), console) == 0 and "| pulling" in console.export_text()  # once: all output


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_output_prints_the_status_as_one_document(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    load = json.loads if fmt == "json" else yaml.safe_load
    assert logs(Kube([run()]), output=fmt) == 0
    doc = load(capsys.readouterr().out)
    assert doc == run()["status"] and doc["state"] == "Running" and doc["progress"] == {"done": 3, "total": 5}
    kube = Kube([run(), run(done=4), run("Failed", 5, 5)])
    assert logs(kube, output=fmt, follow=True) == 1 and kube.gets == 3
    out = capsys.readouterr().out
    assert load(out)["state"] == "Failed" and load(out)["runLog"][2]["replicas"][1]["exitCode"] == 3  # the final only
    if fmt == "yaml":
        assert len(list(yaml.safe_load_all(out))) == 1
    pending = {"metadata": {"name": "shop-create"}, "spec": {}}
    assert logs(Kube([pending]), output=fmt) == 0
    assert load(capsys.readouterr().out) == {"state": "Pending", "progress": {"done": 0, "total": 0}, "runLog": []}
    assert json.loads(dump_status(run(), "json")) == yaml.safe_load(dump_status(run(), "yaml"))


def parse(*words: str) -> argparse.Namespace:
    argv = canonical_argv(words)
    return _parser(argv).parse_args(argv)


def test_the_options_parse_and_rich_is_not_imported_for_the_command_line() -> None:
    args = parse("runs", "logs", "r", "-f", "-o", "yaml", "--tail", "3")
    assert (args.follow, args.output, args.tail, args.run) == (True, "yaml", 3, "r")
    assert parse("ar", "logs", "r").output is None
    with pytest.raises(SystemExit):
        parse("actionrun", "logs", "r", "-o", "table")
    assert parse("app", "run", "a", "x", "-f", "--tail", "2").tail == 2
    code = ("import sys, operators.cli as c; c._parser(['actionrun', 'logs', 'r']); "
            "print(any(m.split('.')[0] == 'rich' for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr
