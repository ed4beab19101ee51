"""Issue 25, finding 2: admission reviews that do not come from the API server.

The local control plane's API server presents a client certificate of its webhook client CA to
every webhook (its `--admission-control-config-file`), and the operator, finding that CA in
kube-system/stead-webhook-client-ca, requires it at the TLS handshake. A forger on loopback (a
Pod that reaches the webhook Service, an `http` task aimed at it) has no such certificate.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import uuid
from typing import Any

from operators.cluster import ClusterInfo
from tests.e2e.conftest import Kubectl, OperatorProcess
from tests.e2e.test_blueprint import bp_manifest, get_bp, ready, secret_spec, vault_data

VICTIM_CRED = "victim-cred-5Jq!w2"
VICTIM_VAR = "victim-var-0b1d9e"
ATTEMPTS = 8  # bounded: each is one guess, the right one among them


def review(namespace: str, name: str, value: str) -> dict[str, Any]:
    """A mutating AdmissionReview for a Blueprint of `namespace` with `value` inline, as a forger writes it."""
    spec = secret_spec(value, value)
    obj = json.loads(bp_manifest(name, namespace, spec))
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": namespace, "name": name,
            "kind": {"group": "stead.dev", "version": "v1alpha1", "kind": "Blueprint"},
            "resource": {"group": "stead.dev", "version": "v1alpha1", "resource": "blueprints"},
            "userInfo": {"username": "system:serviceaccount:eve:default"},
            "object": obj, "dryRun": False,
        },
    }


def send(port: int, body: dict[str, Any], client_cert: tuple[str, str] | None) -> dict[str, Any]:
    """POST a review to the operator's webhook port on loopback; its answer, or the TLS error raised."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a forger does not care who answers
    if client_cert is not None:
        context.load_cert_chain(*client_cert)
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        connection.request("POST", "/mutate-blueprints", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        return answer
    finally:
        connection.close()


def patched_refs(answer: dict[str, Any]) -> set[str]:
    """The vaultRefs a mutating answer's JSON patch writes."""
    response = answer["response"]
    patch = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("vaultRef"), str):
                found.add(node["vaultRef"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for op in patch:  # Kopf writes each changed leaf: {"op": ..., "path": ".../secret/vaultRef", "value": uuid}
        if str(op.get("path", "")).endswith("/vaultRef") and isinstance(op.get("value"), str):
            found.add(op["value"])
        walk(op.get("value"))
    return found


def test_a_forged_review_gets_no_answer_and_writes_nothing(
    operator: OperatorProcess, cluster: ClusterInfo, kubectl: Kubectl, namespace: str,
) -> None:
    # The victim's blueprint goes through the API server: its webhook calls are authenticated.
    kubectl("create", "-f", "-", input=bp_manifest("victim", namespace, secret_spec(VICTIM_CRED, VICTIM_VAR)))
    ready(kubectl, namespace, "victim")
    spec = get_bp(kubectl, namespace, "victim")["spec"]
    victim_refs = {spec["credentials"][0]["secret"]["vaultRef"], spec["variables"][0]["secret"]["vaultRef"]}
    before = vault_data(kubectl, namespace)
    assert set(before[1]) == victim_refs

    pki = cluster.home / "pki"
    forgers: dict[str, tuple[str, str] | None] = {
        "no client certificate": None,
        # a user's certificate of the cluster's client CA is not the API server's webhook certificate
        "the admin's client certificate": (str(pki / "admin.crt"), str(pki / "admin.key")),
    }
    guesses = [f"wrong-guess-{i}" for i in range(ATTEMPTS - 1)] + [VICTIM_CRED]
    for who, cert in forgers.items():
        for guess in guesses:
            try:
                answer = send(operator.webhook_port, review(namespace, "victim", guess), cert)
            except (ssl.SSLError, ConnectionError, http.client.HTTPException):
                continue  # refused at the handshake (or the connection dropped right after it)
            raise AssertionError(f"{who}: a forged review was answered: {json.dumps(answer)[:300]}")
    assert vault_data(kubectl, namespace) == before, "a forged review wrote to the victim's vault copy"

    # The API server's own certificate is served, and even then a right guess is no oracle: the
    # value is not compared with the namespace's entries, the answer is a fresh uuid like any other.
    webhook_client = (str(pki / "apiserver-webhook-client.crt"), str(pki / "apiserver-webhook-client.key"))
    answer = send(operator.webhook_port, review(namespace, "victim", VICTIM_CRED), webhook_client)
    assert answer["response"]["allowed"] is True, answer
    answered = patched_refs(answer)
    assert answered and not answered & victim_refs, answer
    # And answering wrote nothing: the value travels sealed in the answer, and only an object the
    # API server stored brings it to the vault. A forger who gets past the handshake (a chart
    # installed without `webhook.clientCA`) fills no vault.
    assert VICTIM_CRED not in json.dumps(answer) and "sealed" in base64.b64decode(answer["response"]["patch"]).decode()
    assert vault_data(kubectl, namespace) == before, "an answered review wrote to the vault"
