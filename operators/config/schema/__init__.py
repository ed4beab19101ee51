"""JSON Schema (draft 2020-12) for the values of a resource, checked with the `jsonschema` library.

Why `jsonschema`: resource schemas are written by tenants who know JSON Schema, and a
hand-written subset kept refusing what they reach for (`$ref` and `$defs`, `patternProperties`,
`if`/`then`/`else`, formats...). The maintained library implements the whole of draft 2020-12,
follows the official test suite, and validates schemas against the draft's own meta-schema.
Draft 2020-12 is the only dialect: a `$schema` naming another draft is refused rather than
honoured differently from what its author expects.

What Stead adds around the library, when a ConfigComponent is applied (`schema_problems`), so
that a schema never *looks* enforced when it is not and never costs more than a bounded effort:

- the schema must satisfy the 2020-12 meta-schema; messages name the path inside the schema
  (`schema.properties.port.minimum: must be a number`);
- unknown keywords are refused (a typo such as `minimun` would otherwise be a silent
  annotation), and so are the keywords draft 2020-12 dropped (`definitions`, `dependencies`,
  `$recursiveRef`, `$recursiveAnchor`);
- a `format` must be one Stead checks (`FORMATS`): formats are *asserted*, not annotations
  (the library's checkers, plus date-time, time and hostname written here: the library checks
  those only with optional packages Stead does not install);
- `$ref` and `$dynamicRef` resolve inside the schema only (JSON pointers, anchors, embedded
  `$id`s). Schemas come from tenants: the registry's `retrieve` refuses every other URI, so an
  `http://...`, `file:///...` or unknown URN reference is an error at apply time and nothing is
  ever fetched from the network or the filesystem;
- the work is bounded: at most `MAX_SCHEMA_BYTES` serialized, `MAX_DEPTH` levels of nesting,
  and, once references are expanded, `MAX_EXPANDED` subschemas (a chain of `anyOf` over
  `$ref`s would otherwise make a small schema exponential) nested at most `MAX_NESTING` deep
  (a long chain of `$ref`s would otherwise exhaust the stack); no reference cycle that does
  not descend into the value (`{"$ref": "#"}` alone);
- `pattern` and `patternProperties` run Python `re` (the library's choice), which has no
  timeout and can backtrack catastrophically on patterns such as `(a+)+$`: a write is only as
  fast as the tenant's regular expressions. Patterns longer than `MAX_PATTERN` characters are
  refused; keep patterns anchored and free of nested quantifiers.

Annotations (title, description, default, examples, deprecated, readOnly, writeOnly, $comment,
contentEncoding, contentMediaType, contentSchema) are accepted and not checked. One keyword
departs from the library: `multipleOf` divides in decimal, so 0.3 is a multiple of 0.1.

Value messages start with the path of the offending value (`data.nova.debug: ...`), like every
other Stead validation message, sorted in the order of the value's own keys.
"""

from operators.config.schema.checks import schema_problems
from operators.config.schema.dialect import (
    FORMATS,
    MAX_DEPTH,
    MAX_EXPANDED,
    MAX_NESTING,
    MAX_PATTERN,
    MAX_SCHEMA_BYTES,
    TYPES,
    ReferenceRefused,
)
from operators.config.schema.reading import declared_types, schema_at, value_from_text
from operators.config.schema.values import validate

__all__ = [
    "FORMATS",
    "MAX_DEPTH",
    "MAX_EXPANDED",
    "MAX_NESTING",
    "MAX_PATTERN",
    "MAX_SCHEMA_BYTES",
    "TYPES",
    "ReferenceRefused",
    "declared_types",
    "schema_at",
    "schema_problems",
    "validate",
    "value_from_text",
]
