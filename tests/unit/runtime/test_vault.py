"""The vault: encryption that refuses tampering, rotation without loss, recovery from the cluster copy.

The cluster copy is the in-memory one here (tests/e2e/test_vault.py uses real Secrets), except
for a fake API that drives SecretClusterCopy and the master key through 404 and 409 answers.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from operators.runtime.core.store import LocalStore
from operators.runtime.kube.client import ApiError
from operators.runtime.secrets import (
    FORMAT_VERSION,
    NONCE_BYTES,
    VAULT_DB,
    ClusterCopyError,
    MasterKey,
    MemoryClusterCopy,
    SecretClusterCopy,
    Vault,
    VaultError,
    blob_key_id,
    decrypt,
    encrypt,
    load_or_create_master_key,
    rotate_master_key,
    vault_secret_name,
)

T = TypeVar("T")
SECRET = "hunter2-correct-horse"
PROJECT = "team-a"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LocalStore]:
    s = LocalStore(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def keys() -> MasterKey:
    return MasterKey.generate("k1")


@pytest.fixture
def copy() -> MemoryClusterCopy:
    return MemoryClusterCopy()


@pytest.fixture
def vault(store: LocalStore, keys: MasterKey, copy: MemoryClusterCopy) -> Vault:
    return Vault(store, keys, copy)


def raw_blob(store: LocalStore, project: str, ref: str) -> bytes:
    env, db = store.open_db(VAULT_DB)
    with env.begin(db=db) as txn:
        raw = txn.get(f"{project}/{ref}".encode())
    assert raw is not None
    return bytes(raw)


def write_blob(store: LocalStore, project: str, ref: str, blob: bytes) -> None:
    env, db = store.open_db(VAULT_DB)
    with env.begin(db=db, write=True) as txn:
        txn.put(f"{project}/{ref}".encode(), blob)


def key_material(keys: MasterKey) -> list[str]:
    """Every spelling of the key bytes an error message could leak."""
    out = []
    for encoded in keys.to_secret_data().values():
        raw = base64.b64decode(encoded)
        out += [encoded, raw.hex(), repr(raw)]
    return out


def assert_clean(message: str, keys: MasterKey, *values: str) -> None:
    for value in values:
        assert value not in message
    for material in key_material(keys):
        if len(material) > 8:  # the id in `current` is not key material
            assert material not in message


def test_round_trip_and_only_ciphertext_is_stored(vault: Vault, store: LocalStore, copy: MemoryClusterCopy) -> None:
    ref = run(vault.put(PROJECT, SECRET))
    assert vault.get(PROJECT, ref) == SECRET
    assert vault.uuids(PROJECT) == [ref]
    assert vault.projects() == [PROJECT]
    blob = raw_blob(store, PROJECT, ref)
    assert copy.projects[PROJECT] == {ref: blob}  # written through, same bytes
    assert SECRET.encode() not in blob
    assert blob[0] == FORMAT_VERSION and blob_key_id(blob) == "k1"


def test_unicode_and_empty_values_round_trip(vault: Vault) -> None:
    for value in ["", "pässwörd ✓ 🔑", "line1\nline2\r\n", "x" * 100_000]:
        assert vault.get(PROJECT, run(vault.put(PROJECT, value))) == value


def test_fresh_nonce_per_encryption(vault: Vault, store: LocalStore, keys: MasterKey) -> None:
    a, b = run(vault.put(PROJECT, SECRET)), run(vault.put(PROJECT, SECRET))
    blob_a, blob_b = raw_blob(store, PROJECT, a), raw_blob(store, PROJECT, b)
    assert blob_a != blob_b
    nonce = slice(2 + len("k1"), 2 + len("k1") + NONCE_BYTES)
    assert blob_a[nonce] != blob_b[nonce]
    # same uuid too: the nonce alone makes them differ
    assert encrypt(keys, PROJECT, a, b"v") != encrypt(keys, PROJECT, a, b"v")


@pytest.mark.parametrize("where", ["version", "key id", "nonce", "ciphertext", "tag"])
def test_tampered_ciphertext_is_refused(vault: Vault, store: LocalStore, keys: MasterKey, where: str) -> None:
    ref = run(vault.put(PROJECT, SECRET))
    blob = bytearray(raw_blob(store, PROJECT, ref))
    index = {"version": 0, "key id": 2, "nonce": 5, "ciphertext": 4 + NONCE_BYTES + 2, "tag": len(blob) - 1}[where]
    blob[index] ^= 0x01
    write_blob(store, PROJECT, ref, bytes(blob))
    with pytest.raises(VaultError) as caught:
        vault.get(PROJECT, ref)
    assert_clean(str(caught.value), keys, SECRET)
    assert caught.value.__context__ is None and caught.value.__cause__ is None


def test_truncated_and_garbage_blobs_are_refused(vault: Vault, store: LocalStore) -> None:
    ref = run(vault.put(PROJECT, SECRET))
    for garbage in [b"", b"\x01", raw_blob(store, PROJECT, ref)[:20], b"\x03" + raw_blob(store, PROJECT, ref)[1:]]:
        write_blob(store, PROJECT, ref, garbage)
        with pytest.raises(VaultError):
            vault.get(PROJECT, ref)


def test_a_blob_moved_to_another_uuid_or_project_is_refused(vault: Vault, store: LocalStore, keys: MasterKey) -> None:
    ref = run(vault.put(PROJECT, SECRET))
    other = run(vault.put(PROJECT, "another-secret-value"))
    blob = raw_blob(store, PROJECT, ref)
    write_blob(store, PROJECT, other, blob)  # same project, other uuid
    write_blob(store, "team-b", ref, blob)  # same uuid, other project
    for project, target in [(PROJECT, other), ("team-b", ref)]:
        with pytest.raises(VaultError, match="refused") as caught:
            vault.get(project, target)
        assert_clean(str(caught.value), keys, SECRET, "another-secret-value")
    assert vault.get(PROJECT, ref) == SECRET  # the original is untouched


def test_wrong_key_and_unknown_key_are_refused(store: LocalStore, keys: MasterKey, copy: MemoryClusterCopy) -> None:
    ref = run(Vault(store, keys, copy).put(PROJECT, SECRET))
    impostor = MasterKey.generate("k1")  # same id, other material
    with pytest.raises(VaultError, match="refused") as caught:
        Vault(store, impostor, copy).get(PROJECT, ref)
    assert_clean(str(caught.value), keys, SECRET)
    assert_clean(str(caught.value), impostor, SECRET)
    with pytest.raises(VaultError, match="master key k1, which this vault does not hold"):
        Vault(store, MasterKey.generate("k2"), copy).get(PROJECT, ref)


def test_missing_and_malformed_references(vault: Vault) -> None:
    with pytest.raises(VaultError, match="no secret"):
        vault.get(PROJECT, "00000000-0000-4000-8000-000000000000")
    with pytest.raises(VaultError, match="invalid secret reference"):
        vault.get(PROJECT, "../etc")
    with pytest.raises(VaultError, match="invalid project"):
        run(vault.put("a/b", SECRET))
    with pytest.raises(VaultError) as caught:
        run(vault.put(PROJECT, "bad\ud800surrogate-value"))
    assert "surrogate-value" not in str(caught.value) and caught.value.__context__ is None


def test_delete_removes_both_copies(vault: Vault, copy: MemoryClusterCopy) -> None:
    keep, drop = run(vault.put(PROJECT, "keep-this-one")), run(vault.put(PROJECT, SECRET))
    run(vault.delete(PROJECT, drop))
    run(vault.delete(PROJECT, drop))  # idempotent
    assert vault.uuids(PROJECT) == [keep] and set(copy.projects[PROJECT]) == {keep}
    with pytest.raises(VaultError, match="no secret"):
        vault.get(PROJECT, drop)


class FailingCopy(MemoryClusterCopy):
    fail = False

    async def save_many(self, project: str, blobs: Mapping[str, bytes]) -> None:
        if self.fail:
            raise ClusterCopyError("cluster unreachable")
        await super().save_many(project, blobs)

    async def remove(self, project: str, ref: str) -> None:
        if self.fail:
            raise ClusterCopyError("cluster unreachable")
        await super().remove(project, ref)


def test_a_failed_cluster_write_changes_nothing_locally(store: LocalStore, keys: MasterKey) -> None:
    copy = FailingCopy()
    vault = Vault(store, keys, copy)
    ref = run(vault.put(PROJECT, SECRET))
    copy.fail = True
    with pytest.raises(ClusterCopyError):
        run(vault.put(PROJECT, "never-stored-value"))
    with pytest.raises(ClusterCopyError):
        run(vault.delete(PROJECT, ref))
    assert vault.uuids(PROJECT) == [ref] and vault.get(PROJECT, ref) == SECRET


def test_rotation_reencrypts_every_secret_and_keeps_old_blobs_readable(
    vault: Vault, store: LocalStore, keys: MasterKey, copy: MemoryClusterCopy,
) -> None:
    values = {(p, f"value-{p}-{i}") for p in ("team-a", "team-b", "z") for i in range(5)}
    refs = {(p, run(vault.put(p, v))): v for p, v in values}
    old_blobs = {(p, r): raw_blob(store, p, r) for p, r in refs}

    new = MasterKey.generate("k2")
    assert run(vault.rotate(new)) == len(refs)
    assert vault.keys.current_id == "k2" and vault.keys.ids == ("k1", "k2")
    for (p, r), value in refs.items():
        assert vault.get(p, r) == value
        assert blob_key_id(raw_blob(store, p, r)) == "k2"
        assert copy.projects[p][r] == raw_blob(store, p, r)  # the cluster copy was rotated too
    assert run(vault.rotate(new)) == 0  # nothing left to do
    assert blob_key_id(raw_blob(store, PROJECT, run(vault.put(PROJECT, "after-rotation")))) == "k2"

    # A blob still under k1 (say, restored from an old copy) opens with k1 kept as previous key...
    (p, r), old = next(iter(old_blobs.items()))
    assert decrypt(vault.keys, p, r, old) == refs[(p, r)].encode()
    # ...and is refused by a keyring that lost k1.
    with pytest.raises(VaultError, match="does not hold"):
        decrypt(new, p, r, old)


def test_rotation_resumes_after_a_cluster_failure(store: LocalStore, keys: MasterKey) -> None:
    copy = FailingCopy()
    vault = Vault(store, keys, copy)
    refs = {p: run(vault.put(p, f"secret-of-{p}")) for p in ("p1", "p2")}
    copy.fail = True
    new = MasterKey.generate("k2")
    with pytest.raises(ClusterCopyError):
        run(vault.rotate(new))
    for p, r in refs.items():  # nothing lost, nothing half-done
        assert vault.get(p, r) == f"secret-of-{p}"
        assert blob_key_id(raw_blob(store, p, r)) == blob_key_id(copy.projects[p][r])
    copy.fail = False
    assert run(vault.rotate(new)) == 2
    assert {blob_key_id(copy.projects[p][r]) for p, r in refs.items()} == {"k2"}


def test_rotation_reports_secrets_it_cannot_decrypt(vault: Vault, store: LocalStore) -> None:
    good = run(vault.put(PROJECT, SECRET))
    bad = run(vault.put(PROJECT, "will-be-damaged"))
    blob = bytearray(raw_blob(store, PROJECT, bad))
    blob[-1] ^= 1
    write_blob(store, PROJECT, bad, bytes(blob))
    with pytest.raises(VaultError, match=f"rotated 1 secrets; 1 do not decrypt.*{bad}"):
        run(vault.rotate(MasterKey.generate("k2")))
    assert vault.get(PROJECT, good) == SECRET


def test_rotation_refuses_a_key_id_that_names_other_material(vault: Vault) -> None:
    with pytest.raises(VaultError, match="two different keys"):
        run(vault.rotate(MasterKey.generate("k1")))


def test_recovery_from_the_cluster_copy_after_losing_the_store(
    tmp_path: Path, keys: MasterKey, copy: MemoryClusterCopy,
) -> None:
    first = LocalStore(tmp_path / "lost")
    vault = Vault(first, keys, copy)
    refs = {run(vault.put(p, f"{p}-secret-{i}")): (p, f"{p}-secret-{i}") for p in ("a", "b") for i in range(3)}
    first.close()

    fresh = LocalStore(tmp_path / "new-volume")
    recovered = Vault(fresh, keys, copy)
    assert recovered.projects() == []
    for project in ("a", "b"):
        result = run(recovered.recover(project))
        assert (result.restored, result.repaired, result.refused) == (3, 0, ())
    for ref, (project, value) in refs.items():
        assert recovered.get(project, ref) == value
    assert run(recovered.recover("a")).restored == 0  # idempotent
    fresh.close()


def test_recovery_refuses_moved_blobs_and_repairs_the_cluster_copy(vault: Vault, copy: MemoryClusterCopy) -> None:
    a = run(vault.put(PROJECT, SECRET))
    b = run(vault.put(PROJECT, "second-secret"))
    intruder = "11111111-1111-4111-8111-111111111111"
    copy.projects[PROJECT][intruder] = copy.projects[PROJECT][a]  # a blob copied under another uuid
    del copy.projects[PROJECT][b]  # the Secret lost an entry (edited by hand)
    result = run(vault.recover(PROJECT))
    assert result.refused == (intruder,) and result.repaired == 1 and result.restored == 0
    assert vault.uuids(PROJECT) == sorted([a, b])
    assert b in copy.projects[PROJECT]


def test_masker_of_a_project(vault: Vault) -> None:
    run(vault.put(PROJECT, SECRET))
    run(vault.put("other", "not-this-project"))
    masker = vault.masker(PROJECT)
    assert masker.mask(f"login with {SECRET} and not-this-project") == "login with ******** and not-this-project"


def test_no_key_material_in_reprs(vault: Vault, keys: MasterKey) -> None:
    for text in (repr(keys), repr(vault), str(keys)):
        assert_clean(text, keys)
        assert "k1" in text


def test_master_key_secret_format(keys: MasterKey) -> None:
    data = keys.to_secret_data()
    assert base64.b64decode(data["current"]) == b"k1" and len(base64.b64decode(data["key.k1"])) == 32
    assert MasterKey.from_secret_data(data) == keys
    # a chart may give a single key without `current`
    assert MasterKey.from_secret_data({"key.k1": data["key.k1"]}) == keys
    rotated = keys.with_current(MasterKey.generate("k2"))
    assert MasterKey.from_secret_data(rotated.to_secret_data()) == rotated
    assert rotated.without("k1").ids == ("k2",)
    with pytest.raises(VaultError, match="current key"):
        rotated.without("k2")
    short = base64.b64encode(b"x" * 16).decode()
    with pytest.raises(VaultError, match="16 bytes, want 32") as caught:
        MasterKey.from_secret_data({"key.k1": short})
    assert short not in str(caught.value)
    with pytest.raises(VaultError, match="no `current`"):
        MasterKey.from_secret_data({k: v for k, v in rotated.to_secret_data().items() if k != "current"})


def test_secret_names_are_valid_and_distinct() -> None:
    assert vault_secret_name("team-a") == "stead-vault-team-a"
    assert vault_secret_name("key") != "stead-vault-key"  # that name is the master key's
    odd = [vault_secret_name(p) for p in ("Team_A", "team_a", "TEAM-A")]
    assert len(set(odd)) == 3
    for name in odd:
        assert name.startswith("stead-vault-team-a-") and name == name.lower() and len(name) <= 63


class FakeApi:
    """An API server for Secrets in one namespace, with scripted failures: enough for 404/409 paths."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.create_race: dict[str, Any] | None = None  # someone else's Secret appears just before our POST
        self.conflicts = 0  # the next N PATCHes answer 409
        self.version = 0

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        self.calls.append((method, path))
        name = path.rsplit("/", 1)[1] if path.count("/") == 6 else None
        if method == "GET" and name is not None:
            if name not in self.secrets:
                raise ApiError(404, f'secrets "{name}" not found')
            return self.secrets[name]
        if method == "POST":
            name = body["metadata"]["name"]
            if self.create_race is not None:
                self.secrets[name], self.create_race = self.create_race, None
            if name in self.secrets:
                raise ApiError(409, f'secrets "{name}" already exists')
            return self._store(name, body)
        if method == "PATCH":
            assert name is not None and content_type == "application/merge-patch+json"
            if self.conflicts:
                self.conflicts -= 1
                raise ApiError(409, "the object has been modified")
            if name not in self.secrets:
                raise ApiError(404, f'secrets "{name}" not found')
            current = self.secrets[name]
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "the object has been modified")
            data = dict(current.get("data") or {})
            for k, v in (body.get("data") or {}).items():
                if v is None:
                    data.pop(k, None)
                else:
                    data[k] = v
            return self._store(name, {**current, "data": data})
        if method == "DELETE":
            assert name is not None
            self.secrets.pop(name, None)
            return {}
        raise AssertionError(f"unexpected {method} {path}")

    def _store(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        meta = {**body.get("metadata", {}), "name": name, "resourceVersion": str(self.version), "uid": "u"}
        self.secrets[name] = {**body, "metadata": meta}
        return self.secrets[name]


def test_secret_cluster_copy_creates_patches_and_removes() -> None:
    api = FakeApi()
    copy = SecretClusterCopy(api, "stead-system")
    a, b = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
    run(copy.save(PROJECT, a, b"blob-a"))  # 404 -> create
    run(copy.save(PROJECT, b, b"blob-b"))  # patch
    secret = api.secrets["stead-vault-team-a"]
    assert secret["metadata"]["labels"] == {
        "app.kubernetes.io/part-of": "stead", "stead.dev/vault": "true", "stead.dev/project": PROJECT}
    assert secret["data"] == {a: base64.b64encode(b"blob-a").decode(), b: base64.b64encode(b"blob-b").decode()}
    assert run(copy.load(PROJECT)) == {a: b"blob-a", b: b"blob-b"}
    run(copy.remove(PROJECT, a))
    assert run(copy.load(PROJECT)) == {b: b"blob-b"}
    run(copy.remove(PROJECT, b))  # the last one: the empty Secret goes
    assert "stead-vault-team-a" not in api.secrets and run(copy.load(PROJECT)) == {}
    run(copy.remove(PROJECT, b))  # absent Secret: nothing to do


def test_secret_cluster_copy_handles_create_races_and_conflicts() -> None:
    api = FakeApi()
    copy = SecretClusterCopy(api, "ns")
    a, b = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
    api.create_race = {"metadata": {"name": "stead-vault-team-a"}, "data": {b: base64.b64encode(b"theirs").decode()}}
    run(copy.save(PROJECT, a, b"ours"))  # PATCH 404, POST 409, PATCH ok
    assert run(copy.load(PROJECT)) == {a: b"ours", b: b"theirs"}
    api.conflicts = 2
    run(copy.save(PROJECT, a, b"again"))
    assert run(copy.load(PROJECT))[a] == b"again"
    api.conflicts = 99
    with pytest.raises(ClusterCopyError, match="still conflicting"):
        run(copy.save(PROJECT, a, b"never"))


def test_master_key_is_created_once_and_survives_a_create_race() -> None:
    api = FakeApi()
    first = run(load_or_create_master_key(api, "ns"))
    assert run(load_or_create_master_key(api, "ns")) == first
    assert [m for m, _ in api.calls].count("POST") == 1
    assert api.secrets["stead-vault-key"]["metadata"]["labels"]["stead.dev/vault-key"] == "true"

    racer = FakeApi()
    winner = MasterKey.generate("winner")
    racer.create_race = {"metadata": {"name": "stead-vault-key"}, "data": winner.to_secret_data()}
    assert run(load_or_create_master_key(racer, "ns")) == winner


def test_master_key_rotation_keeps_previous_keys_and_retries_conflicts() -> None:
    api = FakeApi()
    first = run(load_or_create_master_key(api, "ns"))
    api.conflicts = 1
    rotated = run(rotate_master_key(api, "ns"))
    assert rotated.current_id != first.current_id and set(first.ids) < set(rotated.ids)
    assert run(load_or_create_master_key(api, "ns")) == rotated


def test_api_errors_become_vault_errors_without_secrets() -> None:
    class Down(FakeApi):
        async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                          params: dict[str, str] | None = None) -> dict[str, Any]:
            raise ApiError(500, "etcdserver: request timed out")

    with pytest.raises(ClusterCopyError, match="save failed: 500") as caught:
        run(SecretClusterCopy(Down(), "ns").save(PROJECT, "11111111-1111-4111-8111-111111111111", b"x"))
    assert isinstance(caught.value.__cause__, ApiError)
    with pytest.raises(VaultError, match="read failed: 500"):
        run(load_or_create_master_key(Down(), "ns"))


