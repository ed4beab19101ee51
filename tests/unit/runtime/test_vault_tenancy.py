"""Secrets belong to a namespace and to the blueprint that stored them: the admission checks, the
run-time check and the collector of unreferenced entries, without a cluster."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from operators.calm import vaultgc
from operators.calm.actionrun import _secret_value
from operators.calm.blueprint import (
    DRY_RUN_VAULT_REF,
    check_vault_refs,
    foreign_refs,
    move_inline_secrets,
    release,
    store_sealed,
    validate,
)
from operators.calm.models import SecretSource
from operators.runtime.core.kinds import AdmissionRequest, Refusal
from operators.runtime.core.pipeline import Observed, PermanentError, StepContext
from operators.runtime.core.store import LocalStore
from operators.runtime.secrets import Entry, MasterKey, MemoryClusterCopy, Vault
from pipelines.kubeapi import KubeApiError
from tests.unit.fakeapi import FakeApi

T = TypeVar("T")
TEAM, EVE = "team", "eve"
VALUE = "team-password-81x!"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Vault]:
    store = LocalStore(tmp_path / "store")
    yield Vault(store, MasterKey.generate("k1"), MemoryClusterCopy())
    store.close()


def services(vault: Vault, kube: FakeApi | None = None) -> Any:
    return SimpleNamespace(vault=vault, kube=kube or FakeApi(), settings={})


def spec_with(secret: dict[str, Any]) -> dict[str, Any]:
    return {
        "substrates": [{"name": "host", "type": "Local"}],
        "services": [{"name": "S", "actions": [{"name": "create", "tasks": [
            {"name": "t", "type": "exec", "script": "echo @@{c.secret}@@"}]}]}],
        "deployments": [{"name": "tier", "substrate": "host", "services": ["S"]}],
        "credentials": [{"name": "c", "type": "password", "username": "u", "secret": secret}],
    }


def admission(vault: Vault, namespace: str, name: str, spec: dict[str, Any], *, old: dict[str, Any] | None = None,
              labels: Mapping[str, str] | None = None, dry_run: bool = False, generated: bool = False,
              ) -> AdmissionRequest:
    return AdmissionRequest(operation="UPDATE" if old else "CREATE", namespace=namespace, name=name,
                            labels=dict(labels or {}), spec=spec, old=old, dry_run=dry_run,
                            services=services(vault), generated_name=generated)


def sealed_secret(vault: Vault, namespace: str, name: str, value: str = VALUE) -> dict[str, Any]:
    """What the mutating webhook leaves of an inline value: `{vaultRef, sealed}`."""
    patch = run(move_inline_secrets(admission(vault, namespace, name, spec_with({"value": value}))))
    assert patch is not None
    secret: dict[str, Any] = patch["spec"]["credentials"][0]["secret"]
    return secret


def stored_ref(vault: Vault, namespace: str, name: str, value: str = VALUE) -> str:
    """An inline value through the webhook, then the blueprint's reconcile, which stores it."""
    secret = sealed_secret(vault, namespace, name, value)
    run(store_sealed(vault, namespace, name, spec_with(secret)))
    ref: str = secret["vaultRef"]
    return ref


def test_the_webhook_seals_and_the_reconcile_stores_under_the_namespace_and_blueprint_whatever_the_label(
    vault: Vault,
) -> None:
    request = admission(vault, TEAM, "web", spec_with({"value": VALUE}), labels={"stead.dev/project": EVE})
    patch = run(move_inline_secrets(request))
    assert patch is not None
    secret = patch["spec"]["credentials"][0]["secret"]
    assert set(secret) == {"vaultRef", "sealed"} and VALUE not in str(patch)
    assert vault.projects() == []  # admission wrote nothing (issue 25, finding 2)
    ctx = StepContext(obj=obj(TEAM, "web", spec_with(secret), {"stead.dev/project": EVE}), facts={},
                      services=services(vault))
    run(validate(ctx))
    assert vault.owner_of(TEAM, secret["vaultRef"]) == "Blueprint/web"
    assert vault.get(TEAM, secret["vaultRef"], owner="Blueprint/web") == VALUE
    assert vault.projects() == [TEAM]  # the label chose nothing


