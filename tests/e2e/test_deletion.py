"""Deleted objects, and deleted namespaces, leave every queue of the operator at once.

Before: after a namespace holding ConfigValues was deleted, the operator kept retrying them
("Environment "c8-env" not found (retry 37 in 10.0s)") until it was stopped: a retry armed by a
reconcile that was running when the DELETED event arrived re-armed itself with the stale body.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess
from tests.e2e.test_apps import app, blueprint, small_spec
from tests.polling import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def values(name: str, environment: str, node: str) -> str:
    return json.dumps({
        "apiVersion": "stead.dev/v1alpha1", "kind": "ConfigValues", "metadata": {"name": name},
        "spec": {"environment": environment, "resource": "astute", "level": {"node": node},
                 "data": {"nova": {"workers": 2}}}})


def test_a_deleted_namespace_leaves_no_retry_behind(operator: OperatorProcess, kubectl: Kubectl) -> None:
    def pending() -> float:
        return operator.metric("stead_reconcile_retries_pending", kind="ConfigValues")

    # not the fixture's: this test deletes it itself; its scripts are trusted (t-test-app*) for the launched App
    namespace = f"t-test-app-deleted-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", namespace)
    baseline = pending()
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "config-environment.yaml"),
            "-f", str(EXAMPLES / "config-component.yaml"))
    for i in (1, 2, 3):  # Ready ones, re-checked while the namespace goes (its Environment goes first or not)
        kubectl("apply", "-n", namespace, "-f", "-", input=values(f"ready-{i}", "env-1", f"node-{i}"))
    for i in range(6):  # waiting for an Environment that never comes
        kubectl("apply", "-n", namespace, "-f", "-", input=values(f"orphan-{i}", "c8-env", f"node-{i}"))
    kubectl("wait", "-n", namespace, "--timeout=60s", "--for=condition=Ready", "cv/ready-1", "cv/ready-2", "cv/ready-3")
    # mid-retry: an App of an Inactive blueprint waits for it, with a retry scheduled
    apps_pending = operator.metric("stead_reconcile_retries_pending", kind="App")
    inactive = blueprint("idle", namespace, small_spec())
    inactive["spec"]["active"] = False
    kubectl("apply", "-f", "-", input=json.dumps(inactive))
    kubectl("wait", "-n", namespace, "--timeout=30s", "--for=condition=Ready", "blueprint/idle")
    kubectl("apply", "-f", "-", input=json.dumps(app("waits", namespace, "idle")))
    wait_until(lambda: operator.metric("stead_reconcile_retries_pending", kind="App") > apps_pending, 30,
               "the App's retry to be scheduled")
    # a launched App: its delete action cannot run in a namespace being deleted, and the Namespace says so
    kubectl("apply", "-f", "-", input=json.dumps(blueprint("small", namespace, small_spec())))
    kubectl("wait", "-n", namespace, "--timeout=30s", "--for=condition=Ready", "blueprint/small")
    kubectl("apply", "-f", "-", input=json.dumps(app("launched", namespace, "small")))
    kubectl("wait", "-n", namespace, "--timeout=60s", "--for=condition=Ready", "app/launched")

    kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s")

    def skipped() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(kubectl(
            "get", "events", "-n", "default", "-o", "json", "--field-selector",
            f"involvedObject.kind=Namespace,involvedObject.name={namespace}").stdout)["items"]
        return found

    events = wait_until(skipped, 30, "the Event on the Namespace that the App's delete action was skipped")
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "AppDeleteActionSkipped")], events
    assert events[0]["message"].startswith(f"app launched: its delete action was not run, as namespace {namespace}")
    wait_until(lambda: pending() <= baseline, 30, "no retry left for the deleted namespace's objects")
    wait_until(lambda: operator.metric("stead_reconcile_retries_pending", kind="App") <= apps_pending, 30,
               "the App's retry gone with it")


def test_config_values_wait_for_their_environment_stalled_not_polled(operator: OperatorProcess, kubectl: Kubectl,
                                                                    namespace: str) -> None:
    """Before: retried every 10 s for ever ("Environment "c8-env" not found (retry 37 in 10.0s)")."""
    def pending() -> float:
        return operator.metric("stead_reconcile_retries_pending", kind="ConfigValues")

    baseline = pending()
    kubectl("apply", "-n", namespace, "-f", "-", input=values("early", "env-1", "node-1"))
    kubectl("wait", "-n", namespace, "--timeout=30s", "--for=condition=Stalled", "cv/early")
    status = json.loads(kubectl("get", "cv", "early", "-n", namespace, "-o", "json").stdout)["status"]
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "EnvironmentNotFound"
    assert stalled["message"] == 'spec.environment: no Environment "env-1" in this namespace (checked again when it ' \
                                 "appears)"
    assert pending() <= baseline  # nothing on a timer
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "config-environment.yaml"),
            "-f", str(EXAMPLES / "config-component.yaml"))
    kubectl("wait", "-n", namespace, "--timeout=60s", "--for=condition=Ready", "cv/early")