# --- owners: a secret belongs to the object that stored it ------------------------------------

OWNER = "Blueprint/web"


def test_a_secret_is_refused_to_every_reference_but_its_owners(vault: Vault) -> None:
    ref = run(vault.put(PROJECT, SECRET, owner=OWNER))
    assert vault.get(PROJECT, ref, owner=OWNER) == SECRET
    assert vault.owner_of(PROJECT, ref) == OWNER
    with pytest.raises(VaultError) as other:
        vault.get(PROJECT, ref, owner="Blueprint/eve")
    absent = "11111111-1111-4111-8111-111111111111"
    with pytest.raises(VaultError) as missing:
        vault.get(PROJECT, absent, owner="Blueprint/eve")
    # Not owned and absent read the same: a reference learns nothing of secrets that are not its own.
    assert str(other.value).replace(ref, "U") == str(missing.value).replace(absent, "U")
    assert SECRET not in str(other.value)
    with pytest.raises(VaultError):  # another namespace's uuid is simply not there
        vault.get("eve", ref, owner=OWNER)


def test_the_owner_is_authenticated_not_just_written_in_clear(vault: Vault, store: LocalStore) -> None:
    ref = run(vault.put(PROJECT, SECRET, owner="Blueprint/abc"))
    blob = raw_blob(store, PROJECT, ref)
    forged = blob.replace(b"Blueprint/abc", b"Blueprint/eve")
    assert forged != blob
    write_blob(store, PROJECT, ref, forged)
    with pytest.raises(VaultError, match="refused"):
        vault.get(PROJECT, ref, owner="Blueprint/eve")


