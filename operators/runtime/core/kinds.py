"""What a domain declares about its kind, and the base models every kind shares.

A domain module builds one `Kind`: its pydantic models (the only source of the CRD schema),
its printer columns, its pipeline and its admission check. The runtime wires the rest.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from typing_extensions import TypeVar

from operators import GROUP
from operators.runtime.core.pipeline import ModelT, ParsedSpec, Pipeline, StepFn, declared_model, parse_spec
from operators.runtime.core.pipeline import SpecT as RequestSpecT

if TYPE_CHECKING:  # annotations only: the services' protocol brings the store (lmdb), which a schema never needs
    from operators.runtime.core.services import Services

FINALIZER = "stead.dev/cleanup"
"""Held on objects of kinds with a `cleanup`, so that deleting one waits for it."""


class Model(BaseModel):
    """Base of every spec and status model: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Condition(Model):
    """A standard condition (Ready, Reconciling, Stalled)."""

    type: str = Field(description="Ready, Reconciling or Stalled.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word for the cause of the last transition.")
    message: str = Field(description="What happened, for a human.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int = Field(description="The metadata.generation this condition is about.")


class StatusBase(Model):
    """The part of status every kind has."""

    phase: str | None = Field(None, description="The object's pipeline phase, from Init to Provisioned.")
    observed_generation: int | None = Field(
        None, description="The metadata.generation the status describes."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Ready, Reconciling and Stalled, with reasons."
    )


@dataclass(frozen=True)
class Resource:
    """A kind by its names, for code that refers to it (API paths, `Kind.depends_on`): each domain
    declares its own once (`APP`, `ENVIRONMENT`, ...), so a misspelt kind is a name that does not
    exist, which the type check reports, instead of a path that answers 404 at run time."""

    kind: str
    plural: str


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0


SpecCheck = Callable[[Mapping[str, Any]], list[str]]


@dataclass(frozen=True)
class AdmissionRequest(Generic[RequestSpecT]):
    """What an admission webhook sees of one request, plus the process's services (store, vault, ...).

    `parsed` is `spec` as the kind's model, for a check declared with `spec_admission`: parsed when
    first read, so a spec the model refuses fails where it did before.
    """

    operation: str  # CREATE, UPDATE, or DELETE for kinds with `admit_delete`
    namespace: str
    name: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]  # on DELETE: the spec of the object being deleted
    old: Mapping[str, Any] | None  # the whole old object on UPDATE and DELETE
    dry_run: bool
    services: Services = None  # type: ignore[assignment]  # the operator always gives them; pure tests need none
    annotations: Mapping[str, str] = field(default_factory=dict)
    generated_name: bool = False  # `name` is a generateName prefix: the final name is not known yet
    authenticated: bool = False
    """The webhook server requires the API server's client certificate: the request (its namespace,
    its `old`) is the API server's, not whatever a client that reached the port wrote."""
    spec_model: type[RequestSpecT] | None = None

    @functools.cached_property
    def parsed(self) -> RequestSpecT:
        if self.spec_model is None:
            raise TypeError("this admission check declares no spec model: declare it with `spec_admission(Model)`")
        return parse_spec(self.spec_model, self.spec)

    def parse(self, spec: Mapping[str, Any]) -> RequestSpecT:
        """Another spec of the same kind (the old object's, on UPDATE) as the kind's model."""
        if self.spec_model is None:
            raise TypeError("this admission check declares no spec model: declare it with `spec_admission(Model)`")
        return parse_spec(self.spec_model, spec)


