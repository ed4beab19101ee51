"""``python -m pipelines``: the runner process and its inspection commands.

    python -m pipelines run --workflow FILE --run-id UID --state DIR [--scheduler-url URL]
                            [--abort-file PATH] [--hooks MODULE:ATTR] [--secret-key-stdin]
                            [--exec-backend local|job --kube-api MODULE:FACTORY --job-namespace NS ...]
                            [--http-allow CIDR] [--ssh-allow CIDR] [--deny CIDR] [--ssh-files-root DIR]
                            [--ssh-reboot-command CMD]
    python -m pipelines status --state DIR --run-id UID [--json | --progress | --output STEP[@TARGET]]
    python -m pipelines abort  --state DIR --run-id UID

`run` prints one JSON object per line on stdout (run start, every step state change, run end,
each with ``done`` and ``total``) and logs on stderr. Exit codes: 0 succeeded, 1 failed,
2 bad input, 3 aborted, 4 the run is already being run by another process. SIGTERM and SIGINT
abort the run (running steps are stopped, the rest marked aborted).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from pipelines.control import read_output, read_progress, read_status, request_abort
from pipelines.executors import (
    KubernetesJob,
    LocalProcess,
    ScriptBackend,
    ScriptUser,
    SshSettings,
    default_executors,
)
from pipelines.executors.egress import EgressPolicy
from pipelines.hooks import Hooks, SealedSecrets, load_hooks
from pipelines.kubeapi import KubeApi, load_kube_api
from pipelines.model import Instance, Workflow
from pipelines.paths import RunPaths
from pipelines.runner import AlreadyRunning, Runner

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
EXIT_BAD_INPUT = 2
EXIT_ALREADY_RUNNING = 4


class JsonLines:
    """The event stream: one compact JSON object per line, flushed, safe from several threads."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.broken = False

    def __call__(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        with self.lock:
            if self.broken:
                return
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (BrokenPipeError, ValueError):
                self.broken = True  # nobody reads any more: the run goes on, status.json still tells


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipelines", description="Stead's workflow runner on Luigi.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run (or resume) a workflow under a run uid")
    run.add_argument("--workflow", type=Path, required=True, help="the workflow, JSON or YAML")
    run.add_argument("--run-id", required=True, help="the run's uid: a run started again resumes")
    run.add_argument("--state", type=Path, required=True, help="the state directory (run store, outputs)")
    run.add_argument("--scheduler-url", help="a luigid central scheduler (default: the local scheduler)")
    run.add_argument("--abort-file", type=Path, help="abort when this file exists (default: <run>/abort)")
    run.add_argument("--hooks", help="MODULE:ATTR of a pipelines.hooks.Hooks (or a factory of one)")
    run.add_argument("--secret-key-stdin", action="store_true", help="read the run key for sealed secrets")
    run.add_argument("--exec-backend", choices=("local", "job"), default="local")
    run.add_argument("--script-user", metavar="USER[:GROUP]",
                     help="run local scripts as this unprivileged user (the runner must be root); "
                     "default: the runner's own user")
    run.add_argument("--kube-api", help="MODULE:FACTORY of a pipelines.kubeapi.KubeApi")
    run.add_argument("--job-namespace", help="namespace of exec Jobs (exec-backend job)")
    run.add_argument("--job-service-account", default="default")
    run.add_argument("--job-image", default="python:3.11-slim")
    run.add_argument("--http-allow", action="append", default=[], metavar="CIDR",
                     help="a network http steps may reach although it is not public (repeatable)")
    run.add_argument("--deny", action="append", default=[], metavar="CIDR",
                     help="a network http and ssh steps never reach, even when allowed: the cluster's Service "
                     "CIDRs (repeatable)")
    run.add_argument("--ssh-allow", action="append", default=[], metavar="CIDR",
                     help="a network ssh steps may reach although it is not public "
                     "(repeatable; tests: 127.0.0.0/8)")
    run.add_argument("--ssh-files-root", type=Path, metavar="DIR",
                     help="the only directory whose files ssh.copy_files and ssh.sync may send to nodes "
                     "(default: none, and those steps fail)")
    run.add_argument("--ssh-reboot-command", default=SshSettings.reboot_command, metavar="CMD",
                     help="what ssh.reboot runs on the node (default: %(default)s)")
    run.add_argument("--ssh-connect-timeout", type=float, default=SshSettings.connect_timeout, metavar="SECONDS",
                     help="bound of an ssh step's TCP connect, handshake and authentication (default: %(default)s)")
    run.add_argument("--events", choices=("stdout", "none"), default="stdout")
    run.add_argument("--durable", action="store_true", help="fsync every commit of the run store")
    run.add_argument("--log-level", default="WARNING")

    for name, text in (("status", "show a run"), ("abort", "ask a run to abort")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--state", type=Path, required=True)
        cmd.add_argument("--run-id", required=True)
        if name == "status":
            group = cmd.add_mutually_exclusive_group()
            group.add_argument("--json", action="store_true", help="every step record, as JSON")
            group.add_argument("--progress", action="store_true", help="the status.json summary")
            group.add_argument("--output", metavar="STEP[@TARGET]", help="the whole output of one step")
    return parser


def _load_workflow(path: Path) -> Workflow:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return Workflow.model_validate(data)


def _command_run(args: argparse.Namespace) -> int:
    os.umask(0o077)  # the run's files are the runner's alone (pipelines.paths); scripts get 022 back
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format=LOG_FORMAT)
    try:
        workflow = _load_workflow(args.workflow)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        print(f"invalid workflow {args.workflow}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    hooks = load_hooks(args.hooks) if args.hooks else Hooks()
    if args.secret_key_stdin:
        key = base64.b64decode(sys.stdin.readline().strip())
        hooks = Hooks(render=hooks.render, mask=hooks.mask, secret=SealedSecrets(key, fallback=hooks.secret))
    kube: KubeApi | None = load_kube_api(args.kube_api) if args.kube_api else None
    try:
        EgressPolicy([*args.ssh_allow, *args.http_allow], deny=args.deny)
    except ValueError as exc:
        print(f"--ssh-allow/--http-allow/--deny: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.ssh_files_root is not None and not args.ssh_files_root.is_dir():
        print(f"--ssh-files-root {args.ssh_files_root}: not a directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    ssh = SshSettings(allow=tuple(args.ssh_allow), deny=tuple(args.deny), files_root=args.ssh_files_root,
                      reboot_command=args.ssh_reboot_command, connect_timeout=args.ssh_connect_timeout)
    local = LocalProcess()
    if args.script_user:
        try:
            user = ScriptUser.parse(args.script_user)
        except ValueError as exc:
            print(f"--script-user: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if os.geteuid() != 0:
            print("--script-user needs the runner to run as root (it switches to that user)", file=sys.stderr)
            return EXIT_BAD_INPUT
        local = LocalProcess(user=user)
    backend: ScriptBackend = local
    if args.exec_backend == "job":
        if kube is None or not args.job_namespace:
            print("--exec-backend job needs --kube-api and --job-namespace", file=sys.stderr)
            return EXIT_BAD_INPUT
        backend = KubernetesJob(kube, args.job_namespace, args.job_service_account, args.job_image)
    executors = default_executors(backend, kube, args.http_allow, ssh=ssh, http_deny=args.deny)
    runner = Runner(
        workflow, args.run_id, args.state, hooks=hooks, executors=executors,
        scheduler_url=args.scheduler_url, abort_file=args.abort_file, durable=args.durable,
        events=JsonLines(sys.stdout) if args.events == "stdout" else None,
    )

    _mask_stderr(runner.masker)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("pipelines").warning("signal %d: aborting run %s", signum, args.run_id)
        runner.abort()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        outcome = runner.run()
    except AlreadyRunning as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    finally:
        local.close()
    return outcome.exit_code


class _MaskingFormatter(logging.Formatter):
    """Log lines (tracebacks included) masked as the run's output is: the operator keeps the runner's
    stderr (``runner.log``) and shows its last lines when a runner has to be started again."""

    def __init__(self, fmt: str, mask: Callable[[str], str]) -> None:
        super().__init__(fmt)
        self.mask = mask

    def format(self, record: logging.LogRecord) -> str:
        return self.mask(super().format(record))


def _mask_stderr(mask: Callable[[str], str]) -> None:
    """Mask whatever the runner writes on stderr: its log records and uncaught exceptions (the
    values a run revealed may be in an exception's message)."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(_MaskingFormatter(LOG_FORMAT, mask))

    def excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        sys.stderr.write(mask("".join(traceback.format_exception(kind, error, trace))))

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit:
            sys.stderr.write(mask(f"in thread {args.thread.name if args.thread else '?'}:\n" + "".join(
                traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))))

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook


def _print_table(status: dict[str, Any]) -> None:
    progress = status["progress"]
    done = f"{progress['done']}/{progress['total']}"
    print(f"run {status['uid']}  {status['phase']}  {done}  {status.get('message', '')}")
    rows = [("STEP", "TARGET", "STATE", "ATTEMPTS", "EXIT", "STARTED", "FINISHED", "MESSAGE")]
    for rec in status["steps"]:
        exit_code = rec.get("exitCode")
        rows.append((
            rec["step"], rec.get("target") or "-", rec["state"], str(rec.get("attempts", 0)),
            "-" if exit_code is None else str(exit_code), rec.get("startedAt") or "-", rec.get("finishedAt") or "-",
            (rec.get("message") or "").splitlines()[0][:80] if rec.get("message") else "",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _command_run(args)
    try:
        paths = RunPaths(args.state, args.run_id)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command == "abort":
        request_abort(paths)
        return 0
    if args.output:
        inst = Instance.parse(args.output)
        sys.stdout.write(read_output(paths, inst.step, inst.target))
        return 0
    if args.progress:
        progress = read_progress(paths)
        if progress is None:
            print(f"run {args.run_id} has not started", file=sys.stderr)
            return 1
        print(json.dumps(progress, indent=2))
        return 0
    status = read_status(paths)
    if status is None:
        print(f"no run {args.run_id} in {args.state}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        _print_table(status)
    return 0


if __name__ == "__main__":
    sys.exit(main())
