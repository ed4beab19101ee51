"""The vault against a real API server: the master key Secret, the per-project copies, recovery, rotation."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from operators.cluster import ClusterInfo
from operators.runtime.core.store import LocalStore
from operators.runtime.kube.client import KubeClient, load_access
from operators.runtime.secrets import (
    KEY_SECRET,
    VAULT_DB,
    SecretClusterCopy,
    Vault,
    blob_key_id,
    load_or_create_master_key,
    retire_master_key,
    rotate_master_key,
)
from tests.e2e.conftest import Kubectl

T = TypeVar("T")
VALUES = {"team-a": ["db-password-Zx81!", "api-token-0f3c9a77", "ssh key\nline two of it"],
          "team-b": ["team-b-only-secret"]}


def with_kube(cluster: ClusterInfo, body: Callable[[KubeClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with KubeClient(load_access(cluster.kubeconfig)) as kube:
            return await body(kube)
    return asyncio.run(main())


def secret_json(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    return dict(json.loads(kubectl("get", "secret", name, "-n", namespace, "-o", "json").stdout))


def assert_no_plaintext(text: str) -> None:
    for values in VALUES.values():
        for value in values:
            for form in (value, base64.b64encode(value.encode()).decode(), *value.splitlines()):
                assert form not in text, "a secret value reached the cluster"


def test_master_key_secret_is_created_once_and_reused(cluster: ClusterInfo, kubectl: Kubectl, namespace: str) -> None:
    async def body(kube: KubeClient) -> None:
        # Two replicas starting at once: one creates, the other loses the race (409) and reads.
        first, second = await asyncio.gather(load_or_create_master_key(kube, namespace),
                                             load_or_create_master_key(kube, namespace))
        assert first == second
        version = secret_json(kubectl, namespace, KEY_SECRET)["metadata"]["resourceVersion"]
        assert await load_or_create_master_key(kube, namespace) == first
        assert secret_json(kubectl, namespace, KEY_SECRET)["metadata"]["resourceVersion"] == version

    with_kube(cluster, body)
    secret = secret_json(kubectl, namespace, KEY_SECRET)
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/part-of": "stead", "stead.dev/vault-key": "true"}
    current = base64.b64decode(secret["data"]["current"]).decode()
    assert set(secret["data"]) == {"current", f"key.{current}"}
    assert len(base64.b64decode(secret["data"][f"key.{current}"])) == 32


def test_put_writes_only_ciphertext_into_the_project_secret(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str, tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path / "store")

    async def body(kube: KubeClient) -> dict[str, dict[str, str]]:
        vault = Vault(store, await load_or_create_master_key(kube, namespace), SecretClusterCopy(kube, namespace))
        refs = {p: {await vault.put(p, v): v for v in values} for p, values in VALUES.items()}
        for project, secrets in refs.items():
            for ref, value in secrets.items():
                assert vault.get(project, ref) == value
        return refs

    refs = with_kube(cluster, body)
    secret = secret_json(kubectl, namespace, "stead-vault-team-a")
    assert secret["metadata"]["labels"] == {
        "app.kubernetes.io/part-of": "stead", "stead.dev/vault": "true", "stead.dev/project": "team-a"}
    assert set(secret["data"]) == set(refs["team-a"])
    env, db = store.open_db(VAULT_DB)
    with env.begin(db=db) as txn:
        for ref, encoded in secret["data"].items():
            assert base64.b64decode(encoded) == txn.get(f"team-a/{ref}".encode())  # the same blob
    listing = kubectl("get", "secret", "-n", namespace, "-o", "yaml").stdout
    assert "stead-vault-team-b" in listing
    assert_no_plaintext(listing)
    store.close()


def test_delete_removes_the_entry_and_the_empty_secret(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str, tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path / "store")

    async def body(kube: KubeClient) -> None:
        vault = Vault(store, await load_or_create_master_key(kube, namespace), SecretClusterCopy(kube, namespace))
        keep, drop = await vault.put("p", "keep-me-1234"), await vault.put("p", "drop-me-1234")
        await vault.delete("p", drop)
        assert set(secret_json(kubectl, namespace, "stead-vault-p")["data"]) == {keep}
        await vault.delete("p", keep)
        await vault.delete("p", keep)  # again: nothing left to remove, no error

    with_kube(cluster, body)
    assert kubectl("get", "secret", "stead-vault-p", "-n", namespace, check=False).returncode != 0
    store.close()


def test_an_empty_store_recovers_every_secret_from_the_cluster(
    cluster: ClusterInfo, namespace: str, tmp_path: Path,
) -> None:
    lost = LocalStore(tmp_path / "lost-volume")

    async def write(kube: KubeClient) -> dict[tuple[str, str], str]:
        vault = Vault(lost, await load_or_create_master_key(kube, namespace), SecretClusterCopy(kube, namespace))
        return {(p, await vault.put(p, v)): v for p, values in VALUES.items() for v in values}

    refs = with_kube(cluster, write)
    lost.close()
    fresh = LocalStore(tmp_path / "new-volume")

    async def recover(kube: KubeClient) -> None:
        copy = SecretClusterCopy(kube, namespace)
        vault = Vault(fresh, await load_or_create_master_key(kube, namespace), copy)
        assert vault.projects() == []
        projects = await copy.projects()
        assert projects == sorted(VALUES)
        for project in projects:
            result = await vault.recover(project)
            assert result.restored == len(VALUES[project]) and result.refused == ()
        for (project, ref), value in refs.items():
            assert vault.get(project, ref) == value

    with_kube(cluster, recover)
    fresh.close()


def test_rotation_reaches_the_cluster_copy_and_survives_a_restart(
    cluster: ClusterInfo, kubectl: Kubectl, namespace: str, tmp_path: Path,
) -> None:
    store = LocalStore(tmp_path / "store")

    async def body(kube: KubeClient) -> None:
        copy = SecretClusterCopy(kube, namespace)
        old = await load_or_create_master_key(kube, namespace)
        vault = Vault(store, old, copy)
        refs = {(p, await vault.put(p, v)): v for p, values in VALUES.items() for v in values}

        new = await rotate_master_key(kube, namespace)
        assert new.current_id != old.current_id and old.current_id in new.ids
        assert await vault.rotate(new) == len(refs)
        for project in VALUES:
            data = secret_json(kubectl, namespace, f"stead-vault-{project}")["data"]
            assert {blob_key_id(base64.b64decode(b)) for b in data.values()} == {new.current_id}

        # Every replica has rotated: the old key can go. A restarted operator with an empty
        # store reloads the keyring and recovers everything under the new key.
        await retire_master_key(kube, namespace, old.current_id)
        restarted_store = LocalStore(tmp_path / "restarted")
        restarted = Vault(restarted_store, await load_or_create_master_key(kube, namespace), copy)
        assert restarted.keys.ids == (new.current_id,)
        for project in VALUES:
            await restarted.recover(project)
        for (project, ref), value in refs.items():
            assert restarted.get(project, ref) == value
        restarted_store.close()

    with_kube(cluster, body)
    assert_no_plaintext(kubectl("get", "secret", "-n", namespace, "-o", "yaml").stdout)
    store.close()
