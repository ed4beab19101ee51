"""A tenant's script prints its own Secret in every encoding issue 25 listed, on the real local
control plane with the session's operator: the run's status, its output files and the operator's
log show the mask, never the value.

The tenant (`tests.e2e.test_egress.tenant`: a ServiceAccount with `edit` on its namespace only)
works in a namespace the session's operator trusts to run scripts on its host (`t-test-app*`).
Masking is a guard against accidents, not against a script: these are the encodings tools print
by themselves (`bash -x`, `printf %q`, `base32`, `gzip | base64`, JSON and HTML encoders, Python's
`repr`), and a value a script prints in two halves.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import OperatorProcess, wait_until
from tests.e2e.tenant_accounts import grant_secret
from tests.e2e.test_apps import app, blueprint
from tests.e2e.test_egress import Tenant, tenant  # noqa: F401  (the fixture)
from tests.unit.pipelines.test_masking import SCRIPTS

SECRET = 'pa ss$!wo"rd-Zq81-clé'
MASK = "********"
HALVES = 'printf "%s\\n" "${S%%-Zq81*}-Zq" "81-clé"'  # a value split across two lines


def masking_spec() -> dict[str, Any]:
    """One task per encoding: the secret in $S (from the tenant's Secret), the script run by bash."""
    scripts = {**SCRIPTS, "halves": HALVES}
    tasks = [{"name": f"t{i}", "type": "exec",
              "script": f"export S='@@{{db.secret}}@@'\nbash <<'SCRIPT'\n{script}\nSCRIPT\n"}
             for i, script in enumerate(scripts.values())]
    return {
        "credentials": [{"name": "db", "type": "password", "username": "app",
                         "secret": {"secretRef": {"name": "db", "key": "password"}}}],
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [{"name": "create", "tasks": tasks}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
    }


def test_app_output_masks_a_secret_in_every_encoding_a_tenants_script_prints(
    operator: OperatorProcess, tenant: Tenant,  # noqa: F811
) -> None:
    assert tenant.namespace.startswith("t-test-app")  # trusted to run scripts on the operator's host
    tenant("create", "secret", "generic", "db", f"--from-literal=password={SECRET}")
    grant_secret(tenant.kubectl, tenant.namespace, "db")  # a run reads it as the namespace's account
    tenant.apply(blueprint("leaky", tenant.namespace, masking_spec()))
    tenant("wait", "--for=condition=Ready", "--timeout=30s", "blueprint/leaky")
    tenant.apply(app("leaky", tenant.namespace, "leaky"))

    def finished() -> dict[str, Any] | None:
        status = tenant.get("actionrun", "leaky-create").get("status") or {}
        return status if status.get("state") in ("Succeeded", "Failed") else None

    status = wait_until(finished, 60, "the create run of app leaky", interval=0.2)
    assert status["state"] == "Succeeded", status
    names = [*SCRIPTS, "halves"]
    outputs = {names[int(t["task"].rsplit("/t", 1)[1])]: t["replicas"][0]["output"]
               for t in status["runLog"] if t["type"] == "exec"}
    assert set(outputs) == set(names)
    for encoding, output in outputs.items():
        lines = [line for line in output.splitlines() if line.strip()]
        assert lines and all(MASK in line for line in lines), (encoding, output)
        for part in output.split(MASK):  # no 4 characters of the value in clear beside a mask
            assert not any(SECRET[i:i + 4] in part for i in range(len(SECRET) - 3)), (encoding, output)
    everything = json.dumps(status) + operator.log_path.read_text()
    assert SECRET not in everything and "pa ss" not in everything
