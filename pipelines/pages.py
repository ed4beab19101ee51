"""Reading a task instance's whole output a page at a time (pure: files only, no Kubernetes).

The runner appends each instance's output, masked line by line, to `RunPaths.output_file` as the task
prints. The operator's API serves it from there to anyone allowed to read the run (GraphRuns:
`operators.graphs.output`; ActionRuns: `operators.calm.api`), a bounded page per answer and the offset of
the next one, so that a long output never makes a huge body and a live one can be followed by byte offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines.model import Instance, check_name
from pipelines.paths import RunPaths

PAGE_BYTES = 1 << 20
"""At most this much output per answer (the default and the most a caller may ask for): a page of a
long output, with the offset of the next one."""


def instance_output(paths: RunPaths, step: str, target: str, target_name: str = "target") -> Path:
    """Where the runner wrote the output of `step` on `target` ("" for none), inside the run's output directory:
    ValueError when the names are no runner names (`check_name`; `target_name` says what the caller calls the
    target: node, replica) or the file would lead out of it. Names from a URL or a status are only ever
    joined into a path through this."""
    check_name(step, "step")
    if target:
        check_name(target, target_name)
    key = Instance(step, target).key
    path = paths.output_file(key).resolve()
    if path.parent != paths.output_dir.resolve():
        raise ValueError(f"instance {key!r} leads out of the run's output directory")
    return path


@dataclass(frozen=True)
class Page:
    """`size` bytes stored in all; `text` holds bytes [offset, next_offset) (next_offset None: to the end)."""

    offset: int
    size: int
    text: str
    next_offset: int | None

    @property
    def truncated(self) -> bool:
        return self.next_offset is not None


def output_size(path: Path) -> int:
    """Bytes of output stored (0: none yet, or the instance printed nothing)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def read_page(path: Path, offset: int = 0, limit: int = PAGE_BYTES) -> Page:
    """Bytes [offset, offset + limit) of the output, cut back to a character boundary so that a page never
    splits a UTF-8 sequence (the next page starts with it; a limit smaller than one character gives that
    character whole). A missing file is an empty output."""
    limit = max(1, min(limit, PAGE_BYTES))
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            start = min(max(0, offset), size)
            handle.seek(start)
            data = handle.read(limit + 3)  # the rest of a character the limit would cut
    except FileNotFoundError:
        return Page(0, 0, "", None)
    if len(data) > limit:
        whole = _whole_characters(data[:limit])
        data = data[:whole] if whole > 0 else data[:_sequence_length(data[0])]
    end = start + len(data)
    return Page(start, size, data.decode("utf-8", errors="replace"), end if end < size else None)


def _sequence_length(lead: int) -> int:
    """How many bytes the UTF-8 sequence that `lead` starts has (1 for a byte that starts none)."""
    return 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1


def _whole_characters(data: bytes) -> int:
    """The length of the longest prefix of `data` that does not end inside a UTF-8 sequence."""
    i = len(data) - 1
    while i >= 0 and len(data) - i < 4 and (data[i] & 0xC0) == 0x80:  # continuation bytes: 10xxxxxx
        i -= 1
    if i < 0:
        return len(data)
    return len(data) if len(data) - i >= _sequence_length(data[i]) else i