def test_a_sealed_value_opens_only_for_its_namespace_and_blueprint(vault: Vault) -> None:
    """A tenant who got a sealed value (from its own namespace, or from a review it forged for
    another's) cannot make it another namespace's or another blueprint's entry: refused at the
    validating webhook and stalled at the reconcile, and never stored."""
    theirs = sealed_secret(vault, TEAM, "web")
    for namespace, name in ((EVE, "web"), (TEAM, "thief")):
        request = admission(vault, namespace, name, spec_with(theirs))
        with pytest.raises(Refusal) as refused:
            run(check_vault_refs(request))
        assert "sealed value" in refused.value.message and VALUE not in refused.value.message
        ctx = StepContext(obj=obj(namespace, name, spec_with(theirs)), facts={}, services=services(vault))
        with pytest.raises(PermanentError) as stalled:
            run(validate(ctx))
        assert stalled.value.reason == "ForeignSecret"
    altered = dict(theirs, sealed=theirs["sealed"][:-8] + "AAAAAAA=")
    with pytest.raises(Refusal):
        run(check_vault_refs(admission(vault, TEAM, "web", spec_with(altered))))
    assert vault.projects() == []
    run(check_vault_refs(admission(vault, TEAM, "web", spec_with(theirs))))  # its own: admitted


def test_a_sealed_value_cannot_take_over_another_blueprints_uuid(vault: Vault) -> None:
    ref = stored_ref(vault, TEAM, "web")
    forged = dict(sealed_secret(vault, TEAM, "thief", "mine"), vaultRef=ref)  # sealed for another uuid
    with pytest.raises(Refusal):
        run(check_vault_refs(admission(vault, TEAM, "thief", spec_with(forged))))
    assert vault.get(TEAM, ref, owner="Blueprint/web") == VALUE


def test_a_reference_to_another_namespaces_or_objects_secret_is_refused_naming_the_field(vault: Vault) -> None:
    ref = stored_ref(vault, TEAM, "web")
    for namespace, name in ((EVE, "steal"), (TEAM, "thief")):
        request = admission(vault, namespace, name, spec_with({"vaultRef": ref}), labels={"stead.dev/project": TEAM})
        with pytest.raises(Refusal) as refused:
            run(check_vault_refs(request))
        assert refused.value.message == (f"spec.credentials[0].secret.vaultRef: {ref} is not a secret of blueprint "
                                         f"{name} (set secret.value or secretRef instead)")
    run(check_vault_refs(admission(vault, TEAM, "web", spec_with({"vaultRef": ref}))))  # its own: fine


def test_a_uuid_of_nothing_reads_like_a_uuid_of_someone_else(vault: Vault) -> None:
    ref = stored_ref(vault, TEAM, "web")
    absent = "33333333-3333-4333-8333-333333333333"
    theirs = foreign_refs(vault, EVE, "x", spec_with({"vaultRef": ref}))
    nothing = foreign_refs(vault, EVE, "x", spec_with({"vaultRef": absent}))
    assert [p.replace(ref, "U") for p in theirs] == [p.replace(absent, "U") for p in nothing]


def test_the_dry_run_placeholder_passes_only_in_a_dry_run(vault: Vault) -> None:
    spec = spec_with({"vaultRef": DRY_RUN_VAULT_REF})
    run(check_vault_refs(admission(vault, TEAM, "web", spec, dry_run=True)))
    with pytest.raises(Refusal):
        run(check_vault_refs(admission(vault, TEAM, "web", spec)))


def test_a_reference_already_stored_passes_so_that_the_object_can_still_be_deleted(vault: Vault) -> None:
    ref = stored_ref(vault, TEAM, "web")
    old = {"spec": spec_with({"vaultRef": ref})}
    run(check_vault_refs(admission(vault, EVE, "sneak", spec_with({"vaultRef": ref}), old=old)))


def test_inline_secrets_need_a_fixed_name(vault: Vault) -> None:
    with pytest.raises(Refusal, match=r"metadata\.name"):
        run(move_inline_secrets(admission(vault, TEAM, "web-", spec_with({"value": VALUE}), generated=True)))
    assert vault.projects() == []


def reapplied_ref(vault: Vault, name: str, value: str, old_ref: str, namespace: str = TEAM,
                  authenticated: bool = True) -> str:
    """The vaultRef an UPDATE gets whose stored object (`old`) holds `old_ref` at the same field."""
    request = admission(vault, namespace, name, spec_with({"value": value}),
                        old={"spec": spec_with({"vaultRef": old_ref})})
    request = dataclasses.replace(request, authenticated=authenticated)
    patch = run(move_inline_secrets(request))
    assert patch is not None
    run(store_sealed(vault, namespace, name, patch["spec"]))  # the reconcile of the stored object
    ref: str = patch["spec"]["credentials"][0]["secret"]["vaultRef"]
    return ref


