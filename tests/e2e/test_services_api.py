"""The service inventory HTTP API end to end: the `simple` lifecycle walked through `/lsm/v1` on the operator's
configuration API server (TLS, a client certificate of the cluster's client CA as the admin), with the real API
server, admission webhook and operator behind it."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl, OperatorProcess, api_call
from tests.e2e.test_config_api import client_certificate
from tests.e2e.test_services import catalog, in_state
from tests.polling import wait_until

INV = "/lsm/v1/service_inventory/greeter"


def call(operator: OperatorProcess, cert: tuple[Path, Path], namespace: str, method: str, path: str,
         body: Any = None, query: str = "") -> tuple[int, Any]:
    """`api_call`, the answer's `data` unwrapped from Inmanta's envelope (which every success has)."""
    status, answer = api_call(operator, cert, namespace, method, path, body, query)
    if status >= 400:
        return status, answer
    assert isinstance(answer, dict) and "data" in answer, answer  # Inmanta's envelope
    return status, answer["data"] if set(answer) == {"data"} else answer


def test_app_service_api_walks_the_simple_lifecycle(operator: OperatorProcess, kubectl: Kubectl, namespace: str,
                                                    tmp_path: Path) -> None:
    admin = client_certificate(operator.cluster, tmp_path, "inventory-admin", ("system:masters",))
    catalog(kubectl, namespace)

    # create -> up
    status, created = call(operator, admin, namespace, "POST", INV,
                           {"attributes": {"name": "db-1", "who": "one", "region": "eu"}})
    assert status == 201, created
    assert created["name"] == "db-1" and created["service_entity"] == "greeter"
    assert (created["version"], created["state"]) == (1, "start")  # as Inmanta answers a creation
    in_state(kubectl, namespace, "db-1", "up")
    status, listed = call(operator, admin, namespace, "GET", INV, query="filter.state=up&limit=5")
    assert status == 200 and [i["name"] for i in listed["data"]] == ["db-1"] and listed["metadata"]["total"] == 1
    status, up = call(operator, admin, namespace, "GET", f"{INV}/name=db-1")
    assert status == 200 and up["state"] == "up" and up["version"] == 4 and up["id"] == created["id"]
    assert up["active_attributes"]["who"] == "one" and up["service_identity_attribute_value"] == "db-1"

    # update -> up: the rollback set holds the old values
    status, body = call(operator, admin, namespace, "PATCH", f"{INV}/db-1",
                        {"current_version": 4, "attributes": {"who": "two"}})
    assert status == 200, body
    after = in_state(kubectl, namespace, "db-1", "up", version_above=4)
    status, up = call(operator, admin, namespace, "GET", f"{INV}/{created['id']}")
    assert up["version"] == after["version"] > 4 and up["active_attributes"]["who"] == "two"
    assert up["rollback_attributes"]["who"] == "one"

    # a stale current_version -> 409, nothing changes
    status, body = call(operator, admin, namespace, "PATCH", f"{INV}/db-1",
                        {"current_version": 4, "attributes": {"who": "three"}})
    assert status == 409 and body["message"] == (f"The given current version (4) doesn't match the actual current "
                                                 f"version ({up['version']}) of service instance db-1")
    # a state the lifecycle has no api_set_state transfer to -> 409, passed from the engine
    status, body = call(operator, admin, namespace, "POST", f"{INV}/db-1/state",
                        {"current_version": up["version"], "target_state": "rollback"})
    assert status == 409, body

    # an update rejected by validation, then set-state back to up (the seed's spelling of the path)
    status, body = call(operator, admin, namespace, "PATCH", f"{INV}/db-1",
                        {"current_version": up["version"], "attributes": {"who": "NOT-VALID"}})
    assert status == 200, body
    rejected = in_state(kubectl, namespace, "db-1", "update_rejected", version_above=up["version"])
    status, body = call(operator, admin, namespace, "POST", "/lsm/v1/services/greeter/db-1/state",
                        {"current_version": rejected["version"], "target_state": "up", "message": "keep two"})
    assert status == 200, body
    back = in_state(kubectl, namespace, "db-1", "up", version_above=rejected["version"])
    assert "candidateAttributes" not in back and back["activeAttributes"]["who"] == "two"

    # delete -> terminated: the object and its App go
    status, body = call(operator, admin, namespace, "DELETE", f"{INV}/name=db-1",
                        query=f"current_version={back['version']}")
    assert status == 200, body
    wait_until(lambda: kubectl("get", "si", "db-1", "-n", namespace, check=False).returncode != 0, 60,
               "the instance gone")
    assert kubectl("get", "app", "db-1", "-n", namespace, check=False).returncode != 0
    status, body = call(operator, admin, namespace, "GET", f"{INV}/db-1")
    assert status == 404 and body["notFound"] == "service_instance"


def tenant_token(kubectl: Kubectl, namespace: str) -> str:
    """A tenant: a ServiceAccount with `edit` on its own namespace only (and the service kinds there, which the
    chart aggregates into `edit`), and a token of it."""
    kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    kubectl("create", "rolebinding", "tenant-edit", "-n", namespace, "--clusterrole=edit",
            f"--serviceaccount={namespace}:tenant")
    kubectl("create", "role", "tenant-services", "-n", namespace, "--verb=get,list,create,update,delete",
            "--resource=serviceinstances.stead.dev,serviceentities.stead.dev")
    kubectl("create", "rolebinding", "tenant-services", "-n", namespace, "--role=tenant-services",
            f"--serviceaccount={namespace}:tenant")
    return str(kubectl("create", "token", "tenant", "-n", namespace).stdout.strip())


def token_call(operator: OperatorProcess, token: str, method: str, path: str, query: str,
               body: Any = None) -> tuple[int, Any]:
    """One request to the operator's API server with a bearer token: the status and the JSON answer."""
    context = ssl.create_default_context(cafile=str(operator.store.parent / "config-api" / "ca.crt"))
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"https://127.0.0.1:{operator.config_api_port}{path}?{query}", data=data,
                                     method=method, headers={"Authorization": f"Bearer {token}",
                                                             "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read().decode() or "null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read().decode() or "null")


