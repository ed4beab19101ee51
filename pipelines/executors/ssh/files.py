"""The runner-side half of `ssh.copy_files` and `ssh.sync`: which of the runner's files a step may send.

Those sources are read on the runner's host, that is in the operator's pod, where the service
account token, the vault key and the state of every run live. A tenant's task must not be able to
ship them to a node it controls, so sources are allowed only under a files root the operator
configures (``--ssh-files-root``; none by default, and then these steps fail saying so). A source
is a path relative to that root (an absolute path must lie inside it): ``..`` components are
refused outright, and the path is resolved (symlinks followed) and must still be inside the root,
so a link planted under the root cannot point outside it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from pipelines.executors.base import ParameterError, StepContext, StepFailed


def source(ctx: StepContext, root: Path | None, raw: str, *, directory_ok: bool) -> Path:
    """The resolved runner path of a source, or a failure naming the step and the source."""
    if root is None:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: copy_files and sync read files on the runner "
                             "and need a files root (the runner's --ssh-files-root); none is configured")
    if not raw:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: an empty source path")
    pure = PurePosixPath(raw)
    if ".." in pure.parts:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: source {raw!r} has a '..' component")
    base = root.resolve()
    candidate = Path(raw) if pure.is_absolute() else base / raw
    if pure.is_absolute() and not any(candidate.is_relative_to(r) for r in (root.absolute(), base)):
        # judged before looking at the disk: whether a file outside the root exists is not for tenants to learn
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: source {raw!r} is outside the files root")
    try:
        resolved = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        raise StepFailed(f"{ctx.step_type} step {ctx.step_id!r}: source {raw!r} does not exist under the files "
                         "root") from None
    if resolved != base and not resolved.is_relative_to(base):
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: source {raw!r} is outside the files root")
    if resolved.is_dir() and not directory_ok:
        raise ParameterError(f"{ctx.step_type} step {ctx.step_id!r}: source {raw!r} is a directory (copy_files "
                             "copies files; sync copies directories)")
    return resolved


def read(path: Path, limit: int) -> bytes:
    """A regular file's content; the final component is opened without following a link (a link swapped
    in after the check is refused), and a file larger than `limit` is refused rather than loaded."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise StepFailed(f"{path.name} is {size} bytes, more than copy_files sends ({limit}); use sync")
        return fh.read(limit + 1)
