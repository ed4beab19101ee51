"""Embedded entities end to end (docs/services.md, `## Embedded entities`): an entity whose attribute is a
list of embedded items, on the real control plane through kubectl. Its rules are unit-tested in
tests/unit/lsm/test_embedded.py; this shows the webhook and the pipeline apply them."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess
from tests.e2e.test_apps import apply
from tests.e2e.test_services import API, in_state, merge, si


def router(namespace: str, protocol: str = "tcp", key: tuple[str, ...] = ("number",)) -> dict[str, Any]:
    """An entity with a list of ports (keyed by number, `protocol` defaulting to `protocol`) and no
    realization: its instances go up at once (nothing is deployed)."""
    ports = {"name": "ports", "type": "list", "modifier": "rw+", "embedded": {"key": list(key), "attributes": [
        {"name": "number", "type": "int"},
        {"name": "protocol", "type": "string", "modifier": "rw+", "default": protocol},
        {"name": "label", "type": "string", "modifier": "rw+", "optional": True},
    ]}}
    return {"apiVersion": API, "kind": "ServiceEntity", "metadata": {"name": "router", "namespace": namespace},
            "spec": {"attributes": [{"name": "name", "type": "string"}, ports], "identity": "name",
                     "lifecycle": {"builtin": "simple"}}}


def test_an_embedded_list_is_checked_by_path_and_updated_item_by_item(kubectl: Kubectl, namespace: str,
                                                                     operator: OperatorProcess) -> None:
    # a bad definition is refused at apply time, naming its field
    refused = apply(kubectl, router(namespace, key=()), check=False)
    assert refused.returncode != 0
    assert "spec.attributes[1].embedded.key: a list of embedded items needs a key" in refused.stderr
    apply(kubectl, router(namespace))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "30s", "serviceentity/router")

    # create: each item gets its defaults
    ports = [{"number": 22}, {"number": 80, "label": "web"}, {"number": 443}]
    apply(kubectl, {"apiVersion": API, "kind": "ServiceInstance", "metadata": {"name": "edge", "namespace": namespace},
                    "spec": {"entity": "router", "attributes": {"name": "edge", "ports": ports}}})
    up = in_state(kubectl, namespace, "edge", "up", 30)
    before = up["activeAttributes"]["ports"]
    assert before == [{"number": 22, "protocol": "tcp"}, {"number": 80, "label": "web", "protocol": "tcp"},
                      {"number": 443, "protocol": "tcp"}]

    # the entity's default changes; an update of one item leaves the others exactly as they were (tcp),
    # and a new item gets today's default
    apply(kubectl, router(namespace, protocol="udp"))
    version = up["version"]
    merge(kubectl, namespace, "edge", {"spec": {"currentVersion": version, "attributes": {"ports": [
        {"number": 22}, {"number": 80, "label": "site"}, {"number": 443}, {"number": 8080}]}}})
    up = in_state(kubectl, namespace, "edge", "up", 30, version_above=version)
    after = up["activeAttributes"]["ports"]
    assert after[0] == before[0] and after[2] == before[2]  # untouched
    assert after[1] == {"number": 80, "label": "site", "protocol": "tcp"}  # only the label changed
    assert after[3] == {"number": 8080, "protocol": "udp"}
    assert up["rollbackAttributes"]["ports"] == before

    # refused at apply time, naming the item: a key changed in place, a bad nested value
    version = up["version"]
    wanted = si(kubectl, namespace, "edge")["spec"]["attributes"]
    for ports, message in (
        ([{"number": 22}, {"number": 81, "label": "site"}, {"number": 443}, {"number": 8080}],
         "spec.attributes.ports[1]: the key of an item cannot change (from number=80 to number=81)"),
        ([{"number": 22}, {"number": 80, "label": "site"}, {"number": "https"}, {"number": 8080}],
         "spec.attributes.ports[2].number: expected int, got string"),
    ):
        refused = merge(kubectl, namespace, "edge", {"spec": {"currentVersion": version,
                                                              "attributes": {"ports": ports}}}, check=False)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    assert si(kubectl, namespace, "edge")["spec"]["attributes"] == wanted  # nothing stored
    assert si(kubectl, namespace, "edge")["status"]["version"] == version
