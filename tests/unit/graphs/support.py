"""Shared fixtures of the graph tests: a release graph of stage anchors, the environment of the
fuel-library test (controllers and computes with Fuel's tags), and node data for its conditions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from operators.graphs import STAGES, GraphNode, Task, load_tasks
from operators.runtime.api.auth import Access, Identity

FUEL_LIBRARY = Path(__file__).resolve().parents[2] / "data/fuel-library/openstack-network-tasks.yaml"
"""Fuel's published task file, in the repository with its licence and origin (tests/data/fuel-library/)."""

EXTERNAL = {
    # tasks of other fuel-library modules that openstack-network's tasks name, with the tags they run on
    "netconfig": ["primary-controller", "controller", "compute"],
    "primary-database": ["primary-database"],
    "database": ["database"],
    "primary-keystone": ["primary-keystone"],
    "keystone": ["keystone"],
    "primary-openstack-controller": ["primary-controller"],
    "openstack-controller": ["controller"],
    "top-role-compute": ["compute"],
    "openstack-haproxy": ["primary-controller", "controller"],
    "primary-rabbitmq": ["primary-rabbitmq"],
    "rabbitmq": ["rabbitmq"],
}


def t(task_id: str, type_: str = "shell", **fields: Any) -> Task:
    """A task from keyword fields (python names)."""
    return Task.model_validate({"id": task_id, "type": type_, **fields})


def stage_tasks() -> list[Task]:
    """The release's stage anchors, each requiring the previous one."""
    return [t(name, "stage", requires=[STAGES[i - 1]] if i else []) for i, name in enumerate(STAGES)]


def release_tasks() -> list[Task]:
    """Stage anchors plus the external tasks, in the deploy stage."""
    out = stage_tasks()
    for task_id, tags in EXTERNAL.items():
        out.append(t(task_id, "puppet", version="2.1.0", tags=tags, requires=["deploy_start"],
                     required_for=["deploy_end"],
                     parameters={"puppet_manifest": f"/etc/puppet/{task_id}.pp", "timeout": 600}))
    # the primary database/keystone/rabbitmq come before the others, as in fuel-library
    return out


def fuel_library_tasks() -> list[Task]:
    return load_tasks(FUEL_LIBRARY.read_text(), str(FUEL_LIBRARY))


def environment_nodes() -> list[GraphNode]:
    primary = ("primary-controller", "primary-database", "primary-keystone", "primary-neutron", "primary-rabbitmq")
    other = ("controller", "database", "keystone", "neutron", "rabbitmq")
    return [
        GraphNode("node-1", ("primary-controller",), primary, address="127.0.0.2"),
        GraphNode("node-2", ("controller",), other, address="127.0.0.3"),
        GraphNode("node-3", ("controller",), other, address="127.0.0.4"),
        GraphNode("node-4", ("compute",), ("compute",), address="127.0.0.5"),
        GraphNode("node-5", ("compute",), ("compute",), address="127.0.0.6"),
    ]


def node_data(node: GraphNode, *, l3_ha: bool = False, quantum: bool = True) -> dict[str, Any]:
    """What openstack-network's conditions read of a node's deployment data."""
    nodes = {
        "node-1": {"node_roles": ["primary-controller"], "network_roles": {"mgmt/messaging": "10.0.0.1"}},
        "node-2": {"node_roles": ["controller"], "network_roles": {"mgmt/messaging": "10.0.0.2"}},
        "node-4": {"node_roles": ["compute"], "network_roles": {"mgmt/messaging": "10.0.0.4"}},
    }
    return {
        "fqdn": f"{node.name}.domain.tld",
        "roles": list(node.roles),
        "quantum": quantum,
        "quantum_settings": {"L2": {"segmentation_type": "vlan"}},
        "mysql": {"root_password": "x"},
        "network_metadata": {"vips": {"management": {"ipaddr": "10.0.0.10"}}, "nodes": nodes},
        "public_ssl": {"horizon": False},
        "access": {"tenant": "admin"},
        "debug": False,
        "neutron_advanced_configuration": {"neutron_l3_ha": l3_ha},
        "rabbit": {"password": "r"},
        "ceilometer": {"enabled": False},
        "network_scheme": {"version": "1.1"},
        "configuration": {},
        "nova": {"state_path": "/var/lib/nova"},
    }


class NamespaceAuth:
    """`good` may `verb` graph runs in namespace `namespace` only; `other` may do nothing; any other token is
    unknown (401). What each call asked is kept in `checked`."""

    scheme = "Bearer"

    def __init__(self, namespace: str, verb: str) -> None:
        self.namespace, self.verb = namespace, verb
        self.checked: list[Access] = []

    async def authenticate(self, authorization: str, peer: str = "") -> Identity | None:
        token = authorization.removeprefix("Bearer ")
        return Identity(user=token, scheme="Bearer") if token in ("good", "other") else None

    async def authorize(self, identity: Identity, access: Access) -> bool:
        self.checked.append(access)
        return identity.user == "good" and access.namespace == self.namespace and access.verb == self.verb
