"""The Environment kind (docs/environments.md): a Fuel-style environment and its nodes.

These models are the schema: `stead crds` generates the CRD from them, the admission webhook
and the pipeline validate with them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from operators.runtime import Model, Resource, SecretKeyRef, StatusBase

ENVIRONMENT = Resource("Environment", "environments")

Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
Level = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z]([a-z0-9_-]*[a-z0-9])?$"),
]


class Node(Model):
    """One node of the environment."""

    name: Name = Field(description="The node's name, unique in the environment.")
    fqdn: str | None = Field(None, description="Fully qualified domain name; hierarchy lookups by node use it.")
    roles: list[Name] = Field(
        min_length=1, description="Roles of the node (for example controller, compute); at least one."
    )
    address: str | None = Field(None, description="The address deployment tasks reach the node at.")
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels of the node.")


class SshAccess(Model):
    """How deployment graph tasks reach the nodes: SSH to each node's `address`, with a private key and the
    nodes' known host keys from Secrets of the environment's namespace (a host key that is not known fails
    the task: it is never accepted on first sight)."""

    user: str = Field("root", min_length=1, max_length=64, pattern=r"^[a-z_][a-z0-9_.-]*$",
                      description="The user to log in as (default root).")
    port: int = Field(22, ge=1, le=65535, description="The SSH port of every node (default 22).")
    private_key: SecretKeyRef = Field(description="The private key (OpenSSH or PEM format), never shown anywhere.")
    known_hosts: SecretKeyRef = Field(
        description="The nodes' host keys, in OpenSSH known_hosts format (`ssh-keyscan -p PORT ADDRESS...`).")


class AutoRun(Model):
    """When Stead itself creates a GraphRun on the environment (docs/graphs.md, "Runs Stead starts"). Off
    unless asked: each trigger is opted into on its own."""

    on_config_change: bool = Field(
        False, description="A change of a configuration value a task names in refreshOn re-runs that task and "
        "its successors, on the nodes whose values changed.")
    on_node_added: bool = Field(
        False, description="A node added to spec.nodes has the tasks whose reexecuteOn names deploy_changes run "
        "(on every node, as Fuel's deploy_changes did).")
    debounce_seconds: int = Field(
        10, ge=0, le=3600, description="How long the values must stay unchanged before the run is created "
        "(default 10): a burst of edits makes one run, naming every key it changed.")
    dry_run: bool = Field(False, description="The runs created are dry runs: each shows what would run, and "
                          "nothing runs on any node.")
    graph_type: Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-zA-Z0-9_-]+$")] = Field(
        "default", description="The graph type whose tasks are re-run (default 'default').")


class GraphSettings(Model):
    """The environment's settings for its deployment graphs."""

    auto_run: AutoRun | None = Field(None, description="Runs Stead creates by itself (unset: none).")


class EnvironmentSpec(Model):
    """An environment (a Fuel cluster): its release, nodes, configuration hierarchy, components and plugins."""

    release: Name = Field(description="The release the environment is deployed from, e.g. mitaka-9.0.")
    nodes: list[Node] = Field(
        default_factory=list,
        description="The nodes of the environment, with their roles; names are unique.",
        # The API server itself refuses duplicate names (naming the field), so that the check
        # costs no webhook round trip and holds even while the operator is down.
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    hierarchy_levels: list[Level] = Field(
        default_factory=lambda: ["role", "node"],
        min_length=1,
        description="Ordered levels of the configuration hierarchy below the environment itself, which is "
        "the root (the cluster level): default role, node. Unique, none empty.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    components: list[Name] = Field(
        default_factory=list, description="Enabled configuration components (ConfigComponent names)."
    )
    plugins: list[Name] = Field(default_factory=list, description="Enabled plugins, by name.")
    ssh: SshAccess | None = Field(None, description="How deployment graph tasks reach the nodes (GraphRuns need it).")
    graphs: GraphSettings | None = Field(None, description="Settings of its deployment graphs (runs Stead creates).")


class EnvironmentStatus(StatusBase):
    """Written by Stead."""

    node_count: int | None = Field(None, description="How many nodes the environment has.")
    roles: dict[str, int] | None = Field(None, description="Each role, with how many nodes have it.")
    missing_components: list[str] | None = Field(
        None, description="Enabled components that no ConfigComponent of the namespace defines (also shown "
        "by the ComponentsFound condition)."
    )
