"""Effective values: order of layers, deep merge rules, and the lookup trace."""

from __future__ import annotations

from operators.config.merge import Layer, deep_merge, effective, ordered_layers

ROOT = ()
ROLE = (("role", "controller"),)
NODE = (("role", "controller"), ("node", "node-1"))
OTHER_NODE = (("role", "controller"), ("node", "node-2"))

LAYERS = [
    Layer(NODE, "overrides", {"nova": {"debug": True}}, version=2, source="n1-ov"),
    Layer(ROOT, "values", {"nova": {"debug": False, "workers": 4}, "servers": ["a", "b"], "id": 1},
          version=1, source="root"),
    Layer(ROLE, "values", {"servers": ["c"], "nova": {"workers": 8}}, source="role"),
    Layer(ROOT, "overrides", {"id": 2}, source="root-ov"),
    Layer(OTHER_NODE, "values", {"id": 99}, source="n2"),
    Layer(NODE, "values", {"nova": {"debug": "ignored, the override comes later"}, "empty": {}}, source="n1"),
]


def test_layers_go_root_first_values_before_overrides_and_skip_other_branches() -> None:
    order = [layer.source for layer in ordered_layers(NODE, LAYERS)]
    assert order == ["root", "root-ov", "role", "n1", "n1-ov"]
    assert [layer.source for layer in ordered_layers(ROOT, LAYERS)] == ["root", "root-ov"]


def test_deep_merge_keeps_siblings_replaces_lists_and_traces_every_leaf() -> None:
    result = effective(NODE, LAYERS)
    assert result.values == {
        "nova": {"debug": True, "workers": 8}, "servers": ["c"], "id": 2, "empty": {},
    }
    trace = result.trace()
    assert trace["nova.debug"] == {"level": "role=controller,node=node-1", "kind": "overrides",
                                   "version": 2, "object": "n1-ov"}
    assert trace["nova.workers"]["object"] == "role"
    assert trace["servers"]["object"] == "role"  # a list is one leaf
    assert trace["id"] == {"level": "(root)", "kind": "overrides", "object": "root-ov"}
    assert trace["empty"]["object"] == "n1"
    assert set(trace) == {"nova.debug", "nova.workers", "servers", "id", "empty"}


def test_a_deeper_override_at_a_shallow_level_loses_to_deeper_values() -> None:
    layers = [Layer(ROOT, "overrides", {"x": "root override"}), Layer(ROLE, "values", {"x": "role value"})]
    assert effective(ROLE, layers).values == {"x": "role value"}


def test_replacing_a_mapping_by_a_scalar_and_back_replaces_its_trace() -> None:
    layers = [
        Layer(ROOT, "values", {"a": {"x": 1, "y": 2}}, source="r"),
        Layer(ROLE, "values", {"a": 5}, source="role"),
        Layer(NODE, "values", {"a": {"z": 3}}, source="node"),
    ]
    result = effective(NODE, layers)
    assert result.values == {"a": {"z": 3}}
    assert {k: v["object"] for k, v in result.trace().items()} == {"a.z": "node"}
    assert effective(ROLE, layers).trace() == {"a": {"level": "role=controller", "kind": "values", "object": "role"}}


def test_null_is_a_value_and_empty_mappings_change_nothing() -> None:
    layers = [Layer(ROOT, "values", {"a": {"x": 1}, "b": 1}), Layer(ROLE, "values", {"a": {}, "b": None})]
    assert effective(ROLE, layers).values == {"a": {"x": 1}, "b": None}


def test_inputs_are_not_modified() -> None:
    base = {"a": {"x": [1]}}
    top = {"a": {"y": 2}}
    merged = deep_merge(base, top)
    merged["a"]["x"].append(2)
    assert base == {"a": {"x": [1]}} and top == {"a": {"y": 2}}
    result = effective(ROOT, [Layer(ROOT, "values", base)])
    result.values["a"]["x"].append(3)
    assert base == {"a": {"x": [1]}}


def test_no_layers_no_values() -> None:
    result = effective(NODE, [])
    assert result.values == {} and result.trace() == {} and result.layers == ()
