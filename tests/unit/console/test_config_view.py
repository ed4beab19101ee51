"""An Environment's configuration in the console (operators.console.views.config_shape): its points, the effective
values with their trace (the configuration store's own merge), and the diff between two versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.config.levels import LevelError
from operators.config.models import ConfigComponentSpec, ConfigValuesSpec, values_point
from operators.config.repository import Snapshot, StoredValues
from operators.console.views.config_shape import (
    diff_text,
    effective_view,
    environment_view,
    parse_point,
    values_api_path,
    values_diff,
    version_diff,
)
from operators.environment.models import EnvironmentSpec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def example_snapshot() -> Snapshot:
    env = EnvironmentSpec.model_validate(docs("config-environment.yaml")[0]["spec"])
    component = docs("config-component.yaml")[0]
    values = []
    for number, item in enumerate(docs("config-values.yaml"), start=1):
        spec = ConfigValuesSpec.model_validate(item["spec"])
        values.append(StoredValues(name=item["metadata"]["name"], uid=f"uid-{number}", resource_version="1",
                                   spec=spec, point=values_point(spec, env), data=dict(spec.data), version=1))
    return Snapshot(name="env-1", environment=env,
                    components={component["metadata"]["name"]: ConfigComponentSpec.model_validate(component["spec"])},
                    values=values)


def test_the_points_are_the_root_the_roles_and_their_nodes_with_the_layers_stored_there() -> None:
    view = environment_view(example_snapshot())
    levels = [p["level"] for p in view["points"]]
    assert levels[0] == "(root)"
    assert {"role=controller", "role=controller,node=node-1.domain.tld", "role=compute",
            "role=compute,node=node-2.domain.tld"} <= set(levels)
    assert levels.index("role=controller") < levels.index("role=controller,node=node-1.domain.tld")
    at = {p["level"]: p["layers"] for p in view["points"]}
    assert [(x["object"], x["kind"]) for x in at["role=controller,node=node-1.domain.tld"]] == [
        ("astute-node-1-overrides", "overrides")]
    assert at["role=compute"] == []
    assert "astute" in view["resources"] and view["hierarchy"] == ["(root)", "role", "node"]


def test_the_effective_values_of_node_1_trace_each_key_to_its_layer() -> None:
    snapshot = example_snapshot()
    view = effective_view(snapshot, "astute", parse_point("node=node-1", snapshot))
    assert view["level"] == "role=controller,node=node-1.domain.tld"
    assert view["values"]["nova"] == {"workers": 16, "cpu_allocation_ratio": 1.5}
    rows = {r["key"]: r for r in view["trace"]}
    assert rows["nova.workers"]["value"] == "16"
    assert (rows["nova.workers"]["object"], rows["nova.workers"]["kind"]) == ("astute-node-1-overrides", "overrides")
    assert rows["nova.cpu_allocation_ratio"]["level"] == "(root)"
    assert [layer["object"] for layer in view["layers"]] == ["astute", "astute-controller", "astute-node-1-overrides"]
    compute = effective_view(snapshot, "astute", parse_point("role=compute,node=node-2.domain.tld", snapshot))
    assert compute["values"]["nova"]["workers"] == 4


def test_a_level_not_in_the_hierarchy_is_refused() -> None:
    with pytest.raises(LevelError):
        parse_point("rack=r1", example_snapshot())


def test_the_diff_lists_each_changed_added_and_removed_key_and_a_type_change() -> None:
    old = {"nova": {"workers": 8, "debug": False}, "gone": [1, 2], "flag": 1}
    new = {"nova": {"workers": 16, "debug": False}, "added": {"x": None}, "flag": True}
    changes = values_diff(old, new)
    assert [(c["key"], c["change"]) for c in changes] == [
        ("nova.workers", "changed"), ("gone", "removed"), ("flag", "changed"), ("added.x", "added")]
    text = diff_text(changes)
    assert text.splitlines() == ["~ nova.workers: 8 -> 16", "- gone: [1, 2]", "~ flag: 1 -> true",
                                 "+ added.x: null"]
    assert diff_text(values_diff(old, old)) == "(no difference)"


def test_a_version_diff_is_text_even_when_values_look_like_markup() -> None:
    diff = version_diff("astute", "(root)", "values", (1, {"motd": "hi"}), (3, {"motd": "<script>x()</script>"}))
    assert diff["text"].splitlines() == ["values of astute at (root): version 1 -> version 3",
                                         '~ motd: "hi" -> "<script>x()</script>"']
    long = version_diff("r", "(root)", "values", (1, {}), (2, {f"k{i}": i for i in range(2100)}))
    assert long["more"] == 100 and long["text"].endswith("... and 100 more keys")


def test_the_api_path_of_a_layer_escapes_names_and_keeps_a_resources_slash() -> None:
    point = (("role", "controller"), ("node", "node-1.domain.tld"))
    assert values_api_path("env-1", point, "override/plugins", "overrides") == (
        "/api/v1/config/environments/env-1/role/controller/node/node-1.domain.tld/resources/override/plugins/overrides")
    assert values_api_path("env 1", (), "astute", "values") == (
        "/api/v1/config/environments/env%201/resources/astute/values")
