"""The ValidatingAdmissionPolicy that holds a new ServiceOrder to its author's rights on ServiceInstances
(operators.lsm.order_rights): its shape, one validation per action asking the authorizer for the verb the
operator's request uses, and that the local plane and the chart ship it."""

from __future__ import annotations

from pathlib import Path

import yaml

from operators.lsm.order_rights import ACTION_VERBS, order_rights_policy

ROOT = Path(__file__).parents[3]


def test_the_policy_judges_only_new_orders_and_denies() -> None:
    policy, binding = order_rights_policy()
    assert policy["kind"] == "ValidatingAdmissionPolicy" and policy["metadata"]["name"] == "stead-service-order-rights"
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [{
        "apiGroups": ["stead.dev"], "apiVersions": ["*"], "operations": ["CREATE"],
        "resources": ["serviceorders"], "scope": "Namespaced"}]
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert binding["spec"] == {"policyName": "stead-service-order-rights", "validationActions": ["Deny"]}


def test_each_action_asks_the_authorizer_for_the_operators_verb_and_the_refusal_names_it() -> None:
    assert ACTION_VERBS == {"create": "create", "update": "patch", "delete": "delete"}  # ordering._write's requests
    validations = order_rights_policy()[0]["spec"]["validations"]
    assert len(validations) == 3
    for (action, verb), check in zip(ACTION_VERBS.items(), validations, strict=True):
        expression, message = check["expression"], check["messageExpression"]
        assert expression.startswith(f"!object.spec.items.exists(i, i.action == '{action}') || ")
        assert (f"authorizer.group('stead.dev').resource('serviceinstances')"
                f".namespace(object.metadata.namespace).check('{verb}').allowed()") in expression
        assert [v for v in ACTION_VERBS.values() if f".check('{v}')" in expression] == [verb]
        assert f'need the verb "{verb}" on resource "serviceinstances" in API group "stead.dev"' in message
        assert f"i.action == '{action}'" in message and "i.id" in message and "request.userInfo.username" in message
        assert check["reason"] == "Forbidden"


def test_the_local_plane_and_the_chart_carry_the_same_policy() -> None:
    from operators.lsm.kinds import SERVICE_ORDER_KIND

    assert SERVICE_ORDER_KIND.cluster_objects is not None
    assert list(SERVICE_ORDER_KIND.cluster_objects()) == list(order_rights_policy())
    shipped = yaml.safe_load((ROOT / "charts/stead/files/policies/service-order-rights.yaml").read_text())
    assert shipped == order_rights_policy()[0]
    template = (ROOT / "charts/stead/templates/serviceorderrights.yaml").read_text()
    assert 'files/policies/service-order-rights.yaml' in template and "validationActions: [Deny]" in template
