"""The lifecycles every namespace can use without creating them: `simple`, `service` and
`testing_basic_lifecycle` (a ServiceEntity names one with `lifecycle: {builtin: simple}`).

They have the states and transfers of Inmanta's standard lifecycles (`lsm::fsm::simple` as its
published graph draws it, `lsm::fsm::service`, and the small `basic_lifecycle` of Inmanta's docs),
written here as Stead's own data, from Inmanta's public docs (github.com/inmanta/inmanta-core, docs/lsm/).

Where Inmanta publishes no state flags (`designed`, `update_designed`, `update_designed_failed`
of `service`) they are chosen here: `designed` deploys nothing but takes part in the other
instances' validations with its candidate set (validateOthers: candidate), which is what makes
its model state `designed`; the update_designed states keep the active set deployed, like every
update state. Inmanta's `target_same_desired_state` / `error_same_desired_state` hints (recompile
avoidance) are left out: Stead knows whether an App's inputs changed from the attribute sets.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Literal

from operators.lsm.models import BuiltinName, Label, LifecycleSpec, Operation, State, Transfer, ValidationSet

Trigger = Literal["auto", "api", "update", "delete", "resource"]

FAILED = "The deployment failed (the App says why): up when the App succeeds again, or delete."


def _state(name: str, flags: tuple[bool, ValidationSet | None, ValidationSet | None], label: Label | None = None,
           *, purge: bool = False, deleted: bool = False, description: str | None = None) -> State:
    export, validate_self, validate_others = flags
    return State(name=name, label=label, export_resources=export, validate_self=validate_self,
                 validate_others=validate_others, purge_resources=purge, deleted=deleted, description=description)


# (exportResources, validateSelf, validateOthers) of the kinds of states the standard lifecycles have
NEW: tuple[bool, ValidationSet | None, ValidationSet | None] = (False, "candidate", None)
"""Not deployed, validated alone: a new instance before its candidate set is accepted."""
DESIGNED: tuple[bool, ValidationSet | None, ValidationSet | None] = (False, "candidate", "candidate")
DEPLOYED: tuple[bool, ValidationSet | None, ValidationSet | None] = (True, "active", "active")
UPDATING: tuple[bool, ValidationSet | None, ValidationSet | None] = (True, "candidate", "active")
"""The active set stays deployed while a candidate set is validated."""
GONE: tuple[bool, ValidationSet | None, ValidationSet | None] = (False, None, None)


def _t(source: str, target: str, trigger: Trigger, *, error: str | None = None, validate: bool = False,
       config: str | None = None, operation: Operation | None = None, description: str | None = None) -> Transfer:
    return Transfer(
        source=source, target=target, error=error,
        auto=trigger == "auto", api_set_state=trigger == "api", on_update=trigger == "update",
        on_delete=trigger == "delete", resource_based=trigger == "resource",
        validate_=validate, config_name=config, target_operation=operation, description=description,
    )


SIMPLE = LifecycleSpec(
    description="Create, update with rollback, delete: validate, promote and deploy, no manual gate.",
    initial_state="start",
    states=[
        _state("start", NEW, description="Created; the candidate set is about to be validated."),
        _state("acknowledged", NEW, description="The candidate set passed validation."),
        _state("rejected", NEW, "danger", description="The candidate set failed validation: update it or delete."),
        _state("creating", DEPLOYED, description="The App is being deployed with the active set."),
        _state("up", DEPLOYED, "success", description="Deployed."),
        _state("failed", DEPLOYED, "danger", description=FAILED),
        _state("update_start", UPDATING, description="Updated; the new candidate set is about to be validated."),
        _state("update_acknowledged", UPDATING, description="The update passed validation."),
        _state("update_rejected", UPDATING, "warning",
               description="The update failed validation: update again, or abort it (state up)."),
        _state("update_inprogress", DEPLOYED, description="The update is being deployed."),
        _state("update_failed", DEPLOYED, "warning",
               description="The update's deployment failed: roll back (state rollback), or delete."),
        _state("rollback", DEPLOYED, description="The previous active set is being deployed again."),
        _state("deleting", DEPLOYED, purge=True, description="The App is being deleted."),
        _state("terminated", GONE, deleted=True, description="Gone."),
    ],
    transfers=[
        _t("start", "acknowledged", "auto", error="rejected", validate=True, description="initial validation"),
        _t("acknowledged", "creating", "auto", operation="promote", description="promote and deploy"),
        _t("creating", "up", "resource", error="failed", description="deployed"),
        _t("up", "update_start", "update", description="update"),
        _t("update_start", "update_acknowledged", "auto", error="update_rejected", validate=True,
           description="update validation"),
        _t("update_acknowledged", "update_inprogress", "auto", operation="promote",
           description="promote the update and deploy it"),
        _t("update_inprogress", "up", "resource", error="update_failed", description="update deployed"),
        _t("update_rejected", "up", "api", operation="clear candidate", description="abort the update"),
        _t("update_failed", "rollback", "api", operation="rollback", description="roll the update back"),
        _t("rollback", "up", "resource", error="failed", description="rollback deployed"),
        _t("up", "up", "resource", error="failed", description="repair: deployment checked"),
        _t("failed", "up", "resource", error="failed", description="recovered"),
        _t("update_failed", "up", "resource", error="update_failed", description="update recovered"),
        _t("rejected", "start", "update", description="update after rejection"),
        _t("update_rejected", "update_start", "update", description="update again after rejection"),
        _t("up", "deleting", "delete", description="delete"),
        _t("creating", "deleting", "delete", description="delete while creating"),
        _t("update_failed", "deleting", "delete", description="delete after a failed update"),
        _t("failed", "deleting", "delete", description="delete after a failure"),
        _t("deleting", "terminated", "resource", error="deleting", description="deleted"),
        _t("rejected", "terminated", "delete", description="delete a rejected instance"),
    ],
)

SERVICE = LifecycleSpec(
    description="simple with a design gate: a validated candidate is designed, and goes on to be deployed "
    "automatically or on request (entity config auto_designed, auto_creating, auto_update_designed, "
    "auto_update_inprogress); an update can be aborted at every step.",
    initial_state="start",
    states=[
        _state("start", NEW, description="Created; the candidate set is about to be validated."),
        _state("acknowledged", NEW, description="The candidate set passed validation."),
        _state("rejected", NEW, "danger", description="The candidate set failed validation: update it or delete."),
        _state("designed", DESIGNED, description="Accepted and queued: validated with the others, not deployed."),
        _state("creating", DEPLOYED, description="The App is being deployed with the active set."),
        _state("up", DEPLOYED, "success", description="Deployed."),
        _state("failed", DEPLOYED, "danger", description=FAILED),
        _state("update_start", UPDATING, description="Updated; the new candidate set is about to be validated."),
        _state("update_start_failed", UPDATING, "warning",
               description="As update_start, while the deployed active set is failing."),
        _state("update_acknowledged", UPDATING, description="The update passed validation."),
        _state("update_acknowledged_failed", UPDATING, "warning",
               description="As update_acknowledged, while the deployed active set is failing."),
        _state("update_rejected", UPDATING, "warning",
               description="The update failed validation: update again, or abort it (state up)."),
        _state("update_rejected_failed", UPDATING, "warning",
               description="As update_rejected, while the deployed active set is failing."),
        _state("update_designed", UPDATING, description="The update is accepted and queued."),
        _state("update_designed_failed", UPDATING, "warning",
               description="As update_designed, while the deployed active set is failing."),
        _state("update_inprogress", DEPLOYED, description="The update is being deployed."),
        _state("update_failed", DEPLOYED, "warning",
               description="The update's deployment failed: roll back (state rollback), or delete."),
        _state("rollback", DEPLOYED, description="The previous active set is being deployed again."),
        _state("deleting", DEPLOYED, purge=True, description="The App is being deleted."),
        _state("terminated", GONE, deleted=True, description="Gone."),
    ],
    transfers=[
        _t("start", "acknowledged", "auto", error="rejected", validate=True, description="initial validation"),
        _t("start", "terminated", "delete", description="delete before validation"),
        _t("rejected", "terminated", "delete", description="delete a rejected instance"),
        _t("rejected", "start", "update", description="update after rejection"),
        _t("acknowledged", "designed", "auto", error="rejected", validate=True, config="auto_designed",
           description="design (auto)"),
        _t("acknowledged", "designed", "api", error="rejected", validate=True, description="design (on request)"),
        _t("acknowledged", "acknowledged", "api", error="rejected", validate=True, description="revalidate"),
        _t("acknowledged", "terminated", "delete", description="delete an acknowledged instance"),
        _t("designed", "creating", "auto", config="auto_creating", operation="promote",
           description="promote and deploy (auto)"),
        _t("designed", "creating", "api", operation="promote", description="promote and deploy (on request)"),
        _t("designed", "terminated", "delete", description="delete a designed instance"),
        _t("creating", "up", "resource", error="failed", description="deployed"),
        _t("up", "deleting", "delete", description="delete"),
        _t("creating", "deleting", "delete", description="delete while creating"),
        _t("failed", "deleting", "delete", description="delete after a failure"),
        _t("update_failed", "deleting", "delete", description="delete after a failed update"),
        _t("up", "up", "resource", error="failed", description="repair: deployment checked"),
        _t("failed", "up", "resource", error="failed", description="recovered"),
        _t("rollback", "up", "resource", error="failed", description="rollback deployed"),
        _t("deleting", "terminated", "resource", error="deleting", description="deleted"),
        _t("up", "update_start", "update", description="update"),
        _t("update_start", "update_acknowledged", "auto", error="update_rejected", validate=True,
           description="update validation"),
        _t("update_start_failed", "update_acknowledged_failed", "auto", error="update_rejected_failed", validate=True,
           description="update validation (deployment failing)"),
        _t("update_acknowledged", "update_acknowledged", "api", error="update_rejected", validate=True,
           description="revalidate the update"),
        _t("update_acknowledged_failed", "update_acknowledged_failed", "api", error="update_rejected_failed",
           validate=True, description="revalidate the update (deployment failing)"),
        _t("update_acknowledged", "update_designed", "auto", error="update_rejected", validate=True,
           config="auto_update_designed", description="design the update (auto)"),
        _t("update_acknowledged", "update_designed", "api", error="update_rejected", validate=True,
           description="design the update (on request)"),
        _t("update_acknowledged_failed", "update_designed_failed", "auto", error="update_rejected_failed",
           validate=True, config="auto_update_designed", description="design the update (auto, deployment failing)"),
        _t("update_acknowledged_failed", "update_designed_failed", "api", error="update_rejected_failed",
           validate=True, description="design the update (on request, deployment failing)"),
        _t("update_designed", "update_inprogress", "auto", config="auto_update_inprogress", operation="promote",
           description="promote the update and deploy it (auto)"),
        _t("update_designed", "update_inprogress", "api", operation="promote",
           description="promote the update and deploy it (on request)"),
        _t("update_designed_failed", "update_inprogress", "auto", config="auto_update_inprogress",
           operation="promote", description="promote the update and deploy it (auto, deployment failing)"),
        _t("update_designed_failed", "update_inprogress", "api", operation="promote",
           description="promote the update and deploy it (on request, deployment failing)"),
        _t("update_inprogress", "up", "resource", error="update_failed", description="update deployed"),
        _t("update_failed", "up", "resource", error="update_failed", description="update recovered"),
        _t("update_failed", "rollback", "api", operation="rollback", description="roll the update back"),
        _t("update_rejected", "update_start", "update", description="update again after rejection"),
        _t("update_start", "update_start", "resource", error="update_start_failed",
           description="deployment checked during the update"),
        _t("update_acknowledged", "update_acknowledged", "resource", error="update_acknowledged_failed",
           description="deployment checked during the update"),
        _t("update_designed", "update_designed", "resource", error="update_designed_failed",
           description="deployment checked during the update"),
        _t("update_rejected", "update_rejected", "resource", error="update_rejected_failed",
           description="deployment checked during the update"),
        _t("update_start_failed", "update_start", "resource", error="update_start_failed",
           description="deployment recovered"),
        _t("update_acknowledged_failed", "update_acknowledged", "resource", error="update_acknowledged_failed",
           description="deployment recovered"),
        _t("update_designed_failed", "update_designed", "resource", error="update_designed_failed",
           description="deployment recovered"),
        _t("update_rejected_failed", "update_rejected", "resource", error="update_rejected_failed",
           description="deployment recovered"),
        _t("update_start", "up", "api", operation="clear candidate", description="abort the update"),
        _t("update_rejected", "up", "api", operation="clear candidate", description="abort the update"),
        _t("update_acknowledged", "up", "api", operation="clear candidate", description="abort the update"),
        _t("update_designed", "up", "api", operation="clear candidate", description="abort the update"),
        _t("update_start_failed", "failed", "api", operation="clear candidate",
           description="abort the update (deployment failing)"),
        _t("update_rejected_failed", "failed", "api", operation="clear candidate",
           description="abort the update (deployment failing)"),
        _t("update_acknowledged_failed", "failed", "api", operation="clear candidate",
           description="abort the update (deployment failing)"),
        _t("update_designed_failed", "failed", "api", operation="clear candidate",
           description="abort the update (deployment failing)"),
    ],
)

TESTING_BASIC = LifecycleSpec(
    description="The smallest complete lifecycle: validate and deploy, repair, delete; no updates.",
    initial_state="start",
    states=[
        _state("start", NEW, description="Created; the candidate set is about to be validated."),
        _state("creating", DEPLOYED, description="The App is being deployed with the active set."),
        _state("up", DEPLOYED, "success", description="Deployed."),
        _state("failed", DEPLOYED, "danger", description=FAILED),
        _state("rejected", GONE, "danger", deleted=True, description="The candidate set failed validation: gone."),
        _state("deleting", DEPLOYED, purge=True, description="The App is being deleted."),
        _state("terminated", GONE, deleted=True, description="Gone."),
    ],
    transfers=[
        _t("start", "creating", "auto", error="rejected", validate=True, operation="promote",
           description="validate, promote and deploy"),
        _t("creating", "up", "resource", error="creating", description="deployed"),
        _t("up", "up", "resource", error="failed", description="repair: deployment checked"),
        _t("failed", "up", "resource", error="failed", description="recovered"),
        _t("up", "deleting", "delete", description="delete"),
        _t("deleting", "terminated", "resource", error="deleting", description="deleted"),
    ],
)

BUILTINS: MappingProxyType[BuiltinName, LifecycleSpec] = MappingProxyType({
    "simple": SIMPLE,
    "service": SERVICE,
    "testing_basic_lifecycle": TESTING_BASIC,
})
"""The built-in lifecycles by the name a ServiceEntity's `lifecycle.builtin` gives."""


def object_name(name: BuiltinName) -> str:
    """The ClusterLifecycle a built-in is shipped as: its name with `-` for `_` (object names allow no `_`),
    so `testing_basic_lifecycle` is the ClusterLifecycle `testing-basic-lifecycle`."""
    return name.replace("_", "-")


def shipped() -> dict[str, dict[str, Any]]:
    """The built-ins as the specs of the ClusterLifecycles Stead ships, by object name."""
    return {object_name(name): spec.model_dump(by_alias=True, exclude_none=True, mode="json")
            for name, spec in BUILTINS.items()}
