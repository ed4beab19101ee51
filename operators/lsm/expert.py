"""Expert mode (issue 31, item 6, after Inmanta's): force a state, replace an attribute set, or destroy an
instance without its lifecycle, for the day the lifecycle cannot get an instance out of where it is.

It bypasses every rule the lifecycle enforces, so two things hold whatever the path (kubectl, `stead service
expert`):

- **Its own permission.** An expert request is `spec.expert` of the ServiceInstance. The API server itself
  (the ValidatingAdmissionPolicy `stead-service-expert`, below) refuses a write that sets a new one unless
  the requesting user may use the verb `expert` on `serviceinstances.stead.dev` in the namespace: a custom
  verb, which the built-in `edit` and `admin` roles (and Stead's aggregated ones, which list their verbs)
  do not have. ClusterRole `stead-expert` grants it; it is not aggregated, so it is granted on purpose. A
  policy rather than the webhook: the API server enforces it even while the webhook is bypassed or down
  (its failurePolicy is Ignore), and the CEL authorizer asks RBAC without a SubjectAccessReview round trip.
- **Always audited, by a name nobody can forge.** The operator sees only the object, not who wrote it, so
  the request carries `user`, and the same policy refuses it unless it equals `request.userInfo.username`.
  The operator then writes a log entry (trigger `expert`, `user`) and a Warning Event `ExpertMode`.

The engine part is pure: `apply_expert` turns a status and a request into the next status (or `Refused`),
like `operators.lsm.machine.advance`, whose rules it deliberately skips: no transfer, no validation, no
operation on the sets. What follows is the lifecycle's again: a forced state's auto transfers are taken and
its App is realized as that state says.
"""

from __future__ import annotations

from typing import Any

from operators import GROUP
from operators.lsm.machine import LOG_LIMIT, Context, Outcome, Refused, describe
from operators.lsm.models import (
    EXPERT_VERB,
    SERVICE_INSTANCE,
    ExpertRequest,
    LogEntry,
    ServiceInstanceSpec,
    ServiceInstanceStatus,
)
from operators.runtime import denying_policy

POLICY_NAME = "stead-service-expert"
EXPERT_ROLE = "stead-expert"
"""The ClusterRole that grants expert mode (bind it in a namespace with a RoleBinding)."""
PERMISSION = (f'verb "{EXPERT_VERB}" on resource "{SERVICE_INSTANCE.plural}" in API group "{GROUP}" '
              f"(ClusterRole {EXPERT_ROLE} grants it)")
"""How a refusal names the missing permission."""


def pending_expert(spec: ServiceInstanceSpec, status: ServiceInstanceStatus) -> ExpertRequest | None:
    """The spec's expert request when it has not been taken in yet (each once: it carries the version it was
    made at, and an expert operation raises the version, so two requests are never equal)."""
    request = spec.expert
    return request if request is not None and request != status.expert else None


def describe_request(request: ExpertRequest) -> str:
    """What the log and the Event say an expert did, naming them."""
    if request.operation == "setState":
        what = f'forced state "{request.state}"'
    elif request.operation == "editAttributes":
        keys = ", ".join(sorted(request.attributes or {})) or "none"
        what = f"replaced the {request.set_} attribute set (attributes: {keys})"
    else:
        what = "destroyed the instance and its App without the lifecycle's delete"
    text = f"expert {request.user} {what}"
    return f"{text}: {request.message}" if request.message else text


def apply_expert(ctx: Context, status: ServiceInstanceStatus, request: ExpertRequest) -> Outcome:
    """The instance's status after an expert request, with one log entry naming the user. Raises `Refused`
    (nothing changed) for an instance not created or already gone, a stale version, or an unknown state."""
    if status.state is None:
        raise Refused(f"spec.expert: service instance {ctx.instance} has not been created yet", 409, "NotCreated")
    if status.deleted or status.destroyed:
        raise Refused(f"spec.expert: service instance {ctx.instance} is gone (state \"{status.state}\")", 409,
                      "Deleted")
    if request.current_version != status.version:
        raise Refused(f"spec.expert.currentVersion: the given current version ({request.current_version}) doesn't "
                      f"match the actual current version ({status.version}) of service instance {ctx.instance}",
                      409, "StaleVersion")
    version = (status.version or 0) + 1
    update: dict[str, Any] = {"version": version, "expert": request}
    target = str(status.state)
    if request.operation == "setState":
        names = [state.name for state in ctx.lifecycle.states]
        if request.state not in names:
            raise Refused(f'spec.expert.state: "{request.state}" is not a state of the lifecycle (states: '
                          f"{', '.join(names)})", 422, "UnknownState")
        target = str(request.state)
        update.update(state=target, validation_problems=None)
    elif request.operation == "editAttributes":
        field = f"{request.set_}_attributes"
        update[field] = dict(request.attributes) if request.attributes else None
    else:
        update["destroyed"] = True
    entry = LogEntry(from_=status.state, to=target, trigger="expert", version=version, time=ctx.now,
                     message=describe_request(request), user=request.user)
    update["log"] = [*status.log, entry][-LOG_LIMIT:]
    after = describe(ctx, status.model_copy(update={**update, "refused": None}))
    return Outcome(after, (entry,), True)


# --- the API server's side: the policy and the role ----------------------------------------------

NEW_REQUEST = ("has(object.spec.expert) && object.spec.expert != null && (request.operation == 'CREATE' || "
               "!has(oldObject.spec.expert) || oldObject.spec.expert != object.spec.expert)")
"""A write that sets a new expert request: the only writes the policy judges (a finalizer's removal, a
label, an ordinary update leave `spec.expert` as it was and are not its business)."""
ALLOWED = (f"authorizer.group('{GROUP}').resource('{SERVICE_INSTANCE.plural}')"
           f".namespace(object.metadata.namespace).name(object.metadata.name).check('{EXPERT_VERB}').allowed()")
SAME_USER = "object.spec.expert.user == request.userInfo.username"


def expert_policy(name: str = POLICY_NAME) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Deny) that guard `spec.expert` of ServiceInstances."""
    return denying_policy(name, [SERVICE_INSTANCE.plural], validations=[
        {"expression": ALLOWED, "reason": "Forbidden",
         "messageExpression": f"'spec.expert: user ' + request.userInfo.username + ' may not use expert mode "
                              f"here: it needs the permission {PERMISSION}'"},
        {"expression": SAME_USER, "reason": "Forbidden",
         "messageExpression": "'spec.expert.user: must be the requesting user (' + request.userInfo.username"
                              " + '), not ' + object.spec.expert.user"},
    ], match_conditions=[{"name": "sets-an-expert-request", "expression": NEW_REQUEST}])


def expert_role(name: str = EXPERT_ROLE) -> dict[str, Any]:
    """The ClusterRole granting expert mode. Not aggregated into edit or admin: bound on purpose, per namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "stead"}},
        "rules": [{"apiGroups": [GROUP], "resources": [SERVICE_INSTANCE.plural], "verbs": [EXPERT_VERB]}],
    }
