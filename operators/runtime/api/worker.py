"""A process of its own serving the API: what `python -m operators.apiworker ARGUMENT` runs, given the
extensions by that module (the entry-point layer, which knows the domains).

Started by the operator (`stead run --config-api-workers N`) through
`operators.runtime.serving.workers.WorkerPool`, never by hand: ARGUMENT is
`ApiServer.worker_argument()`. It logs to standard error like the operator does, with
its worker index, and stops at the end of its standard input.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys

from operators.runtime.api.extension import ExtensionFactory
from operators.runtime.api.server import ApiServer
from operators.runtime.kube.client import KubeClient, load_access
from operators.runtime.serving.eventloop import event_loop_factory, freeze_startup_objects
from operators.runtime.serving.workers import serve_until_told


async def serve(server: ApiServer) -> None:
    async with KubeClient(load_access(server.kubeconfig)) as kube, contextlib.AsyncExitStack() as stack:
        await server.serve(kube, stack)  # several workers on one port: SO_REUSEPORT (granian)
        freeze_startup_objects()
        await serve_until_told()


def main(argv: list[str], extensions: tuple[ExtensionFactory, ...]) -> int:
    """Serve `extensions` as `argv`'s one argument says."""
    if len(argv) != 1:
        print("usage: python -m operators.apiworker ARGUMENT (started by `stead run`)", file=sys.stderr)
        return 2
    server, level = ApiServer.for_worker(argv[0], extensions)
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s %(levelname)s %(name)s[worker {os.environ.get('STEAD_WORKER', '?')}]: %(message)s",
    )
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(serve(server))
    return 0
