"""What the `stead` commands that talk to the cluster share (`stead app`, `stead actionrun`, `stead service`,
`stead graph`, ...): a client from the kubeconfig, and one line on stderr with exit code 1 for every refusal
(an API error, an unreachable API server, an unusable kubeconfig, a malformed argument), never a traceback.

Imports are made when a command runs: `stead --help` and the commands that need no cluster must not pay
for them. The client is the light one (`operators.runtime.kube.light`: the standard library's HTTP), never
aiohttp or the `kubernetes` package, unless the kubeconfig is of a form only that package reads.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operators.runtime.kube.api import HeaderRequester


class CommandError(Exception):
    """A one-line refusal of a command itself (no such object, a malformed argument)."""


def run_to_end(body: Coroutine[Any, Any, int]) -> int:
    """`body`'s exit code, run without an event loop. A command's coroutine awaits only the light client, whose
    calls never suspend, and `pause`: importing asyncio and starting a loop for it would be a third of what
    is left of a command's start-up (issue 27). A coroutine that does suspend (it awaited an event loop's
    future) cannot go on here: a RuntimeError says so."""
    try:
        body.send(None)
    except StopIteration as done:
        return int(done.value)
    body.close()
    raise RuntimeError("a stead command awaited an event loop's future; commands wait with `pause`")


async def pause(seconds: float) -> None:
    """A command's wait between two looks at what it follows (-f): the command is all there is to run, so a
    plain sleep (asyncio's would need an event loop, see `run_to_end`)."""
    time.sleep(seconds)  # noqa: ASYNC251 -- no event loop runs (`run_to_end`): nothing else to let run


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def cluster_arguments(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int],
                      output: bool = False) -> None:
    """The arguments every cluster command takes (-n, --kubeconfig, and -o for those that print objects),
    and the function that runs it."""
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("--kubeconfig", type=Path)
    if output:
        parser.add_argument("-o", "--output", choices=["json", "yaml"], help="print the objects as they are")
    parser.set_defaults(func=run)


def pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """`NAME=VALUE` arguments (`--input`, `--attr`, ...) as a dict; CommandError naming `what` otherwise."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"{what} must be NAME=VALUE, not {item!r}")
        out[key] = value
    return out


async def refusals_as_lines(command: str, body: Awaitable[int]) -> int:
    """`body`'s exit code; a CommandError or an API error is one line on stderr (`<command>: ...`) and 1."""
    from operators.runtime.kube.api import ApiError

    try:
        return int(await body)
    except CommandError as error:
        print(f"{command}: {one_line(str(error))}", file=sys.stderr)
    except ApiError as error:
        print(f"{command}: {one_line(error.message)}", file=sys.stderr)
    return 1


async def with_cluster(command: str, kubeconfig: Path | None,
                       handler: Callable[[HeaderRequester], Awaitable[int]]) -> int:
    """Run `handler` with a client of the cluster the kubeconfig names (None: the usual lookup)."""
    from operators.runtime.kube.kubeconfig import KubeconfigError
    from operators.runtime.kube.light import LightClient, load_cluster_access

    try:
        access = load_cluster_access(kubeconfig)
    except (KubeconfigError, OSError) as error:
        print(f"{command}: no usable kubeconfig: {one_line(str(error))}", file=sys.stderr)
        return 1
    async with LightClient(access) as kube:
        try:
            return await refusals_as_lines(command, handler(kube))
        except BrokenPipeError:
            raise  # stdout's reader went away (`| head -1`): no API error; `stead` ends quietly
        except OSError as error:
            print(f"{command}: cannot reach the API server at {access.server}: {one_line(str(error))}",
                  file=sys.stderr)
            return 1
