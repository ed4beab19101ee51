"""The current user of a kubeconfig, as `stead config` needs it: credentials and namespace.

Read with PyYAML alone, not with the Kubernetes client library: importing that costs about a
third of a second, more than a whole `stead config get` should. Files merge as kubectl merges
them (`$KUBECONFIG` is a list): the first file that sets `current-context` sets it, and of the
contexts and users of the same name the first one counts. Relative paths in a user entry are
relative to the file that holds it.

What is read: `token`, `tokenFile`, `client-certificate`/`client-key` (paths) and
`client-certificate-data`/`client-key-data` (inline, base64). Exec and auth-provider plugins are
recognised but not run: `stead config` says so and asks for a token instead.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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

    def describe(self) -> str:
        return f'{self.source} (context "{self.context}", user "{self.name}")'


def kubeconfig_paths(explicit: Path | None = None) -> list[Path]:
    """Where kubectl would look: the explicit file, else `$KUBECONFIG` (a list), else ~/.kube/config."""
    if explicit is not None:
        return [explicit]
    listed = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path.home() / ".kube" / "config"]


def current_user(paths: list[Path]) -> KubeconfigUser | None:
    """The current context's user of the merged files; None when none of the files exists."""
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
            document = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise KubeconfigError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
        if not isinstance(document, dict):
            raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
        documents.append((path, document))
    if not documents:
        return None
    current = next((str(d["current-context"]) for _, d in documents if d.get("current-context")), None)
    if current is None:
        raise KubeconfigError(f"{', '.join(str(p) for p, _ in documents)}: no current-context")
    context = _named(documents, "contexts", current)
    if context is None:
        raise KubeconfigError(f'{", ".join(str(p) for p, _ in documents)}: no context "{current}"')
    _, context_entry = context
    user_name = str(context_entry.get("user") or "")
    namespace = context_entry.get("namespace")
    found = _named(documents, "users", user_name) if user_name else None
    if found is None:
        raise KubeconfigError(f'{", ".join(str(p) for p, _ in documents)}: context "{current}" names no user '
                              f'entry{f" ({user_name})" if user_name else ""}')
    source, user = found
    base = source.parent

    def file(key: str) -> Path | None:
        value = user.get(key)
        return (base / Path(str(value)).expanduser()) if value else None

    def pem(key: str) -> Path | bytes | None:
        inline = user.get(f"{key}-data")
        if inline:
            try:
                return base64.b64decode(str(inline), validate=True)
            except (binascii.Error, ValueError):
                raise KubeconfigError(f'{source}: user "{user_name}": {key}-data is not valid base64') from None
        return file(key)

    plugin = "exec" if user.get("exec") else "auth-provider" if user.get("auth-provider") else None
    return KubeconfigUser(
        source=source, context=current, name=user_name, namespace=str(namespace) if namespace else None,
        token=str(user["token"]) if user.get("token") else None, token_file=file("tokenFile"),
        client_certificate=pem("client-certificate"), client_key=pem("client-key"), plugin=plugin)


def _named(documents: list[tuple[Path, dict[str, Any]]], section: str, name: str
           ) -> tuple[Path, dict[str, Any]] | None:
    """The first `section` entry called `name` (its inner mapping), and the file it is in."""
    for path, document in documents:
        for entry in document.get(section) or []:
            if isinstance(entry, dict) and str(entry.get("name")) == name:
                inner = entry.get(section.removesuffix("s"))
                return path, inner if isinstance(inner, dict) else {}
    return None
