"""The console's topology part in a real browser (issue 29): an Environment's diff between two versions of a
layer, an App's topology with its macro edges marked, and a graph type's dry plan over chosen nodes with an
edge to a node left out. One namespace for the three: the configuration store's (`store`, from
test_config_api: its examples and ServiceAccounts), with the graphs example and the three-tier blueprint and
an App added; the user is a tenant (`console_user`: edit, and Stead's kinds) signed in with its token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import ROOT, Kubectl, OperatorProcess
from tests.e2e.console import ConsoleProcess, OpenConsole, console_user, screenshot
from tests.e2e.test_config_api import P, Store, store, wait_version  # noqa: F401  (store: the fixture)
from tests.polling import wait_until


def documents(name: str, namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d and d["kind"] != "GraphRun"]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return docs


@pytest.fixture(scope="module")
def lab(store: Store, kubectl: Kubectl, operator: OperatorProcess) -> Iterator[tuple[str, str]]:  # noqa: F811
    """The store's namespace with a second version of the root's astute values, the graphs example (its
    Environment graphs-demo and two graphs) and an App of the three-tier blueprint; a tenant's token."""
    namespace = store.namespace
    status, _, _ = store.http("PUT", f"{P}/environments/env-1/resources/astute/values?key=nova.workers",
                              store.writer, 6)
    assert status == 200
    for doc in [*documents("graph-environment.yaml", namespace), *documents("blueprint-three-tier.yaml", namespace)]:
        kubectl("apply", "-f", "-", input=json.dumps(doc))
    kubectl("wait", "-n", namespace, "--timeout=60s", "--for=condition=Ready", "blueprint/three-tier",
            "environment/graphs-demo", "deploymentgraph/mitaka-default")
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "stead.dev/v1alpha1", "kind": "App", "metadata": {"name": "shop", "namespace": namespace},
        "spec": {"blueprint": "three-tier"}}))
    wait_version(kubectl, namespace, "astute", 2)
    yield namespace, console_user(kubectl, namespace)


def test_a_config_diff_between_two_versions_is_shown_as_text(
        console: ConsoleProcess, console_page: OpenConsole, lab: tuple[str, str], tmp_path: Path) -> None:
    namespace, token = lab
    page = console_page(token, f"#/ns/{namespace}/environments/env-1")
    page.get_by_test_id("config-point").select_option("role=controller,node=node-1.domain.tld")
    page.get_by_test_id("config-show").click()
    row = page.get_by_test_id("config-trace-row").filter(has_text="nova.workers")
    row.wait_for()
    assert "astute-node-1-overrides" in row.inner_text() and "16" in row.inner_text()
    page.get_by_test_id("config-layer").select_option(label="astute: astute values at (root)")
    page.get_by_test_id("config-versions").click()
    page.get_by_test_id("config-compare").click()
    diff = page.get_by_test_id("config-diff")
    wait_until(lambda: "->" in diff.inner_text(), 30, "the diff of versions 1 and 2")
    assert diff.inner_text().splitlines() == ["values of astute at (root): version 1 -> version 2",
                                              "~ nova.workers: 4 -> 6"]
    screenshot(page, "environment", tmp_path)


def test_an_apps_topology_is_drawn_with_its_macro_edges_marked(
        console: ConsoleProcess, console_page: OpenConsole, lab: tuple[str, str], tmp_path: Path) -> None:
    namespace, token = lab
    page = console_page(token, f"#/ns/{namespace}/apps/shop")
    page.get_by_test_id("topology-svg").wait_for()
    implicit, explicit = page.get_by_test_id("edge-implicit"), page.get_by_test_id("edge-explicit")
    ends = {(implicit.nth(i).get_attribute("data-from"), implicit.nth(i).get_attribute("data-to"))
            for i in range(implicit.count())}
    assert ends == {("Service/App", "Service/DB"), ("Service/Web", "Service/App")}
    assert explicit.count() == 2 and page.get_by_test_id("macro-label").count() == 2

    def dashes(edge: Any) -> str:
        return str(edge.evaluate("e => getComputedStyle(e).strokeDasharray"))

    assert dashes(implicit.first) not in ("", "none") and dashes(explicit.first) == "none"  # marked apart
    assert page.get_by_test_id("node-Service/DB").is_visible()
    screenshot(page, "app", tmp_path)


def test_a_dry_plan_over_chosen_nodes_draws_the_edge_to_a_node_left_out(
        console: ConsoleProcess, console_page: OpenConsole, kubectl: Kubectl, lab: tuple[str, str],
        tmp_path: Path) -> None:
    namespace, token = lab
    page = console_page(token, f"#/ns/{namespace}/deploymentgraphs/mitaka-default")
    page.get_by_test_id("plan-environment").select_option("graphs-demo")
    page.get_by_test_id("plan-node-node-1").uncheck()
    page.get_by_test_id("plan-node-node-3").uncheck()
    page.get_by_test_id("plan-run").click()
    page.get_by_test_id("plan-svg").wait_for(timeout=60_000)
    outside = page.get_by_test_id("plan-edge-outside")
    ends = {(outside.nth(i).get_attribute("data-from"), outside.nth(i).get_attribute("data-to"))
            for i in range(outside.count())}
    assert ("default:compute-service:node-2", "outside:database@node-1") in ends
    assert page.get_by_test_id("plan-box-planned").count() == 1  # compute-service on node-2, nothing else
    assert "compute-service@node-2 -> database@node-1" in page.get_by_test_id("plan-outside-list").inner_text()
    runs = json.loads(kubectl("get", "graphruns", "-n", namespace, "-o", "json").stdout)["items"]
    assert runs == []  # a dry plan in the console creates no run
    screenshot(page, "deploymentgraph", tmp_path)
