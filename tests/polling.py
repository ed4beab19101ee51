"""Waiting for something observable, with a deadline: the tests' only way to synchronise."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any], seconds: float = 15.0, what: str = "condition", interval: float = 0.02
) -> Any:
    """Poll `predicate` until it returns something truthy (and return that), or fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:.0f}s waiting for {what}")
        time.sleep(interval)
