"""Inter-service relations end to end (docs/services.md, Relations): a `link` names two `site`s; it is deployed
only once both are up, and goes on when they are (told, not polled: its backstop is 10 minutes); a site it names
cannot be deleted, by kubectl or the inventory API, and the refusal names the link; a name of another namespace
is refused at apply time. No App: the entities deploy nothing, so what is measured is the lifecycle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess
from tests.e2e.test_apps import apply
from tests.e2e.test_config_api import client_certificate
from tests.e2e.test_services import API, in_state, merge, status_of
from tests.e2e.test_services_api import call
from tests.polling import wait_until


def entity(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ServiceEntity", "metadata": {"name": name, "namespace": namespace},
            "spec": {"attributes": [{"name": "name", "type": "string"}], "identity": "name", **spec}}


def instance(name: str, namespace: str, entity_name: str, **attributes: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ServiceInstance", "metadata": {"name": name, "namespace": namespace},
            "spec": {"entity": entity_name, "attributes": {"name": name, **attributes}}}


def test_a_link_waits_for_its_sites_and_a_site_it_names_cannot_go(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str, tmp_path: Path) -> None:
    # sites wait in `designed` until asked to deploy (the service lifecycle, auto_creating off)
    apply(kubectl, entity("site", namespace, lifecycle={"builtin": "service"}, config={"auto_creating": False}))
    apply(kubectl, entity("link", namespace, lifecycle={"builtin": "simple"}, interServiceRelations=[
        {"name": "sites", "entityType": "site", "lowerLimit": 2, "upperLimit": 2}]))
    kubectl("wait", "--for=condition=Ready", "-n", namespace, "--timeout", "20s", "serviceentity/site",
            "serviceentity/link")
    for site in ("site-a", "site-b"):
        apply(kubectl, instance(site, namespace, "site"))
        in_state(kubectl, namespace, site, "designed", seconds=20)

    # refused at apply time, naming the attribute: another namespace, an absent instance, the wrong entity
    foreign = apply(kubectl, instance("link-x", namespace, "link", sites=["other/site-a", "site-b"]), check=False)
    assert foreign.returncode != 0 and ("spec.attributes.sites[0]: 'other/site-a' names another namespace"
                                        in foreign.stderr), foreign.stderr
    absent = apply(kubectl, instance("link-x", namespace, "link", sites=["site-a", "site-z"]), check=False)
    assert absent.returncode != 0 and "spec.attributes.sites: no service instance 'site-z'" in absent.stderr

    # the link is validated and promoted, then its deployment waits for both sites to be up
    apply(kubectl, instance("link-1", namespace, "link", sites=["site-a", "site-b"]))

    def waiting() -> dict[str, Any] | None:
        status = status_of(kubectl, namespace, "link-1")
        reconciling = next((c for c in status.get("conditions") or [] if c["type"] == "Reconciling"), {})
        return status if reconciling.get("reason") == "WaitingForRelations" else None

    held = wait_until(waiting, 20, "link-1 waiting for its sites")
    assert held["state"] == "creating" and held["references"] == ["site-a", "site-b"]
    message = next(c["message"] for c in held["conditions"] if c["type"] == "Reconciling")
    assert "sites: site-a (state designed, not up); sites: site-b (state designed, not up)" in message
    wide = kubectl("get", "si", "link-1", "-n", namespace, "-o", "wide").stdout
    assert "REFERENCES" in wide and "site-a" in wide, wide

    for site in ("site-a", "site-b"):
        version = status_of(kubectl, namespace, site)["version"]
        merge(kubectl, namespace, site, {"spec": {"stateRequest": {"target": "creating", "currentVersion": version}}})
    # told when the sites come up: well before its backstop look (600 s)
    in_state(kubectl, namespace, "link-1", "up", seconds=20)

    # a site the link names cannot go: kubectl and the inventory API refuse, naming the link
    refused = kubectl("delete", "si", "site-a", "-n", namespace, "--wait=false", check=False)
    assert refused.returncode != 0 and ("service instance site-a is still referenced by link-1 (sites)"
                                        in refused.stderr), refused.stderr
    admin = client_certificate(operator.cluster, tmp_path, "inventory-admin", ("system:masters",))
    status, site = call(operator, admin, namespace, "GET", "/lsm/v1/service_inventory/site/site-a")
    link_uid = json.loads(kubectl("get", "si", "link-1", "-n", namespace, "-o", "json").stdout)["metadata"]["uid"]
    assert status == 200 and site["referenced_by"] == [link_uid], site
    assert site["referrers"] == [{"name": "link-1", "relation": "sites"}]
    status, body = call(operator, admin, namespace, "DELETE", "/lsm/v1/service_inventory/site/site-a")
    assert status == 409 and "still referenced by link-1 (sites)" in body["message"], body

    # once the link is gone, so may the site be
    kubectl("delete", "si", "link-1", "-n", namespace, "--timeout", "30s")
    kubectl("delete", "si", "site-a", "-n", namespace, "--timeout", "30s")