class Refusal(Exception):
    """An admission refusal with its HTTP code (422 invalid, 409 conflict, 423 locked, ...)."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


AdmissionCheck = Callable[[AdmissionRequest[Any]], Awaitable[None]]
Refers = Callable[[Mapping[str, Any], str], bool]


def spec_admission(model: type[ModelT]) -> Callable[[Callable[[AdmissionRequest[ModelT]], Awaitable[None]]],
                                                     AdmissionCheck]:
    """Declare the spec model an admission check reads (its kind's `spec_model`), as `spec_step` does
    for a step: the check receives an `AdmissionRequest[model]` whose `parsed` is its spec."""

    def bind(check: Callable[[AdmissionRequest[ModelT]], Awaitable[None]]) -> AdmissionCheck:
        @functools.wraps(check)
        async def bound(request: AdmissionRequest[Any]) -> None:
            await check(request if request.spec_model is model else dataclasses.replace(request, spec_model=model))

        bound.spec_model = model  # type: ignore[attr-defined]  # read by `declared_model`
        return bound

    return bind


def named_after(spec: Mapping[str, Any], name: str) -> bool:
    """The `depends_on` test of objects named after the referrer (the App a ServiceInstance launches
    under its own name): the referrer refers to the object of its own name, which its spec does not
    say, so the reconciler compares the names itself; called as a test, it refers to nothing."""
    return False

Mutation = Callable[[AdmissionRequest[Any]], Awaitable[dict[str, Any] | None]]

SpecT = TypeVar("SpecT", bound=Model, default=Model, covariant=True)
StatusT = TypeVar("StatusT", bound=StatusBase, default=StatusBase, covariant=True)


@dataclass(frozen=True)
class Kind(Generic[SpecT, StatusT]):
    """One custom resource kind of Stead, typed by its spec and status models.

    Its steps, cleanup and admission check read the spec as `spec_model`, parsed once (`spec_step`,
    `spec_admission`); a spec read from elsewhere (another object from the API, a stored record) is
    parsed by `parse`.

    `problems` are pure checks of a spec alone (the schema cannot express them: uniqueness,
    references inside the spec); they run in the validating webhook and again in the pipeline
    for objects that bypassed it. `admission` is for checks that need context (another object,
    a lock): it raises `Refusal`. `mutation` returns a merge patch of the object (`spec`, and
    `metadata` where a copy of the spec hides there, such as kubectl's last-applied annotation),
    for example an inline secret moved into the vault; it must not write anything on a dry run.
    """

    kind: str
    plural: str
    short_names: tuple[str, ...]
    description: str
    spec_model: type[SpecT]
    status_model: type[StatusT]
    pipeline: Pipeline
    columns: tuple[PrinterColumn, ...] = ()
    problems: SpecCheck | None = None
    admission: AdmissionCheck | None = None
    mutation: Mutation | None = None
    depends_on: Mapping[str, Refers] = field(default_factory=dict)
    """Other kinds (same namespace, or cluster-scoped) whose objects this kind's objects refer to, each with a test
    `refers(spec, other_name)`: when such an object becomes Ready or Stalled at a new generation, stops being
    Ready or is deleted, the objects referring to it are checked again (a ConfigValues when its
    Environment changes), though their own generation did not change; then so are the objects referring to
    those (an instance of an entity whose Lifecycle changed)."""
    cleanup: StepFn | None = None
    """Runs when an object is deleted, before it goes (an App's delete action); the object holds
    the `FINALIZER` meanwhile. TemporaryError retries; PermanentError keeps the object, Stalled
    with the reason, until the user acts."""
    admit_delete: bool = False
    """The validating webhook sees DELETE requests too: `admission` is called with operation
    DELETE, the object being deleted in `old` (and its spec in `spec`); a `Refusal` keeps the
    object as it is, untouched (a ServiceInstance in a state that has no on_delete transfer)."""
    cluster_scoped: bool = False
    """Objects of the kind belong to no namespace (CRD `scope: Cluster`, `kubectl get` without `-n`):
    their store keys have an empty namespace, and their Events go to namespace `default`."""
    shipped: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None
    """Objects Stead ships of this kind, by name -> spec (ClusterLifecycles `simple`, ...): applied by the
    operator when it installs the CRDs (`--install-crds`), and by the chart from the files `stead crds`
    writes."""
    cluster_objects: Callable[[], Sequence[Mapping[str, Any]]] | None = None
    """Cluster-scoped Kubernetes objects that go with the kind (a ValidatingAdmissionPolicy and its binding,
    a ClusterRole of a custom verb): applied by the operator when it installs the CRDs (`--install-crds`);
    the chart has its own copies (`stead crds` writes the policies to the chart's files)."""

    def __post_init__(self) -> None:
        declared = [*self.pipeline.steps.values(), *((self.cleanup,) if self.cleanup else ()),
                    *((self.admission,) if self.admission else ())]
        wrong = [getattr(f, "__name__", repr(f)) for f in declared if declared_model(f) not in (None, self.spec_model)]
        if wrong:
            raise ValueError(f"{self.kind}: {', '.join(wrong)} read the spec as another model than "
                             f"{self.spec_model.__name__}")

    def parse(self, spec: Mapping[str, Any]) -> SpecT:
        """A spec of this kind, read from elsewhere (an object from the API, a stored record), as its model."""
        return parse_spec(self.spec_model, spec)

    @property
    def resource(self) -> Resource:
        return Resource(self.kind, self.plural)

    @property
    def mutates(self) -> bool:
        """Whether the kind needs a mutating webhook: a mutation, or a finalizer added at creation
        (in the same request, so that holding it costs no PATCH of its own)."""
        return self.mutation is not None or self.cleanup is not None

    @property
    def validates(self) -> bool:
        """Whether the kind needs a validating webhook: checks the CRD schema cannot express."""
        return self.problems is not None or self.admission is not None

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"

    def check_spec(self, spec: Mapping[str, Any], parsed: ParsedSpec | None = None) -> list[str]:
        """Every problem with a spec, each naming its field: the model's, then the kind's own.

        A validate step passes its run's `parsed` (`StepContext.parsed_spec`), so that the steps after it
        read the model parsed here rather than parse the spec again (issue 32: a second parse per object
        was 2% of the operator's CPU in bench/pipeline_throughput.py)."""
        try:
            if parsed is None:
                self.parse(spec)
            else:
                parsed.of(spec, self.spec_model)
        except ValidationError as error:
            return [f"spec.{field_path(e['loc'])}: {e['msg']}" for e in error.errors()]
        return self.problems(spec) if self.problems is not None else []


def field_path(loc: tuple[int | str, ...]) -> str:
    """`("nodes", 1, "name")` -> `nodes[1].name`: the way kubectl names fields."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class FirstSeen:
    """Where each name of a list in a spec was first seen, to name a repeat by its field path:
    `spec.resources[2].name: duplicate resource "x" (first at spec.resources[0])`."""

    def __init__(self, path: str, what: str) -> None:
        self._path = path
        self._what = what
        self._first: dict[str, int] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._first

    def repeat(self, index: int, name: str) -> str | None:
        """The problem when `name` (at `index`) came before, else None (and it is remembered)."""
        first = self._first.setdefault(name, index)
        if first == index:
            return None
        return f'{self._path}[{index}].name: duplicate {self._what} "{name}" (first at {self._path}[{first}])'
