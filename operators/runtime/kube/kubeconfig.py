"""The current context of a kubeconfig, as the `stead` commands need it: its user's credentials, its
namespace, and its cluster (the API server's address and how to check its certificate).

Read with PyYAML alone, not with the Kubernetes client library: importing that costs about a
second on a small machine, more than a whole `stead config get` or `stead service list` should. Files
merge as kubectl merges them (`$KUBECONFIG` is a list): the first file that sets `current-context` sets
it, and of the contexts, users and clusters of the same name the first one counts. Relative paths in an
entry are relative to the file that holds it.

What is read: `token`, `tokenFile`, `client-certificate`/`client-key` (paths) and
`client-certificate-data`/`client-key-data` (inline, base64), an `exec` plugin's configuration (run by
the cluster commands, `operators.runtime.kube.light`; `stead config` asks for a token instead), whether
the user has an `auth-provider` or a `username`/`password`; of the cluster, `server`,
`certificate-authority`(`-data`) and `insecure-skip-tls-verify`.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl


class KubeconfigError(Exception):
    """A kubeconfig that cannot be read or does not name a user."""


@dataclass(frozen=True)
class KubeconfigUser:
    """The current context's user: where it was found, and what it authenticates with."""

    source: Path
    context: str
    name: str
    namespace: str | None = None
    token: str | None = None
    token_file: Path | None = None
    client_certificate: Path | bytes | None = None  # a file, or the PEM itself (inline data)
    client_key: Path | bytes | None = None
    plugin: str | None = None  # "exec" or "auth-provider": credentials only a plugin can make
    exec: Mapping[str, Any] | None = None  # the exec plugin's configuration, as written
    password: bool = False  # a username and password (basic authentication, which Kubernetes dropped in 1.19)

    def describe(self) -> str:
        return f'{self.source} (context "{self.context}", user "{self.name}")'


@dataclass(frozen=True)
class KubeconfigCluster:
    """The current context's cluster: where its API server is, and how its certificate is checked."""

    source: Path
    name: str
    server: str
    certificate_authority: Path | bytes | None = None  # a file, or the PEM itself (inline data)
    insecure: bool = False  # insecure-skip-tls-verify
    entry: Mapping[str, Any] | None = None  # as written: an exec plugin with provideClusterInfo is given it


def kubeconfig_paths(explicit: Path | None = None) -> list[Path]:
    """Where kubectl would look: the explicit file, else `$KUBECONFIG` (a list), else ~/.kube/config."""
    if explicit is not None:
        return [explicit]
    listed = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path.home() / ".kube" / "config"]


def load_cert_chain(context: ssl.SSLContext, certificate: Path | bytes, key: Path | bytes) -> None:
    """Present the kubeconfig user's client certificate (a file, or the PEM itself) on `context`. The ssl module
    reads files only: inline PEMs go through a private directory (0700, the files 0600), removed at once. One
    loader for the cluster commands' client and the API server's (`operators.runtime.cli.client`)."""
    if isinstance(certificate, Path) and isinstance(key, Path):
        context.load_cert_chain(str(certificate), str(key))
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="stead-") as directory:
        files = []
        for name, pem in (("client.crt", certificate), ("client.key", key)):
            if isinstance(pem, Path):
                files.append(str(pem))
                continue
            path = Path(directory) / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(pem)
            files.append(str(path))
        context.load_cert_chain(files[0], files[1])


def current_user(paths: list[Path]) -> KubeconfigUser | None:
    """The current context's user of the merged files; None when none of the files exists."""
    found = current_context(paths, with_cluster=False)
    return None if found is None else found[0]


