"""References from a spec to other objects of its namespace, shared by the kinds' models."""

from __future__ import annotations

from pydantic import Field

from operators.runtime.core.kinds import Model


class SecretKeyRef(Model):
    """A key of a Kubernetes Secret in the object's own namespace (never another: the namespace is the
    tenant boundary). It is read with a token of the namespace's service account, so that account
    needs get on the Secret."""

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                      description="The Secret's name (a Kubernetes object name).")
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$",
                     description="The key in the Secret's data.")
