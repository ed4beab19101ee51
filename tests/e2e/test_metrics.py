"""`/metrics` of a real operator process: reconcile histograms, queue gauges, and the config API's requests."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

from tests.e2e.conftest import Kubectl, OperatorProcess, env_manifest
from tests.polling import wait_until


def test_reconciles_are_timed_per_kind_and_queues_shown(operator: OperatorProcess, kubectl: Kubectl,
                                                        namespace: str) -> None:
    before = operator.metric("stead_reconcile_duration_seconds_count", kind="Environment")
    kubectl("apply", "-f", "-", input=env_manifest("timed", namespace))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "60s", "environment/timed")
    wait_until(lambda: operator.metric("stead_reconcile_duration_seconds_count", kind="Environment") > before,
               10, "the reconcile observed")
    assert operator.metric("stead_reconcile_duration_seconds_bucket", kind="Environment", le="+Inf") > before
    wait_until(lambda: operator.metric("stead_reconcile_queue_depth", kind="Environment") == 0, 10,
               "an empty queue once Ready")


def test_config_api_requests_are_counted_by_method_and_code(operator: OperatorProcess) -> None:
    labels = {"api": "config-api", "method": "GET", "code": "401"}
    before = operator.metric("stead_api_requests_total", **labels)
    context = ssl.create_default_context(cafile=str(operator.store.parent / "config-api" / "ca.crt"))
    url = f"https://127.0.0.1:{operator.config_api_port}/api/v1/config/components?namespace=default"
    try:
        urllib.request.urlopen(url, context=context, timeout=10).close()
        code = 200
    except urllib.error.HTTPError as error:  # no token
        code = error.code
    assert code == 401
    assert operator.metric("stead_api_requests_total", **labels) == before + 1
    assert operator.metric("stead_api_request_duration_seconds_count", api="config-api", method="GET") >= 1