def test_the_same_value_applied_again_reuses_its_entry(vault: Vault) -> None:
    first = stored_ref(vault, TEAM, "web")
    assert reapplied_ref(vault, "web", VALUE, first) == first
    assert reapplied_ref(vault, "other", VALUE, first) != first  # another blueprint's own entry
    assert reapplied_ref(vault, "web", "a-new-value-9", first) != first
    assert len(vault.entries(TEAM)) == 3


def test_no_review_learns_whether_it_guessed_a_stored_value(vault: Vault) -> None:
    """Issue 25, finding 2: a review naming the victim's namespace and blueprint once answered
    with the victim's uuid when its value was right. Now a value is compared with nothing but the
    entry the API server's stored object names, and only in an authenticated review: right and
    wrong guesses get the same kind of answer, a fresh uuid."""
    victim = stored_ref(vault, TEAM, "web")
    guesses = ("wrong-1", VALUE, "wrong-2", VALUE)  # bounded: a right guess among wrong ones
    for guess in guesses:
        assert sealed_secret(vault, TEAM, "web", guess)["vaultRef"] != victim  # no `old`: nothing compared
    assert [e.uuid for e in vault.entries(TEAM)] == [victim]  # and reviews alone wrote nothing
    for guess in guesses:
        assert stored_ref(vault, TEAM, "web", guess) != victim
    for guess in guesses:
        # a forged `old` naming the victim's uuid, sent where the sender is not authenticated
        assert reapplied_ref(vault, "web", guess, victim, authenticated=False) != victim
    assert len({e.uuid for e in vault.entries(TEAM)}) == 9


def obj(namespace: str, name: str, spec: dict[str, Any], labels: Mapping[str, str] | None = None) -> Observed:
    return Observed(kind="Blueprint", namespace=namespace, name=name, uid="u", generation=1, labels=dict(labels or {}),
                    spec=spec, status={})


def test_the_reconciler_stalls_a_foreign_reference_that_bypassed_the_webhook(vault: Vault) -> None:
    ref = stored_ref(vault, TEAM, "web")
    ctx = StepContext(obj=obj(EVE, "sneak", spec_with({"vaultRef": ref}), {"stead.dev/project": TEAM}), facts={},
                      services=services(vault))
    with pytest.raises(PermanentError) as stalled:
        run(validate(ctx))
    assert stalled.value.reason == "ForeignSecret"


def test_deleting_a_blueprint_that_names_anothers_uuid_deletes_nothing(vault: Vault) -> None:
    ref = stored_ref(vault, TEAM, "web")
    for namespace, name in ((EVE, "sneak"), (TEAM, "thief")):
        ctx = StepContext(obj=obj(namespace, name, spec_with({"vaultRef": ref}), {"stead.dev/project": TEAM}),
                          facts={}, services=services(vault))
        run(release(ctx))
    assert vault.get(TEAM, ref, owner="Blueprint/web") == VALUE
    run(release(StepContext(obj=obj(TEAM, "web", spec_with({"vaultRef": ref})), facts={}, services=services(vault))))
    assert vault.owner_of(TEAM, ref) is None


async def no_account() -> Path:
    raise AssertionError("a vault reference needs no service-account token")


def test_a_run_opens_only_its_blueprints_secret_in_its_own_namespace_and_says_nothing_of_others(
    vault: Vault,
) -> None:
    ref = stored_ref(vault, TEAM, "web")
    source = SecretSource.model_validate({"vaultRef": ref})

    def ctx(namespace: str) -> StepContext:
        run_obj = Observed(kind="ActionRun", namespace=namespace, name="r", uid="u", generation=1,
                           labels={"stead.dev/project": TEAM}, spec={}, status={})
        return StepContext(obj=run_obj, facts={}, services=services(vault))

    assert run(_secret_value(ctx(TEAM), "web", source, no_account)) == VALUE
    for namespace, blueprint in ((EVE, "web"), (TEAM, "thief")):
        with pytest.raises(PermanentError) as failed:
            run(_secret_value(ctx(namespace), blueprint, source, no_account))
        assert failed.value.reason == "SecretNotFound" and VALUE not in str(failed.value)



