"""Secrets belong to a namespace: every way another namespace (or another object) could reach a
team's vault entry, tried against the real API server with the operator's webhooks on and off."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from operators.runtime.secrets import KEY_SECRET, MasterKey, decrypt
from tests.e2e.conftest import Kubectl, OperatorProcess, wait_until
from tests.e2e.test_blueprint import (
    OPERATOR_NAMESPACE,
    assert_absent,
    bp_manifest,
    get_bp,
    ready,
    secret_spec,
    vault_data,
)

TEAM_CRED = "team-cred-Vq3!x81"
TEAM_VAR = "team-var-77c0de21"
REFUSED = "is not a secret of blueprint"


@pytest.fixture
def eve(kubectl: Kubectl) -> Iterator[str]:
    """A second tenant's namespace."""
    name = f"t-eve-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


def stolen(ref: str, **credential: Any) -> dict[str, Any]:
    """A blueprint spec whose credential names someone else's vault uuid."""
    spec = secret_spec("placeholder-1", "placeholder-2")
    spec["credentials"][0]["secret"] = {"vaultRef": ref, **credential}
    spec["variables"] = []
    spec["services"][0]["actions"][0]["tasks"][0]["script"] = "echo @@{db_cred.secret}@@"
    return spec


def team_values(kubectl: Kubectl, namespace: str) -> dict[str, str]:
    """The team's vault entries as the master key opens them, from the cluster copy."""
    key_secret = json.loads(kubectl("get", "secret", KEY_SECRET, "-n", OPERATOR_NAMESPACE, "-o", "json").stdout)
    keys = MasterKey.from_secret_data(key_secret["data"])
    return {ref: decrypt(keys, namespace, ref, base64.b64decode(blob)).decode()
            for ref, blob in vault_data(kubectl, namespace)[1].items()}


@contextlib.contextmanager
def webhooks_removed(kubectl: Kubectl) -> Iterator[None]:
    """The operator's webhook configurations removed (as if it were unreachable with failurePolicy
    Ignore, or run with --webhook off), then put back as they were."""
    saved = []
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        body = json.loads(kubectl("get", kind, "-l", "app.kubernetes.io/part-of=stead", "-o", "json").stdout)
        for item in body["items"]:
            meta = item["metadata"]
            item["metadata"] = {"name": meta["name"], "labels": meta.get("labels") or {}}
            saved.append(item)
            kubectl("delete", kind, meta["name"])
    assert saved, "no webhook configuration of the operator found"
    try:
        yield
    finally:
        for item in saved:
            kubectl("apply", "-f", "-", input=json.dumps(item))


def test_another_namespace_can_neither_read_nor_delete_a_teams_secret(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str, eve: str,
) -> None:
    kubectl("create", "-f", "-", input=bp_manifest("vault-a", namespace, secret_spec(TEAM_CRED, TEAM_VAR)))
    ready(kubectl, namespace, "vault-a")
    ref = get_bp(kubectl, namespace, "vault-a")["spec"]["credentials"][0]["secret"]["vaultRef"]
    before = team_values(kubectl, namespace)
    assert sorted(before.values()) == sorted([TEAM_CRED, TEAM_VAR])

    attacks = {
        # eve names the team's uuid (uuids are in specs, which `view` can read)
        "vaultRef": (eve, "steal", {}, f"spec.credentials[0].secret.vaultRef: {ref} {REFUSED} steal"),
        # ... and labels her object with the team's project: the shard-label policy refuses the label
        "label": (eve, "steal-labelled", {"labels": {"stead.dev/project": namespace}},
                  f"metadata.labels[stead.dev/project]: {namespace} is not a project of namespace {eve}"),
        # another blueprint of the same namespace: a secret is its own object's, not the namespace's
        "other object": (namespace, "thief", {}, f"spec.credentials[0].secret.vaultRef: {ref} {REFUSED} thief"),
    }
    for what, (ns, name, metadata, refusal) in attacks.items():
        result = kubectl("create", "-f", "-", input=bp_manifest(name, ns, stolen(ref), **metadata), check=False)
        assert result.returncode != 0, what
        assert refusal in result.stderr, (what, result.stderr)
    assert team_values(kubectl, namespace) == before

    # With the webhooks gone, the API server still refuses a value in plain text...
    with webhooks_removed(kubectl):
        result = kubectl("create", "-f", "-", input=bp_manifest("plain", eve, secret_spec("plain-1x", "plain-2y")),
                         check=False)
        assert result.returncode != 0
        assert "spec.credentials[0].secret.value" in result.stderr
        assert "accepted only through Stead's admission webhook" in result.stderr
        # ...and so does the team's project label (the shard-label policy is the API server's own)...
        result = kubectl("create", "-f", "-", input=bp_manifest("sneak", eve, stolen(ref),
                                                                labels={"stead.dev/project": namespace}), check=False)
        assert result.returncode != 0 and "is not a project of namespace" in result.stderr, result.stderr
        # ...while a foreign reference it cannot judge gets in, but goes no further than Error,
        kubectl("create", "-f", "-", input=bp_manifest("sneak", eve, stolen(ref)))
    status = wait_until(lambda: get_bp(kubectl, eve, "sneak").get("status", {}).get("state") == "Error"
                        and get_bp(kubectl, eve, "sneak")["status"], 30, "the foreign reference to be refused")
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "ForeignSecret" and f"{ref} {REFUSED} sneak" in stalled["message"]
    # ...and deleting it deletes nothing of the team's.
    kubectl("delete", "blueprint", "sneak", "-n", eve, "--wait=true", "--timeout=30s")
    assert team_values(kubectl, namespace) == before
    eve_text = kubectl("get", "blueprints,events", "-n", eve, "-o", "yaml").stdout
    for value in (TEAM_CRED, TEAM_VAR):
        assert_absent(value, eve_text, "the other namespace's objects")


def test_reapplying_reuses_an_entry_and_replaced_or_refused_entries_are_collected(
    operator: OperatorProcess, kubectl: Kubectl, namespace: str,
) -> None:
    def refs() -> set[str]:
        spec = get_bp(kubectl, namespace, "gitops")["spec"]
        return {spec["credentials"][0]["secret"]["vaultRef"], spec["variables"][0]["secret"]["vaultRef"]}

    def stored() -> set[str]:
        return set(vault_data(kubectl, namespace)[1])

    kubectl("apply", "-f", "-", input=bp_manifest("gitops", namespace, secret_spec("v1-cred-aa", "v1-var-bb")))
    first = refs()
    wait_until(lambda: stored() == first, 30, "the blueprint's reconcile to store its sealed values")
    for _ in range(3):  # a GitOps tool syncing the same manifest
        kubectl("apply", "-f", "-", input=bp_manifest("gitops", namespace, secret_spec("v1-cred-aa", "v1-var-bb")))
        assert refs() == first and stored() == first

    # A new value replaces the credential's entry; the replaced one goes once no request can still need it.
    kubectl("apply", "-f", "-", input=bp_manifest("gitops", namespace, secret_spec("v2-cred-cc", "v1-var-bb")))
    second = refs()
    assert len(second - first) == 1 and len(first - second) == 1
    wait_until(lambda: stored() == second, 30, "the replaced entry to be collected")

    # A request the API server refuses after the webhook answered (the name is taken: 409) stored
    # nothing: admission only seals, the reconcile of a stored object stores.
    result = kubectl("create", "-f", "-", input=bp_manifest("gitops", namespace, secret_spec("v3-cred", "v3-var")),
                     check=False)
    assert result.returncode != 0 and "AlreadyExists" in result.stderr
    assert stored() == second
    assert refs() == second
