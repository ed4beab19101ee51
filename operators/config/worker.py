"""A process of its own serving the configuration API: `python -m operators.config.worker ARGUMENT`.

Started by the operator (`stead run --config-api-workers N`) through
`operators.runtime.serving.workers.WorkerPool`, never by hand: ARGUMENT is
`ConfigApiServer.worker_argument()`. It logs to standard error like the operator does, with
its worker index, and stops at the end of its standard input.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys

from operators.config.server import ConfigApiServer
from operators.runtime.kube.client import KubeClient, load_access
from operators.runtime.serving.eventloop import event_loop_factory, freeze_startup_objects
from operators.runtime.serving.workers import serve_until_told


async def serve(server: ConfigApiServer) -> None:
    async with KubeClient(load_access(server.kubeconfig)) as kube, contextlib.AsyncExitStack() as stack:
        await server.serve(kube, stack)  # several workers on one port: SO_REUSEPORT (granian)
        freeze_startup_objects()
        await serve_until_told()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m operators.config.worker ARGUMENT (started by `stead run`)", file=sys.stderr)
        return 2
    server, level = ConfigApiServer.for_worker(argv[0])
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s %(levelname)s %(name)s[worker {os.environ.get('STEAD_WORKER', '?')}]: %(message)s",
    )
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(serve(server))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
