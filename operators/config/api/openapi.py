"""What the configuration API's routes say of themselves in its OpenAPI 3.0 document (served at
`/api/v1/config/openapi.json`): the operations and the schemas the routes of `operators.config.api.handlers`
declare."""

from __future__ import annotations

from typing import Any


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or {}}}}


_NAMESPACE = {"name": "namespace", "in": "query", "required": False, "schema": {"type": "string"},
              "description": "The Kubernetes namespace (default: the server's)."}
_COMMON_ERRORS = {"401": _error("No valid credentials."), "403": _error("Not permitted by RBAC."),
                  "503": _error("The store or the authentication backend is unreachable.")}
VALUES_PARAMETERS = [
    {"name": "env", "in": "path", "required": True, "schema": {"type": "string"}, "description": "Environment."},
    {"name": "levels", "in": "path", "required": True, "schema": {"type": "string"},
     "description": "Zero or more <level>/<value> pairs in hierarchy order (nodes/<fqdn> for level node).",
     "x-stead-multi-segment": True},
    {"name": "resource", "in": "path", "required": True, "schema": {"type": "string"},
     "description": "Resource name; may contain '/'.", "x-stead-multi-segment": True},
    _NAMESPACE,
]


def _values_operations() -> dict[str, Any]:
    """The operations on a values path (and on an overrides path: the same)."""
    key = {"name": "key", "in": "query", "schema": {"type": "string"}, "description": "Dotted key path, e.g. a.b.0."}
    if_match = {"name": "If-Match", "in": "header", "schema": {"type": "string"},
                "description": "Precondition: the ETag read before; 409 if the values changed since."}
    not_found_text = "Environment, level, role, node, resource, version, values or key not found (see notFound)."
    return {
        "get": {
            "summary": "Read values: stored at this level, effective (merged), a version, one key, or the history.",
            "parameters": [
                {"name": "effective", "in": "query", "schema": {"type": "boolean"},
                 "description": "Merge from the root to this level (values then overrides at each level)."},
                {"name": "trace", "in": "query", "schema": {"type": "boolean"},
                 "description": "With effective: also return which layer gave each key (alias show_lookup)."},
                {"name": "version", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                {"name": "history", "in": "query", "schema": {"type": "boolean"},
                 "description": "List the kept versions instead."},
                key,
            ],
            "responses": {"200": _ok("The data (any JSON with ?key)."), "400": _error("Bad parameters."),
                          "404": _error(not_found_text), **_COMMON_ERRORS},
        },
        "put": {
            "summary": "Replace the data (a JSON object), or set one key (?key=, body: any JSON value).",
            "parameters": [key, if_match],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {}}}},
            "responses": {"200": _ok("The data now stored.", {"type": "object"}),
                          "400": _error("Malformed body, or data refused by the resource's schema."),
                          "404": _error(not_found_text), "409": _error("Conflicting write."), **_COMMON_ERRORS},
        },
        "delete": {
            "summary": "Remove one key (?key=), or delete the values object and its history.",
            "parameters": [key, if_match],
            "responses": {"200": _ok("The data now stored (key removed)."), "204": {"description": "Deleted."},
                          "404": _error(not_found_text), "409": _error("Conflicting write."), **_COMMON_ERRORS},
        },
        "post": {
            "summary": "Revert: make a kept version's data current again (?revert=<n>), as a new version.",
            "parameters": [{"name": "revert", "in": "query", "required": True,
                            "schema": {"type": "integer", "minimum": 1}}, if_match],
            "responses": {"200": _ok("The data now stored."), "404": _error(not_found_text),
                          "409": _error("Conflicting write."), **_COMMON_ERRORS},
        },
    }


VALUES_OPERATIONS = _values_operations()
OVERRIDES_DESCRIPTION = "Same as .../values, for the overrides (alias .../override)."
COMPONENTS: dict[str, Any] = {
    "parameters": [_NAMESPACE],
    "get": {"summary": "List components.", "responses": {
        "200": _ok("Components.", {"type": "array", "items": {"$ref": "#/components/schemas/Component"}}),
        **_COMMON_ERRORS}},
    "post": {"summary": "Create a component (a ConfigComponent object).",
             "requestBody": {"required": True, "content": {"application/json": {
                 "schema": {"$ref": "#/components/schemas/Component"}}}},
             "responses": {"200": _ok("Created.", {"$ref": "#/components/schemas/Component"}),
                           "400": _error("Malformed body."), "409": _error("Exists already."),
                           **_COMMON_ERRORS}},
}
COMPONENT: dict[str, Any] = {
    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}, _NAMESPACE],
    "get": {"summary": "One component.", "responses": {
        "200": _ok("The component.", {"$ref": "#/components/schemas/Component"}),
        "404": _error("No such component."), **_COMMON_ERRORS}},
}
ENVIRONMENTS: dict[str, Any] = {
    "parameters": [_NAMESPACE],
    "get": {"summary": "List environments.", "responses": {
        "200": _ok("Environments.", {"type": "array", "items": {"$ref": "#/components/schemas/Environment"}}),
        **_COMMON_ERRORS}},
    "post": {"summary": "Create an environment (an Environment object).",
             "requestBody": {"required": True, "content": {"application/json": {
                 "schema": {"$ref": "#/components/schemas/Environment"}}}},
             "responses": {"200": _ok("Created.", {"$ref": "#/components/schemas/Environment"}),
                           "400": _error("Malformed body."), "409": _error("Exists already."),
                           **_COMMON_ERRORS}},
}
ENVIRONMENT: dict[str, Any] = {
    "parameters": [{"name": "env", "in": "path", "required": True, "schema": {"type": "string"}}, _NAMESPACE],
    "get": {"summary": "One environment.", "responses": {
        "200": _ok("The environment.", {"$ref": "#/components/schemas/Environment"}),
        "404": _error("No such environment."), **_COMMON_ERRORS}},
}
SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["code", "error", "message"], "properties": {
        "code": {"type": "integer"}, "error": {"type": "string"}, "message": {"type": "string"},
        "notFound": {"type": "string", "enum": ["environment", "level", "role", "node", "resource",
                                                "version", "values", "key", "component", "route"]}}},
    "Component": {"type": "object", "properties": {
        "id": {"type": "string"}, "name": {"type": "string"},
        "resource_definitions": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "schema": {"type": "object"}, "description": {"type": "string"}}}}}},
    "Environment": {"type": "object", "properties": {
        "id": {"type": "string"}, "name": {"type": "string"}, "release": {"type": "string"},
        "components": {"type": "array", "items": {"type": "string"}},
        "hierarchy_levels": {"type": "array", "items": {"type": "string"}},
        "nodes": {"type": "array", "items": {"type": "object"}}}},
}
