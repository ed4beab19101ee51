"""What the configuration API says about itself: the list of its routes (served at its root,
`GET /api/v1`) and its OpenAPI 3.0 document (at `/api/v1/config/openapi.json`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from operators.config.api.calls import PREFIX

if TYPE_CHECKING:
    from operators.config.api.extension import ApiExtension

VALUES_TEMPLATE = PREFIX + "/environments/{env}[/{level}/{value}...]/resources/{resource}/values"
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/api/v1", "this list (also at / and /api/v1/config)"),
    ("GET", PREFIX + "/openapi.json", "the OpenAPI 3.0 document of the API"),
    ("GET", PREFIX + "/components", "list the components"),
    ("POST", PREFIX + "/components", "create a component: {name, resource_definitions: {name: {schema}}}"),
    ("GET", PREFIX + "/components/{name}", "one component"),
    ("GET", PREFIX + "/environments", "list the environments"),
    ("POST", PREFIX + "/environments",
     "create an environment: {name, release, nodes, hierarchy_levels, components}"),
    ("GET", PREFIX + "/environments/{env}", "one environment"),
    ("GET", VALUES_TEMPLATE, "the values stored at the level; ?effective: merged from the root down, "
                             "&trace: with the level each key came from; ?key=a.b: one key; ?version=N: a kept "
                             "version; ?history: the kept versions"),
    ("PUT", VALUES_TEMPLATE, "replace the values (a JSON object); ?key=a.b: set one key (the body: any JSON "
                             "value); If-Match: the ETag of a read"),
    ("DELETE", VALUES_TEMPLATE, "delete the values and their history; ?key=a.b: remove one key"),
    ("POST", VALUES_TEMPLATE, "?revert=N: put version N's data back in force, as a new version"),
    ("GET|PUT|DELETE|POST", VALUES_TEMPLATE.removesuffix("/values") + "/overrides",
     "the same for the overrides (also .../override)"),
)
"""Every route (method, path template, what it does), as the API's root lists them."""


def route_list(extra: Iterable[tuple[str, str, str]] = ()) -> bytes:
    """The root's answer: JSON with one route per line, for a person reading `curl` output too; `extra`:
    the routes of the API's extensions."""
    lines = ",\n".join(json.dumps({"method": m, "path": p, "does": d}, ensure_ascii=False)
                        for m, p, d in (*ROUTES, *extra))
    notes = {"head": "HEAD is answered wherever GET is, without the body",
             "namespace": "every route takes ?namespace=NS (default: the server's)",
             "authentication": "a Kubernetes bearer token, a client certificate of the cluster's client CA, "
                               "or HTTP Basic when the server has credentials for it"}
    return (f'{{"routes": [\n{lines}\n],\n"notes": {json.dumps(notes, ensure_ascii=False)}}}\n').encode()


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or {}}}}


_NAMESPACE = {"name": "namespace", "in": "query", "required": False, "schema": {"type": "string"},
              "description": "The Kubernetes namespace (default: the server's)."}
_COMMON_ERRORS = {"401": _error("No valid credentials."), "403": _error("Not permitted by RBAC."),
                  "503": _error("The store or the authentication backend is unreachable.")}
_VALUES_PARAMS = [
    {"name": "env", "in": "path", "required": True, "schema": {"type": "string"}, "description": "Environment."},
    {"name": "levels", "in": "path", "required": True, "schema": {"type": "string"},
     "description": "Zero or more <level>/<value> pairs in hierarchy order (nodes/<fqdn> for level node).",
     "x-stead-multi-segment": True},
    {"name": "resource", "in": "path", "required": True, "schema": {"type": "string"},
     "description": "Resource name; may contain '/'.", "x-stead-multi-segment": True},
    _NAMESPACE,
]
_VALUES_PATH = PREFIX + "/environments/{env}/{levels}/resources/{resource}/values"


def _values_operations() -> dict[str, Any]:
    key = {"name": "key", "in": "query", "schema": {"type": "string"}, "description": "Dotted key path, e.g. a.b.0."}
    if_match = {"name": "If-Match", "in": "header", "schema": {"type": "string"},
                "description": "Precondition: the ETag read before; 409 if the values changed since."}
    not_found_text = "Environment, level, role, node, resource, version, values or key not found (see notFound)."
    return {
        "parameters": _VALUES_PARAMS,
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


OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Stead configuration store (ConfigDB)", "version": "v1",
             "description": "Hierarchical configuration values of Stead environments. Data lives in ConfigValues "
                            "objects; every change is a version. Paths under /environments/{env} accept any number "
                            "of <level>/<value> segments, and resource names may contain '/'."},
    "security": [{"bearer": []}, {"basic": []}],
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "A Kubernetes token (TokenReview + RBAC). "
                       "A client certificate of the cluster's client CA (TLS; user = Subject CN, groups = Subject O, "
                       "then RBAC) works as well where the server asks for one (`stead operator "
                       "--config-api-client-ca`)."},
            "basic": {"type": "http", "scheme": "basic", "description": "Credentials from the configured Secret."},
        },
        "schemas": {
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
        },
    },
    "paths": {
        PREFIX + "/components": {
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
        },
        PREFIX + "/components/{name}": {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
                           _NAMESPACE],
            "get": {"summary": "One component.", "responses": {
                "200": _ok("The component.", {"$ref": "#/components/schemas/Component"}),
                "404": _error("No such component."), **_COMMON_ERRORS}},
        },
        PREFIX + "/environments": {
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
        },
        PREFIX + "/environments/{env}": {
            "parameters": [{"name": "env", "in": "path", "required": True, "schema": {"type": "string"}},
                           _NAMESPACE],
            "get": {"summary": "One environment.", "responses": {
                "200": _ok("The environment.", {"$ref": "#/components/schemas/Environment"}),
                "404": _error("No such environment."), **_COMMON_ERRORS}},
        },
        _VALUES_PATH: _values_operations(),
        _VALUES_PATH.removesuffix("/values") + "/overrides": {
            **_values_operations(), "description": "Same as .../values, for the overrides (alias .../override)."},
        PREFIX + "/openapi.json": {"get": {"summary": "This document.", "responses": {"200": _ok("OpenAPI 3.0.")}}},
        "/api/v1": {"get": {"summary": "The routes, one per line (also at / and /api/v1/config).",
                            "responses": {"200": _ok("{routes: [{method, path, does}], notes}")}}},
    },
}


def openapi_document(extensions: Sequence[ApiExtension]) -> dict[str, Any]:
    """The OpenAPI document with the paths and schemas of the API's extensions."""
    document = copy.deepcopy(OPENAPI)
    for extension in extensions:
        document["paths"].update(extension.openapi_paths())
        document["components"]["schemas"].update(extension.openapi_schemas())
    return document