def test_delete_by_another_owner_removes_nothing(vault: Vault, copy: MemoryClusterCopy) -> None:
    ref = run(vault.put(PROJECT, SECRET, owner=OWNER))
    assert run(vault.delete(PROJECT, ref, owner="Blueprint/eve")) is False
    assert run(vault.delete("eve", ref, owner=OWNER)) is False
    assert vault.get(PROJECT, ref, owner=OWNER) == SECRET and ref in copy.projects[PROJECT]
    assert run(vault.delete(PROJECT, ref, owner=OWNER)) is True
    assert vault.owner_of(PROJECT, ref) is None and ref not in copy.projects.get(PROJECT, {})


def test_another_replica_fetches_a_new_entry_from_the_cluster_copy_and_writes_nothing(
    vault: Vault, keys: MasterKey, copy: MemoryClusterCopy, tmp_path: Path,
) -> None:
    """Issue 25, finding 7: the entry written by the replica that served the mutating webhook is
    read from the cluster copy by the replica that serves the validating one, or holds the project."""
    other_store = LocalStore(tmp_path / "other")
    try:
        other = Vault(other_store, keys, copy)
        ref = run(vault.put(PROJECT, SECRET, owner=OWNER))
        assert other.owner_of(PROJECT, ref) is None  # its own store has not seen it
        before = {project: dict(blobs) for project, blobs in copy.projects.items()}
        assert run(other.refreshed(PROJECT, ref, owner=OWNER)) == SECRET
        assert other.owner_of(PROJECT, ref) == OWNER
        assert run(other.fetch(PROJECT, [ref, "not-a-uuid", "00000000-0000-4000-8000-00000000dead"])) == 0
        assert run(other.fetch("eve", [ref])) == 0  # another project's entry stays where it is
        with pytest.raises(VaultError):
            run(other.refreshed("eve", ref, owner=OWNER))
        assert copy.projects == before  # reading is all it did
    finally:
        other_store.close()


