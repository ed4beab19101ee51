"""Pure rules of the Environment kind: uniqueness checks with friendly messages, and the summary.

The CRD schema makes node names and levels unique (`x-kubernetes-list-type`), so the API server
refuses duplicates itself, with no webhook round trip and even while the operator is down.
`spec_problems` says the same in friendlier words where Stead validates a body itself (the
configuration API's POST /environments).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from operators.environment.models import EnvironmentSpec


def spec_problems(spec: Mapping[str, Any]) -> list[str]:
    """Duplicate node names and hierarchy levels, each naming its field and the first occurrence."""
    problems: list[str] = []
    first_node: dict[str, int] = {}
    for index, node in enumerate(spec.get("nodes") or []):
        name = node.get("name") if isinstance(node, Mapping) else None
        if not isinstance(name, str):
            continue
        if name in first_node:
            problems.append(
                f'spec.nodes[{index}].name: duplicate node name "{name}" '
                f"(first at spec.nodes[{first_node[name]}])"
            )
        else:
            first_node[name] = index
    first_level: dict[str, int] = {}
    for index, level in enumerate(spec.get("hierarchyLevels") or []):
        if level in first_level:
            problems.append(
                f'spec.hierarchyLevels[{index}]: duplicate level "{level}" '
                f"(first at spec.hierarchyLevels[{first_level[level]}])"
            )
        else:
            first_level[level] = index
    return problems


def summarize(spec: EnvironmentSpec) -> dict[str, Any]:
    """The status facts of a valid environment: node count and nodes per role."""
    roles = Counter(role for node in spec.nodes for role in node.roles)
    return {"nodeCount": len(spec.nodes), "roles": dict(sorted(roles.items()))}


COMPONENTS_FOUND = "ComponentsFound"


def components_condition(enabled: list[str], existing: Collection[str]) -> tuple[list[str], dict[str, str]]:
    """The enabled components that no ConfigComponent of the namespace defines, and the condition
    that shows it. Not a readiness matter (the nodes and hierarchy are usable, and GitOps may apply
    the component later): the Environment is Ready, and says what is missing."""
    missing = [name for name in enabled if name not in existing]
    if not missing:
        return [], {"type": COMPONENTS_FOUND, "status": "True", "reason": "AllFound",
                    "message": f"{len(enabled)} enabled component(s), each defined"}
    known = ", ".join(sorted(existing)) or "none"
    return missing, {"type": COMPONENTS_FOUND, "status": "False", "reason": "ComponentNotFound",
                     "message": f"spec.components: no ConfigComponent named {', '.join(missing)} in this "
                                f"namespace (ConfigComponents here: {known})"}
