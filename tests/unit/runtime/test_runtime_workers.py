"""The worker pool with real child processes: start, READY, graceful stop, restart, failures."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from operators.runtime.serving.workers import WorkerFailed, WorkerPool
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[3]

# A worker as the protocol wants one: READY once serving, stops at the end of its input. It
# records its index at start and "stopped" when it stops gracefully.
WORKER = """
import asyncio, os, sys
sys.path.insert(0, {root!r})
from operators.runtime.serving.workers import serve_until_told
record = open(os.path.join({where!r}, os.environ["STEAD_WORKER"] + "." + str(os.getpid())), "w")
record.write("started\\n"); record.flush()
asyncio.run(serve_until_told())
record.write("stopped\\n"); record.flush()
"""


def command(where: Path) -> list[str]:
    return [sys.executable, "-c", WORKER.format(root=str(ROOT), where=str(where))]


def records(where: Path) -> dict[int, str]:
    """pid -> what the worker recorded, for every worker that ever started."""
    return {int(path.suffix[1:]): path.read_text() for path in where.iterdir()}


def indexes(where: Path) -> list[str]:
    """The STEAD_WORKER of every worker that ever started."""
    return [path.name.split(".")[0] for path in where.iterdir()]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # not a zombie
    except FileNotFoundError:
        return False


async def until(condition: Callable[[], bool], seconds: float = 20) -> None:
    """Poll `condition` until it holds, failing after `seconds`."""
    async with asyncio.timeout(seconds):
        while True:
            if condition():
                return
            await asyncio.sleep(0.02)


async def start_and_kill_one(pool: WorkerPool) -> int:
    """Start the pool, SIGKILL its first worker, and return that worker's pid."""
    await pool.start()
    first = pool.pids[0]
    os.kill(first, signal.SIGKILL)
    return first


def test_workers_start_serving_and_stop_gracefully(tmp_path: Path) -> None:
    async def scenario() -> None:
        pool = WorkerPool("test", command(tmp_path), count=2)
        await pool.start()
        pids = pool.pids
        assert len(set(pids)) == 2 and all(alive(pid) for pid in pids)
        assert sorted(indexes(tmp_path)) == ["0", "1"]  # STEAD_WORKER tells them apart
        await pool.stop()
        assert not any(alive(pid) for pid in pids)
        assert records(tmp_path) == {pid: "started\nstopped\n" for pid in pids}  # ended by end of input, not killed

    asyncio.run(scenario())


def test_a_worker_that_dies_is_started_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        pool = WorkerPool("test", command(tmp_path), count=2, restart_delay=0.05)
        first = await start_and_kill_one(pool)
        second = pool.pids[1]
        await until(lambda: pool.restarts == 1)
        assert pool.pids[1] == second and pool.pids[0] != first and alive(pool.pids[0])
        await pool.stop()

    asyncio.run(scenario())


def ignored_signals(pid: int) -> set[int]:
    """The signals a process ignores, from the SigIgn mask the kernel shows."""
    mask = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("SigIgn:")), 16)
    return {number for number in range(1, 65) if mask & (1 << (number - 1))}


def test_ctrl_c_in_the_terminal_leaves_the_workers_to_the_operator(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: workers ignore SIGINT, the operator stops them in order."""
    async def scenario() -> None:
        pool = WorkerPool("test", command(tmp_path), count=1)
        await pool.start()
        (pid,) = pool.pids
        assert signal.SIGINT in ignored_signals(pid)
        await pool.stop()

    asyncio.run(scenario())


def test_a_worker_that_exits_before_serving_fails_the_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        pool = WorkerPool("test", [sys.executable, "-c", "import sys; sys.exit(3)"], count=2)
        with pytest.raises(WorkerFailed, match="test worker 0 exited with code 3 before serving"):
            await pool.start()
        assert pool.pids == []

    asyncio.run(scenario())


def test_a_worker_that_never_serves_is_killed_and_fails_the_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        pid_file = tmp_path / "pid"
        hang = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
        pool = WorkerPool("test", [sys.executable, "-c", hang], count=1, ready_timeout=1, stop_timeout=0.2)
        with pytest.raises(WorkerFailed, match="was not serving after 1 s"):
            await pool.start()
        assert not alive(int(pid_file.read_text()))

    asyncio.run(scenario())


def test_workers_do_not_outlive_a_killed_operator(tmp_path: Path) -> None:
    """SIGKILL gives the operator no chance to stop them: the end of their input does."""
    operator = f"""
import asyncio, sys
sys.path.insert(0, {str(ROOT)!r})
from operators.runtime.serving.workers import WorkerPool
async def main():
    pool = WorkerPool("test", {command(tmp_path)!r}, count=2)
    await pool.start()
    print(*pool.pids, flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""
    parent = subprocess.Popen([sys.executable, "-c", operator], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    parent.kill()
    parent.wait()
    wait_until(lambda: not any(alive(pid) for pid in pids), 20, "the workers to exit")
    assert records(tmp_path) == {pid: "started\nstopped\n" for pid in pids}


def test_stopping_while_a_worker_restarts_leaves_nothing_behind(tmp_path: Path) -> None:
    slow = WORKER.replace('record.write("started',  # the second start, and later ones, take 1.5 s
                          'import time; time.sleep(1.5 if len(os.listdir({where!r})) > 1 else 0)\n'
                          'record.write("started')
    assert slow != WORKER

    async def scenario() -> None:
        pool = WorkerPool("test", [sys.executable, "-c", slow.format(root=str(ROOT), where=str(tmp_path))],
                          count=1, restart_delay=0.01)
        await start_and_kill_one(pool)
        await until(lambda: len(records(tmp_path)) == 2)  # the second one is starting, slowly
        await pool.stop()
        assert not any(alive(pid) for pid in records(tmp_path))

    asyncio.run(scenario())


FLAKY = """
import asyncio, os, sys
sys.path.insert(0, {root!r})
from operators.runtime.serving.workers import serve_until_told
with open({counter!r}, "a") as counter:
    counter.write("x")
if os.path.getsize({counter!r}) in (2, 3):  # the second and third starts fail before serving
    sys.exit(3)
asyncio.run(serve_until_told())
"""


def test_a_worker_that_cannot_start_again_is_retried_with_a_growing_delay(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    counter = tmp_path / "starts"

    async def scenario() -> None:
        pool = WorkerPool("test", [sys.executable, "-c", FLAKY.format(root=str(ROOT), counter=str(counter))],
                          count=1, restart_delay=0.05)
        first = await start_and_kill_one(pool)
        await until(lambda: pool.restarts == 1)
        assert alive(pool.pids[0]) and pool.pids[0] != first
        await pool.stop()

    with caplog.at_level(logging.ERROR, logger="operators.runtime.serving.workers"):
        asyncio.run(scenario())
    assert counter.read_text() == "xxxx"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "test worker 0 exited with code 3 before serving; trying again in 0.1 s",
        "test worker 0 exited with code 3 before serving; trying again in 0.2 s"]
