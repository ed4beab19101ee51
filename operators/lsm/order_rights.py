"""A ServiceOrder is never a way around the instances' RBAC (issue 31, item 3): the API server refuses to create
one whose author may not do to the namespace's ServiceInstances what its items ask.

The operator carries an order out with its own rights, so without a check here a user allowed to create
ServiceOrders but not to create, change or delete ServiceInstances could do so through an order. The inventory
API's route (`operators.lsm.api.orders`) checks the caller's verbs before it writes; kubectl reaches the API
server directly, so the same rule is a ValidatingAdmissionPolicy on CREATE of serviceorders (an order is
immutable once accepted, so CREATE is the only write that can ask for anything), like expert mode's
(`operators.lsm.expert`): enforced by the API server whatever the path, webhook or not, and asked of RBAC by
the CEL authorizer without a SubjectAccessReview round trip.

Each action needs the verb the operator's own request for it uses (`operators.lsm.ordering._write`): create
`create`, update `patch` (the operator patches the instance's spec, it never replaces it), delete `delete`.
The check is the namespace's, as the route's is: an item names an instance, but RBAC cannot grant `create` by
name, and one question per verb keeps the policy's cost independent of the number of items.
"""

from __future__ import annotations

from typing import Any

from operators import GROUP
from operators.lsm.models import SERVICE_INSTANCE, SERVICE_ORDER
from operators.runtime import denying_policy

POLICY_NAME = "stead-service-order-rights"
ACTION_VERBS = {"create": "create", "update": "patch", "delete": "delete"}
"""The verb on serviceinstances each item action needs of the order's author: the verb of the request the
operator makes for it."""


def allowed(verb: str) -> str:
    """CEL: may the requesting user use `verb` on the order's namespace's ServiceInstances."""
    return (f"authorizer.group('{GROUP}').resource('{SERVICE_INSTANCE.plural}')"
            f".namespace(object.metadata.namespace).check('{verb}').allowed()")


def _items(action: str) -> str:
    """CEL: the order's items of `action`."""
    return f"object.spec.items.filter(i, i.action == '{action}')"


def action_check(action: str) -> dict[str, str]:
    """The validation for one action: an order with no item of it passes without asking the authorizer; else
    the author needs the action's verb, and the refusal names the verb, the resource and the items."""
    verb = ACTION_VERBS[action]
    return {
        "expression": f"!object.spec.items.exists(i, i.action == '{action}') || {allowed(verb)}",
        "reason": "Forbidden",
        "messageExpression": (
            f"'spec.items: user ' + request.userInfo.username + ' may not {verb} {SERVICE_INSTANCE.plural}.{GROUP} "
            f"in namespace ' + object.metadata.namespace + ', so an order of theirs may not either: the {action} "
            f"item(s) ' + {_items(action)}.map(i, i.id + ' (instance ' + i.instance + ')').join(', ') + ' need the "
            f"verb \"{verb}\" on resource \"{SERVICE_INSTANCE.plural}\" in API group \"{GROUP}\"'"
        ),
    }


def order_rights_policy(name: str = POLICY_NAME) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Deny) that hold a new ServiceOrder to its author's rights
    on ServiceInstances, one validation per action."""
    return denying_policy(name, [SERVICE_ORDER.plural], [action_check(action) for action in ACTION_VERBS],
                          operations=["CREATE"])