def test_entries_list_owner_and_age_and_rotation_keeps_both(vault: Vault) -> None:
    ref = run(vault.put(PROJECT, SECRET, owner=OWNER))
    [entry] = vault.entries(PROJECT)
    assert (entry.uuid, entry.owner) == (ref, OWNER) and entry.created > 0
    run(vault.rotate(MasterKey.generate("k2")))
    assert vault.entries(PROJECT) == [entry]
    assert vault.get(PROJECT, ref, owner=OWNER) == SECRET


def test_version_1_blobs_still_decrypt_but_belong_to_nobody(vault: Vault, store: LocalStore, keys: MasterKey) -> None:
    ref = "22222222-2222-4222-8222-222222222222"
    header = bytes((1, 2)) + b"k1"
    aead = keys.aead("k1")
    assert aead is not None
    nonce = b"\x00" * NONCE_BYTES
    aad = b"".join([b"stead.dev/vault", header, len(PROJECT).to_bytes(2, "big"), PROJECT.encode(),
                    (36).to_bytes(2, "big"), ref.encode()])
    write_blob(store, PROJECT, ref, header + nonce + aead.encrypt(nonce, b"legacy-value", aad))
    assert vault.get(PROJECT, ref) == "legacy-value"
    assert vault.owner_of(PROJECT, ref) == ""
    with pytest.raises(VaultError):
        vault.get(PROJECT, ref, owner=OWNER)