def current_context(paths: list[Path], with_cluster: bool = True
                    ) -> tuple[KubeconfigUser, KubeconfigCluster | None] | None:
    """The current context's user and (`with_cluster`) its cluster, of the merged files; None when none of
    the files exists."""
    documents = _documents(paths)
    if not documents:
        return None
    current = next((str(d["current-context"]) for _, d in documents if d.get("current-context")), None)
    if current is None:
        raise KubeconfigError(f"{', '.join(str(p) for p, _ in documents)}: no current-context")
    context = _named(documents, "contexts", current)
    if context is None:
        raise KubeconfigError(f'{", ".join(str(p) for p, _ in documents)}: no context "{current}"')
    _, context_entry = context
    user = _user(documents, current, context_entry)
    return user, _cluster(documents, current, context_entry) if with_cluster else None


def _documents(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    import yaml

    documents: list[tuple[Path, dict[str, Any]]] = []
    for path in paths:
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as error:
            raise KubeconfigError(f"{path}: cannot be read: {error.strerror}") from None
        try:
            # libyaml's safe loader where PyYAML has it: a kubeconfig of many clusters, their CAs inline, is
            # tens of KiB, which the pure-Python one takes tens of milliseconds to read
            document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        except yaml.YAMLError as error:
            raise KubeconfigError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
        if not isinstance(document, dict):
            raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
        documents.append((path, document))
    return documents


def _pem(source: Path, entry: Mapping[str, Any], key: str, what: str) -> Path | bytes | None:
    """`key`-data (base64 of a PEM) or `key` (a file, relative to `source`'s directory) of an entry."""
    inline = entry.get(f"{key}-data")
    if inline:
        try:
            return base64.b64decode(str(inline), validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigError(f"{source}: {what}: {key}-data is not valid base64") from None
    value = entry.get(key)
    return (source.parent / Path(str(value)).expanduser()) if value else None


def _user(documents: list[tuple[Path, dict[str, Any]]], current: str, context_entry: Mapping[str, Any]
          ) -> KubeconfigUser:
    user_name = str(context_entry.get("user") or "")
    namespace = context_entry.get("namespace")
    found = _named(documents, "users", user_name) if user_name else None
    if found is None:
        raise KubeconfigError(f'{", ".join(str(p) for p, _ in documents)}: context "{current}" names no user '
                              f'entry{f" ({user_name})" if user_name else ""}')
    source, user = found
    token_file = user.get("tokenFile")
    plugin = "exec" if user.get("exec") else "auth-provider" if user.get("auth-provider") else None
    exec_config = user.get("exec")
    what = f'user "{user_name}"'
    return KubeconfigUser(
        source=source, context=current, name=user_name, namespace=str(namespace) if namespace else None,
        token=str(user["token"]) if user.get("token") else None,
        token_file=(source.parent / Path(str(token_file)).expanduser()) if token_file else None,
        client_certificate=_pem(source, user, "client-certificate", what),
        client_key=_pem(source, user, "client-key", what), plugin=plugin,
        exec=exec_config if isinstance(exec_config, dict) else None,
        password=bool(user.get("username") and user.get("password")))


def _cluster(documents: list[tuple[Path, dict[str, Any]]], current: str, context_entry: Mapping[str, Any]
             ) -> KubeconfigCluster:
    name = str(context_entry.get("cluster") or "")
    found = _named(documents, "clusters", name) if name else None
    if found is None or not found[1].get("server"):
        raise KubeconfigError(f'{", ".join(str(p) for p, _ in documents)}: context "{current}" names no cluster '
                              f'entry with a server{f" ({name})" if name else ""}')
    source, cluster = found
    return KubeconfigCluster(
        source=source, name=name, server=str(cluster["server"]),
        certificate_authority=_pem(source, cluster, "certificate-authority", f'cluster "{name}"'),
        insecure=cluster.get("insecure-skip-tls-verify") is True, entry=cluster)


def _named(documents: list[tuple[Path, dict[str, Any]]], section: str, name: str
           ) -> tuple[Path, dict[str, Any]] | None:
    """The first `section` entry called `name` (its inner mapping), and the file it is in."""
    for path, document in documents:
        for entry in document.get(section) or []:
            if isinstance(entry, dict) and str(entry.get("name")) == name:
                inner = entry.get(section.removesuffix("s"))
                return path, inner if isinstance(inner, dict) else {}
    return None
