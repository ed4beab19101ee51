"""The configuration store's kinds (ConfigComponent, ConfigValues) as the operator serves them."""

from __future__ import annotations

from operators.config.models import (
    CONFIG_COMPONENT,
    CONFIG_VALUES,
    ConfigComponentSpec,
    ConfigComponentStatus,
    ConfigValuesSpec,
    ConfigValuesStatus,
    component_problems,
)
from operators.config.reconcile import (
    DEPENDS_ON,
    admit_values,
    publish,
    record_version,
    validate_component,
    validate_values,
)
from operators.runtime import Kind, Pipeline, PrinterColumn

COMPONENT_KIND = Kind(
    kind=CONFIG_COMPONENT.kind,
    plural=CONFIG_COMPONENT.plural,
    short_names=("cc",),
    description="A component of the system and the definitions of the resources (data sources) it provides, "
    "each optionally with a JSON schema its values must satisfy.",
    spec_model=ConfigComponentSpec,
    status_model=ConfigComponentStatus,
    pipeline=Pipeline(phases=("Init", "Provisioned"), steps={"Init": validate_component}),
    columns=(PrinterColumn("Resources", ".status.resourceCount", type="integer",
                           description="How many resources the component defines."),),
    problems=component_problems,
)

VALUES_KIND = Kind(
    kind=CONFIG_VALUES.kind,
    plural=CONFIG_VALUES.plural,
    short_names=("cv",),
    description="Values or overrides of one resource, in one Environment, at one point of its hierarchy. "
    "Every change of the data is kept as a version (an immutable ConfigMap).",
    spec_model=ConfigValuesSpec,
    status_model=ConfigValuesStatus,
    pipeline=Pipeline(
        phases=("Init", "Validated", "Versioned", "Provisioned"),
        steps={"Init": validate_values, "Validated": record_version, "Versioned": publish},
    ),
    columns=(
        PrinterColumn("Environment", ".spec.environment", description="The Environment."),
        PrinterColumn("Resource", ".spec.resource", description="The resource (data source)."),
        PrinterColumn("Kind", ".spec.kind", description="values or overrides."),
        PrinterColumn("Level", ".status.point", description="The point of the hierarchy."),
        PrinterColumn("Version", ".status.version", type="integer", description="The version in force."),
    ),
    admission=admit_values,
    depends_on=DEPENDS_ON,
)

KINDS = (COMPONENT_KIND, VALUES_KIND)