class SecretsAsTheAccount:
    """What the namespace's service account gets when it asks for a Secret (RestKubeApi's `get`)."""

    def __init__(self, answer: dict[str, Any] | KubeApiError | None) -> None:
        self.answer = answer

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if isinstance(self.answer, KubeApiError):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(("answer", "reason", "said"), [
    (KubeApiError(403, 'secrets "db" is forbidden'), "SecretForbidden",
     "Secret db: service account team/default may not read it: it needs get on secrets/db in namespace team "
     "(kubectl -n team create role read-db --verb=get --resource=secrets --resource-name=db; kubectl -n team "
     "create rolebinding read-db --role=read-db --serviceaccount=team:default)"),
    (None, "SecretNotFound", "Secret db: not found in namespace team"),
    ({"data": {"other": "eA=="}}, "SecretNotFound", "Secret db has no key password"),
    (KubeApiError(500, "etcd is down"), "SecretUnreadable", "Secret db: 500: etcd is down"),
])
def test_a_secret_the_runs_account_may_not_read_is_forbidden_naming_the_grant(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, answer: Any, reason: str, said: str) -> None:
    """A Secret that exists but that the run's account may not get was reported as `SecretNotFound`: it is
    `SecretForbidden`, and the message gives the grant that is missing, for an App's run and a GraphRun alike."""
    from operators.graphs.run import _read_secret
    from operators.runtime.core.refs import SecretKeyRef
    from operators.runtime.engine.runs import RunSettings
    from pipelines.kubeapi import RestKubeApi

    monkeypatch.setattr(RestKubeApi, "from_credentials_file",
                        classmethod(lambda cls, path: SecretsAsTheAccount(answer)))
    run_obj = Observed(kind="ActionRun", namespace=TEAM, name="r", uid="u", generation=1, labels={}, spec={}, status={})
    step = StepContext(obj=run_obj, facts={}, services=SimpleNamespace(runs=RunSettings(state_dir=tmp_path)))

    async def account() -> Path:
        return tmp_path / "credentials.json"

    source = SecretSource.model_validate({"secretRef": {"name": "db", "key": "password"}})
    with pytest.raises(PermanentError) as app_run:
        run(_secret_value(step, "web", source, account))
    assert (app_run.value.reason, app_run.value.message) == (reason, said)
    with pytest.raises(PermanentError) as graph_run:
        run(_read_secret(step, SecretKeyRef(name="db", key="password"), "spec.ssh.privateKey of the environment",
                         tmp_path / "credentials.json"))
    where = "spec.ssh.privateKey of the environment"
    assert (graph_run.value.reason, graph_run.value.message) == (reason, f"{where}: {said}")
    assert graph_run.value.facts["state"] == "Failed"

# --- collecting unreferenced entries -------------------------------------------------------------


def test_garbage_is_blueprint_owned_unreferenced_and_older_than_grace() -> None:
    entries = [Entry("a", "Blueprint/x", 100), Entry("b", "Blueprint/x", 100), Entry("c", "Blueprint/x", 195),
               Entry("d", "", 0), Entry("e", "ServiceInstance/y", 100)]
    assert vaultgc.garbage(entries, {"b"}, now=200, grace=10) == [entries[0]]


def test_the_collector_removes_replaced_and_refused_entries_and_keeps_what_apps_still_run(
    vault: Vault, kube: FakeApi,
) -> None:
    clock = [1_000_000_000.0]
    kept = stored_ref(vault, TEAM, "web", "in-the-spec")
    snapshot = stored_ref(vault, TEAM, "web", "in-an-apps-snapshot")
    orphan = stored_ref(vault, TEAM, "web", "refused-request")
    kube.add(f"/apis/stead.dev/v1alpha1/namespaces/{TEAM}/blueprints/web", {"spec": spec_with({"vaultRef": kept})})
    kube.add(f"/apis/stead.dev/v1alpha1/namespaces/{TEAM}/apps/shop",
             {"status": {"snapshot": {"spec": spec_with({"vaultRef": snapshot})}}})
    collector = vaultgc.VaultCollector(grace=120, interval=60, recheck=600, clock=lambda: clock[0])
    svc = services(vault, kube)
    # Young entries: a request may still be storing them.
    assert run(collector.sweep(svc)) == 0
    assert {e.uuid for e in vault.entries(TEAM)} == {kept, snapshot, orphan}
    clock[0] = 2e12  # long after
    assert run(collector.sweep(svc)) == 1
    assert {e.uuid for e in vault.entries(TEAM)} == {kept, snapshot}
    asked = len(kube.calls)
    clock[0] += 60
    assert run(collector.sweep(svc)) == 0
    assert len(kube.calls) == asked  # nothing new since: the API server is not asked again
