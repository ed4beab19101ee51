"""The test session's layout under pytest-xdist (`make unit` and `make test`, which run two workers).

The e2e tests share one control plane, one operator and one node per session (tests/e2e/conftest.py's
session fixtures), and the node's network bridge exists once per machine: they must all run in one
worker, in their order. The unit tests need nothing of the kind. So `--dist loadscope` gets one more
rule: the whole of tests/e2e is a single scope. The largest scope is scheduled first, so one worker
runs the e2e session from its start while the other goes through the unit tests (grouped by module, as
loadscope does, so that module-scoped fixtures such as tests/sshd.py's nodes start once), on the cores
the e2e session leaves idle while it waits on the API server, leases and steps.
"""

from __future__ import annotations

from typing import Any

import pytest

E2E = "tests/e2e/"

pytest_plugins = ("tests.e2e.console",)  # the console's fixtures (console, browser, console_page), for every e2e module


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: without it, nothing to schedule
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None  # xdist's own scheduler for the mode asked
    from xdist.scheduler import LoadScopeScheduling

    class E2eInOneScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(E2E):
                return E2E
            return str(super()._split_scope(nodeid))

    return E2eInOneScope(config, log)
