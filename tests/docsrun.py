"""The documentation, run as written (issue 27): the ```sh blocks of README.md and docs/*.md, read the way a
reader reads them and run the way a reader runs them, one terminal per page.

Reading a page (`read_page`):
- A fenced ```sh block is run; other fences (yaml, json) are not.
- A *step* is a command line with its continuation lines (a trailing backslash, an open quote) and the bodies
  of its heredocs.
- `#` lines right after a step (no blank line between) are that step's expected output; a `#` line after a
  blank line, or at the start of a block, is a comment. A ```output fence right after an sh block is the
  expected output of that block's last step.
- `<!-- docs-test: skip REASON -->` right before a fence marks a block that cannot run here; it is counted and
  reported, never silently dropped.

Running a page (`Terminal`): one bash for the whole page, so exports, aliases and `cd` carry from block to
block, as in a reader's terminal. Each step's output (stdout and stderr, as a terminal shows them) must hold
its expected lines in order; a step that fails passes only when the page shows its (error) output. Failures
name the page and line.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\b\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```\s*([\w-]*)\s*$")
HEREDOC = re.compile(r"(?<!<)<<-?(?!<)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
ELLIPSIS = "..."


@dataclass
class Step:
    """One command as the reader types it, and what the page says it prints."""

    line: int
    command: str
    expected: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Block:
    line: int
    steps: tuple[Step, ...]
    skip: str | None = None


@dataclass(frozen=True)
class Page:
    name: str
    blocks: tuple[Block, ...]

    @property
    def skipped(self) -> list[Block]:
        return [block for block in self.blocks if block.skip is not None]


class PageError(ValueError):
    """A page the runner cannot read (an unclosed fence, an unterminated heredoc): the page is wrong."""


def _unclosed_quote(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return True
    return False


def read_steps(lines: Sequence[str], first: int) -> list[Step]:
    """The steps of an sh block whose first line is line `first` of its page."""
    steps: list[Step] = []
    previous: Step | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        number = first + index
        if not line.strip():
            previous = None
            index += 1
            continue
        if line.lstrip().startswith("#"):
            if previous is not None:
                text = line.lstrip()[1:]
                previous.expected.append((number, text[1:] if text.startswith(" ") else text))
            index += 1
            continue
        command = [line]
        terminators = [match.group(2) for match in HEREDOC.finditer(line)]
        while (command[-1].endswith("\\") or _unclosed_quote("\n".join(command))) and index + 1 < len(lines):
            index += 1
            command.append(lines[index])
            terminators += [match.group(2) for match in HEREDOC.finditer(lines[index])]
        for terminator in terminators:
            while True:
                index += 1
                if index >= len(lines):
                    raise PageError(f"line {number}: the heredoc {terminator!r} is never closed")
                command.append(lines[index])
                if lines[index].strip() == terminator:
                    break
        previous = Step(number, "\n".join(command))
        steps.append(previous)
        index += 1
    return steps


def read_page(name: str, text: str) -> Page:
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    last_sh_end: int | None = None  # the line after the last sh block's closing fence
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        info, start = fence.group(1), index
        end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            raise PageError(f"{name}:{start + 1}: the ``` fence is never closed")
        body = lines[start + 1:end]
        before = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        marked = SKIP.match(before.strip())
        if info == "sh":
            skip = (marked.group(1) or "no reason given") if marked else None
            try:
                steps = read_steps(body, start + 2) if skip is None else []
            except PageError as error:
                raise PageError(f"{name}:{error}") from None
            blocks.append(Block(start + 1, tuple(steps), skip))
            last_sh_end = end + 1
        elif info == "output":
            between = lines[last_sh_end:start] if last_sh_end is not None else ["x"]
            if any(line.strip() for line in between) or not blocks or not blocks[-1].steps:
                raise PageError(f"{name}:{start + 1}: an ```output block must follow a run sh block directly")
            blocks[-1].steps[-1].expected.extend((start + 2 + i, line) for i, line in enumerate(body))
        index = end + 1
    return Page(name, tuple(blocks))


def _normal(text: str) -> str:
    return " ".join(text.split())


def unmatched(expected: Sequence[tuple[int, str]], output: str) -> tuple[int, str] | None:
    """The first expected line that the output does not hold (in order), or None when all are there.

    Each expected line, whitespace collapsed, must be a substring of a later output line than the previous
    one's; `...` stands for anything."""
    lines = [_normal(line) for line in output.splitlines()]
    position = 0
    for number, want in expected:
        parts = [re.escape(part) for part in _normal(want).split(ELLIPSIS)]
        pattern = re.compile(".*".join(parts))
        while position < len(lines) and not pattern.search(lines[position]):
            position += 1
        if position == len(lines):
            return number, want
        position += 1
    return None


class StepFailed(AssertionError):
    pass


class Terminal:
    """A reader's terminal: one bash, fed step by step; each step's output and exit code are collected."""

    def __init__(self, cwd: Path, env: Mapping[str, str], scratch: Path) -> None:
        self._scratch = scratch
        self._bash = subprocess.Popen(
            ["bash", "--norc", "--noprofile"], cwd=cwd, env=dict(env), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send("shopt -s expand_aliases\nset -o pipefail\n")
        self._count = 0

    def _read(self) -> None:
        assert self._bash.stdout is not None
        for line in self._bash.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, text: str) -> None:
        assert self._bash.stdin is not None
        self._bash.stdin.write(text)
        self._bash.stdin.flush()

    def run(self, command: str, timeout: float) -> tuple[int, str]:
        """Run one step as the page's shell would (sourced: aliases, exports and cwd stay), stdin closed."""
        self._count += 1
        script = self._scratch / f"step-{self._count}.sh"
        script.write_text(command + "\n")
        marker = f"__docs_step_{uuid.uuid4().hex}__"
        self._send(f"source {shlex.quote(str(script))} </dev/null 2>&1; printf '\\n{marker} %s\\n' \"$?\"\n")
        output: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise StepFailed(f"did not finish within {timeout:.0f} s; its output:\n{''.join(output)}") from None
            if line is None:
                raise StepFailed(f"the shell exited; the output:\n{''.join(output)}")
            if line.startswith(marker):
                return int(line.split()[1]), "".join(output)[:-1]  # less the newline printed before the marker
            output.append(line)

    def close(self) -> None:
        if self._bash.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._bash.pid, signal.SIGKILL)
        self._bash.wait(timeout=10)


def run_page(page: Page, terminal: Terminal, timeout: float = 180.0) -> Iterator[Step]:
    """Run every step of a page in order; raise StepFailed naming the page and line of the first that fails.
    Yields each step once it passed (for progress output)."""
    for block in page.blocks:
        if block.skip is not None:
            continue
        for step in block.steps:
            try:
                code, output = terminal.run(step.command, timeout)
            except StepFailed as error:
                raise StepFailed(f"{page.name}:{step.line}: {step.command}\n{error}") from None
            missing = unmatched(step.expected, output)
            if missing is not None:
                number, want = missing
                raise StepFailed(f"{page.name}:{number}: the output of\n  {step.command}\n(exit {code}) has no line "
                                 f"matching\n  {want}\nafter the ones before it; it printed:\n{output}")
            if code != 0 and not step.expected:
                raise StepFailed(f"{page.name}:{step.line}: {step.command}\nexited {code}; it printed:\n{output}")
            yield step