def test_a_tenant_learns_nothing_about_another_namespaces_service_entities(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str) -> None:
    """Issue 25, finding 10: every verb on another namespace's instances is 403 with the same message whether
    the entity exists or not (the 404 used to come first, listing the entities there)."""
    catalog(kubectl, namespace)  # the victim's namespace holds the entity greeter
    tenant = f"{namespace}-tenant"
    kubectl("create", "namespace", tenant)
    try:
        token = tenant_token(kubectl, tenant)
        answers: dict[str, set[tuple[int, str]]] = {}
        for entity in ("greeter", "nope", "greeter2"):  # one that exists, two that do not
            base = f"/lsm/v1/service_inventory/{entity}"
            for method, path, body in (("GET", f"{base}/db-1", None), ("GET", f"{base}/name=db-1", None),
                                       ("PATCH", f"{base}/db-1", {"current_version": 1, "attributes": {}}),
                                       ("POST", f"{base}/db-1/state", {"current_version": 1, "target_state": "up"}),
                                       ("DELETE", f"{base}/db-1", None), ("GET", base, None)):
                status, answer = token_call(operator, token, method, path, f"namespace={namespace}", body)
                assert status == 403, (method, path, status, answer)
                answers.setdefault(f"{method} {path.replace(entity, '<entity>')}", set()).add(
                    (status, answer["message"]))
        assert all(len(seen) == 1 for seen in answers.values()), answers  # the same, entity or not
        assert not any("greeter" in message for seen in answers.values() for _, message in seen)
        # ... while in its own namespace, the tenant is told what is missing
        status, answer = token_call(operator, token, "GET", "/lsm/v1/service_inventory/nope/db-1",
                                    f"namespace={tenant}")
        assert status == 404 and answer["notFound"] == "service_entity", answer
    finally:
        kubectl("delete", "namespace", tenant, "--wait=false")


def test_writes_through_the_api_are_admitted_as_the_caller_not_as_the_operator(
        operator: OperatorProcess, kubectl: Kubectl, namespace: str) -> None:
    """Issue 25, finding 12: the API wrote as the operator after a SubjectAccessReview, so a
    ValidatingAdmissionPolicy that holds a tenant back was bypassed through it. Writes now impersonate the
    caller: the policy refuses the tenant through the API as through kubectl, three times, and nothing is
    written."""
    catalog(kubectl, namespace)
    token = tenant_token(kubectl, namespace)
    tenant = f"system:serviceaccount:{namespace}:tenant"
    name = f"tenant-{namespace}"[:63]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [{
            "apiGroups": ["stead.dev"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["serviceinstances"]}]},
            "validations": [{"expression": f"request.userInfo.username != '{tenant}'",
                             "message": "tenants may not write service instances here"}]}}
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}}
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]}))
    probe = {"apiVersion": "stead.dev/v1alpha1", "kind": "ServiceInstance",
             "metadata": {"name": "probe", "namespace": namespace},
             "spec": {"entity": "greeter", "attributes": {"name": "probe", "who": "p", "region": "eu"}}}
    try:
        wait_until(lambda: "tenants may not" in kubectl("create", "--dry-run=server", f"--as={tenant}", "-f", "-",
                                                        input=json.dumps(probe), check=False).stderr,
                   30, "the policy in force")
        for i in range(3):
            status, answer = token_call(operator, token, "POST", INV, f"namespace={namespace}",
                                        {"attributes": {"name": f"db-{i}", "who": "t", "region": "eu"}})
            assert 400 <= status < 500 and "tenants may not write service instances here" in answer["message"], (
                status, answer)
        assert kubectl("get", "si", "-n", namespace, "-o", "name").stdout.strip() == ""
    finally:
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, check=False)
