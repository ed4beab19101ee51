"""Validating admission: the webhook configuration Stead registers, and the check it runs.

Kopf serves the webhooks (one path per handler id); Stead writes the configuration itself
rather than letting Kopf manage it, because the same shape must come out of the Helm chart
(with a Service reference) and out of the local mode (with a loopback URL), and because a
configuration applied *before* the operator reports ready means `kubectl apply` is checked
from the first request a test or a user makes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from operators import GROUP, VERSION
from operators.runtime.kinds import Kind

WEBHOOK_CONFIGURATION = "stead-validation"


def handler_id(kind: Kind) -> str:
    """The Kopf handler id of a kind's validating webhook, which is also its URL path."""
    return f"validate-{kind.plural}"


def validating_configuration(kinds: Iterable[Kind], base_url: str, ca_pem: bytes) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration calling `base_url/<handler id>` for each kind."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"app.kubernetes.io/part-of": "stead"}},
        "webhooks": [
            {
                "name": f"{kind.plural}.{GROUP}",
                "clientConfig": {"url": f"{base_url.rstrip('/')}/{handler_id(kind)}", "caBundle": ca_bundle},
                "rules": [{
                    "apiGroups": [GROUP], "apiVersions": [VERSION], "resources": [kind.plural],
                    "operations": ["CREATE", "UPDATE"], "scope": "Namespaced",
                }],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "timeoutSeconds": 10,
                "admissionReviewVersions": ["v1"],
            }
            for kind in kinds
        ],
    }
