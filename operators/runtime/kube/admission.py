"""Admission: the webhook configurations Stead registers for its kinds.

Kopf serves the webhooks (one path per handler id); Stead writes the configuration itself
rather than letting Kopf manage it, because the same shape must come out of the Helm chart
(with a Service reference) and out of the local mode (with a loopback URL), and because a
configuration applied *before* the operator reports ready means `kubectl apply` is checked
from the first request a test or a user makes.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from typing import Any, Literal

from operators import GROUP, VERSION
from operators.runtime.core.kinds import Kind

WEBHOOK_CONFIGURATION = "stead-validation"
MUTATING_CONFIGURATION = "stead-mutation"


def handler_id(kind: Kind) -> str:
    """The Kopf handler id of a kind's validating webhook, which is also its URL path."""
    return f"validate-{kind.plural}"


def mutating_handler_id(kind: Kind) -> str:
    """The Kopf handler id (and URL path) of a kind's mutating webhook."""
    return f"mutate-{kind.plural}"


Operation = Literal["CREATE", "UPDATE", "DELETE"]


def validated_operations(kind: Kind) -> list[Operation]:
    """The operations a kind's validating webhook sees: DELETE too for kinds that may refuse one."""
    return ["CREATE", "UPDATE", "DELETE"] if kind.admit_delete else ["CREATE", "UPDATE"]


def _webhook(kind: Kind, url: str, ca_bundle: str, side_effects: str,
             operations: list[Operation] | None = None) -> dict[str, Any]:
    return {
        "name": f"{kind.plural}.{GROUP}",
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{
            "apiGroups": [GROUP], "apiVersions": [VERSION], "resources": [kind.plural],
            "operations": operations or ["CREATE", "UPDATE"],
            "scope": "Cluster" if kind.cluster_scoped else "Namespaced",
        }],
        "sideEffects": side_effects,
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "timeoutSeconds": 10,
        "admissionReviewVersions": ["v1"],
    }


def validating_configuration(kinds: Iterable[Kind], base_url: str, ca_pem: bytes) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration calling `base_url/validate-<plural>` for each kind (on CREATE
    and UPDATE, and on DELETE for kinds with `admit_delete`)."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    base = base_url.rstrip("/")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"app.kubernetes.io/part-of": "stead"}},
        "webhooks": [_webhook(k, f"{base}/{handler_id(k)}", ca_bundle, "None", validated_operations(k))
                     for k in kinds if k.validates],
    }


def mutating_configuration(kinds: Iterable[Kind], base_url: str, ca_pem: bytes,
                           also: Callable[[Kind], bool] = lambda _kind: False) -> dict[str, Any] | None:
    """A MutatingWebhookConfiguration for the kinds that mutate, and those `also` names (the
    bucket label of several replicas); None when none does.

    Mutations may write (an inline secret goes into the vault), so they declare
    `NoneOnDryRun`: a dry run gets the same answer without the write.
    """
    mutating = [k for k in kinds if k.mutates or also(k)]
    if not mutating:
        return None
    ca_bundle = base64.b64encode(ca_pem).decode()
    base = base_url.rstrip("/")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MUTATING_CONFIGURATION, "labels": {"app.kubernetes.io/part-of": "stead"}},
        "webhooks": [_webhook(k, f"{base}/{mutating_handler_id(k)}", ca_bundle, "NoneOnDryRun") for k in mutating],
    }


def denying_policy(name: str, resources: Iterable[str], validations: list[dict[str, Any]], *,
                   match_conditions: Iterable[dict[str, str]] = (), variables: Iterable[dict[str, str]] = (),
                   operations: Iterable[str] = ("CREATE", "UPDATE")) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy on Stead's namespaced kinds and its binding (Deny), for the checks the API
    server must make itself, whether or not the webhook answers (failurePolicy Ignore, the operator down): the
    sharding labels, expert mode's permission, an order's author's rights. One shape for the chart's files and
    for `--install-crds`."""
    labels = {"app.kubernetes.io/part-of": "stead"}
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [GROUP], "apiVersions": ["*"], "operations": list(operations),
            "resources": list(resources), "scope": "Namespaced",
        }]},
    }
    if match_conditions := list(match_conditions):
        spec["matchConditions"] = match_conditions
    if variables := list(variables):
        spec["variables"] = variables
    spec["validations"] = validations
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name, "labels": labels}, "spec": spec}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": labels},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return policy, binding
