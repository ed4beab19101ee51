"""What the service inventory's routes say of themselves in the API's OpenAPI document: their operations
and schemas (the routes are declared in `operators.lsm.api.handlers`)."""

from __future__ import annotations

from typing import Any

from operators.lsm.paging import DEFAULT_LIMIT, MAX_LIMIT, SORT_FIELDS

PREFIX = "/lsm/v1"
INVENTORY = PREFIX + "/service_inventory/{entity}"
ORDER = "/lsm/v2/order"


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InventoryError"}}}}


def _instance(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {
        "type": "object", "required": ["data"],
        "properties": {"data": {"$ref": "#/components/schemas/ServiceInstance"}}}}}}


def _query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema or {"type": "string"},
            "description": description}


_LIST_PARAMETERS = [
    _query("limit", f"Rows per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}).",
           {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
    _query("sort", f"<field>.<asc|desc>, field one of {', '.join(SORT_FIELDS)} (default created_at.desc)."),
    _query("start_after", "A page's cursor: follow links.next / links.prev as they are."),
    _query("include_deleted", "Also instances being deleted (default false).", {"type": "boolean"}),
    *(_query(f"filter.{name}", text) for name, text in (
        ("id", "uid or name (repeat for any of several)."), ("state", "A state (repeat for any of several)."),
        ("deleted", "true: only instances being deleted; false: none of them."),
        ("attribute_set_empty", "candidate_attributes, active_attributes or rollback_attributes: that set empty."),
        ("attribute_set_not_empty", "The same: that set not empty."),
        ("id_or_service_identity", "A substring of the uid, the name or the identity value."))),
]


_NS = {"name": "namespace", "in": "query", "required": False, "schema": {"type": "string"},
       "description": "The Kubernetes namespace (default: the server's)."}
_ENTITY = {"name": "entity", "in": "path", "required": True, "schema": {"type": "string"},
           "description": "The ServiceEntity."}
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
       "description": "The instance: its uid, its name, or <identity attribute>=<value>."}
_VERSION = {"name": "current_version", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1},
            "description": "The version you saw; 409 when the instance's is another."}
_COMMON = {"401": _error("No valid credentials."), "403": _error("Not permitted by RBAC."),
           "503": _error("The Kubernetes API server or the authentication backend is unreachable.")}
_WRITE_ERRORS = {"400": _error("Malformed body or parameters."),
                 "404": _error("No such entity or instance (see notFound)."),
                 "409": _error("A stale current_version (StaleVersion), a state that does not allow it, or a "
                               "concurrent write."),
                 "422": _error("Attributes the entity refuses (r or rw attributes, unknown ones, wrong types)."),
                 **_COMMON}
_JSON_BODY = "application/json"
STATE: dict[str, Any] = {
    "parameters": [_ENTITY, _ID, _NS],
    "post": {"summary": "Request a state (api_set_state): written to spec.stateRequest.",
             "requestBody": {"required": True, "content": {_JSON_BODY: {"schema": {"type": "object",
                             "required": ["current_version", "target_state"], "properties": {
                                 "current_version": {"type": "integer"}, "target_state": {"type": "string"},
                                 "message": {"type": "string"}}}}}},
             "responses": {"200": _instance("Accepted: the instance, its request in spec."), **_WRITE_ERRORS}},
}
MIGRATE: dict[str, Any] = {
    "parameters": [_ENTITY, _ID, _NS],
    "post": {"summary": "Move the instance to another entity version (a migration): written to spec.entityVersion "
                        "and spec.migration; its attribute sets are validated under that version first.",
             "requestBody": {"required": True, "content": {_JSON_BODY: {"schema": {"type": "object",
                             "required": ["current_version", "target_entity_version", "state"], "properties": {
                                 "current_version": {"type": "integer"},
                                 "target_entity_version": {"type": "integer", "minimum": 1},
                                 "state": {"type": "string", "description": "The state it lands in."},
                                 "attributes": {"type": "object", "description": "Values the new version needs."},
                                 "remove": {"type": "array", "items": {"type": "string"},
                                            "description": "Attributes the new version no longer has."},
                                 "message": {"type": "string"}}}}}},
             "responses": {"200": _instance("Accepted: the instance, its migration in spec."), **_WRITE_ERRORS}},
}
INSTANCES: dict[str, Any] = {
    "parameters": [_ENTITY, _NS],
    "get": {"summary": "List the instances of a service entity: filtered, sorted, a page at a time "
                       "(filter.<identity attribute>=<value> too).", "parameters": _LIST_PARAMETERS, "responses": {
        "200": {"description": "A page of instances.", "content": {_JSON_BODY: {"schema": {
            "type": "object", "required": ["data", "links", "metadata"], "properties": {
                "data": {"type": "array", "items": {"$ref": "#/components/schemas/ServiceInstance"}},
                "links": {"type": "object", "properties": {
                    "self": {"type": "string"}, "next": {"type": "string"}, "prev": {"type": "string"}}},
                "metadata": {"type": "object", "properties": {
                    "total": {"type": "integer"}, "before": {"type": "integer"}, "after": {"type": "integer"},
                    "page_size": {"type": "integer"}}}}}}}},
        "400": _error("A parameter it cannot understand (named)."),
        "404": _error("No such service entity."), **_COMMON}},
    "post": {"summary": "Create a service instance (a ServiceInstance object).",
             "requestBody": {"required": True, "content": {_JSON_BODY: {"schema": {"type": "object", "properties": {
                 "attributes": {"type": "object"}, "service_instance_id": {"type": "string"},
                 "name": {"type": "string"}}}}}},
             "responses": {"201": _instance("Created: version 1, in the lifecycle's initial state."),
                           **_WRITE_ERRORS}},
}
INSTANCE: dict[str, Any] = {
    "parameters": [_ENTITY, _ID, _NS],
    "get": {"summary": "One service instance.", "parameters": [_VERSION],
            "responses": {"200": _instance("The instance."), "404": _error("No such entity or instance."),
                          "409": _error("A stale current_version."), **_COMMON}},
    "patch": {"summary": "Update attributes (on_update): written to spec.attributes and spec.currentVersion.",
              "requestBody": {"required": True, "content": {_JSON_BODY: {"schema": {"type": "object",
                              "required": ["current_version", "attributes"], "properties": {
                                  "current_version": {"type": "integer"}, "attributes": {"type": "object"}}}}}},
              "responses": {"200": _instance("Accepted: the instance, its new attributes in spec."),
                            **_WRITE_ERRORS}},
    "delete": {"summary": "Delete (on_delete): the object is deleted; the lifecycle's delete path runs.",
               "parameters": [_VERSION],
               "responses": {"200": _instance("Accepted: the instance being deleted."), **_WRITE_ERRORS}},
}
DIFF: dict[str, Any] = {
    "parameters": [_ENTITY, _ID, _NS],
    "get": {"summary": "What the waiting candidate set would change (status.diff), computed without running "
                       "anything; data null when no candidate set waited.",
            "responses": {"200": {"description": "The diff.", "content": {_JSON_BODY: {"schema": {
                "type": "object", "required": ["data"], "properties": {"data": {
                    "$ref": "#/components/schemas/ServiceDiff"}}}}}},
                "404": _error("No such entity or instance."), **_COMMON}},
}
_ORDER_ANSWER = {"content": {_JSON_BODY: {"schema": {"type": "object", "required": ["data"], "properties": {
    "data": {"$ref": "#/components/schemas/ServiceOrder"}}}}}}
ORDERS: dict[str, Any] = {
    "parameters": [_NS],
    "get": {"summary": "The namespace's service orders, oldest first.", "responses": {
        "200": {"description": "The orders.", "content": {_JSON_BODY: {"schema": {
            "type": "object", "required": ["data"], "properties": {
                "data": {"type": "array", "items": {"$ref": "#/components/schemas/ServiceOrder"}}}}}}},
        **_COMMON}},
    "post": {"summary": "Create a service order (a ServiceOrder object): items that create, update or delete "
                        "instances, in dependency order.",
             "requestBody": {"required": True, "content": {_JSON_BODY: {"schema": {
                 "type": "object", "required": ["service_order_items"], "properties": {
                     "name": {"type": "string"}, "description": {"type": "string"},
                     "service_order_items": {"type": "array", "items": {"type": "object",
                         "required": ["instance_id", "action"], "properties": {
                             "id": {"type": "string", "description": "Default: instance_id."},
                             "instance_id": {"type": "string", "description": "The instance's name."},
                             "action": {"type": "string", "enum": ["create", "update", "delete"]},
                             "service_entity": {"type": "string"}, "attributes": {"type": "object"},
                             "edits": {"type": "object"},
                             "dependencies": {"type": "array", "items": {"type": "string"}}}}}}}}}},
             "responses": {"201": {"description": "Created: the order, acknowledged.", **_ORDER_ANSWER},
                           "400": _error("Malformed body."),
                           "409": _error("An order of that name exists."),
                           "422": _error("An order the checks refuse: a cycle, an unknown dependency (named)."),
                           **_COMMON}},
}
ONE_ORDER: dict[str, Any] = {
    "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
                    "description": "The order's name or uid."}, _NS],
    "get": {"summary": "One service order: each item's state and failure type, the order's state.",
            "responses": {"200": {"description": "The order.", **_ORDER_ANSWER},
                          "404": _error("No such order."), **_COMMON}},
}
SCHEMAS: dict[str, Any] = {
    "ServiceOrder": {"type": "object", "properties": {
        "id": {"type": "string", "description": "metadata.uid"}, "name": {"type": "string"},
        "namespace": {"type": "string"}, "environment": {"type": "string"}, "description": {"type": "string"},
        "created_at": {"type": "string"},
        "status": {"type": "object", "properties": {"state": {"type": "string", "enum": [
            "acknowledged", "in_progress", "completed", "failed", "partial"]}}},
        "service_order_items": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "instance_id": {"type": "string"}, "action": {"type": "string"},
            "dependencies": {"type": "array", "items": {"type": "string"}},
            "status": {"type": "object", "properties": {
                "state": {"type": "string", "enum": ["waiting", "in_progress", "completed", "failed", "skipped"]},
                "failure_type": {"type": "string", "nullable": True},
                "reason": {"type": "string", "nullable": True}}}}}}}},
    "InventoryError": {"type": "object", "required": ["code", "error", "message"], "properties": {
        "code": {"type": "integer"},
        "error": {"type": "string", "description": "One word: NotFound, StaleVersion, UpdateNotAllowed, ..."},
        "message": {"type": "string"},
        "notFound": {"type": "string", "enum": ["service_entity", "service_instance", "service_order", "route"]}}},
    "ServiceDiff": {"type": "object", "nullable": True, "properties": {
        "id": {"type": "string"}, "name": {"type": "string"},
        "instance_version": {"type": "integer", "description": "The instance's version now."},
        "version": {"type": "integer", "description": "The instance's version the diff was computed at."},
        "status": {"type": "string", "enum": ["pending", "applied", "discarded"]},
        "state": {"type": "string", "description": "The state the candidate set waits in."},
        "requests": {"type": "array", "items": {"type": "string"},
                     "description": "The state requests that approve it, in order."},
        "transfers": {"type": "array", "items": {"type": "string"}},
        "target": {"type": "string", "nullable": True},
        "action": {"type": "string", "enum": ["create", "update", "delete", "none"]},
        "app": {"type": "string", "nullable": True}, "action_run": {"type": "string", "nullable": True},
        "attributes": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "old": {}, "new": {}}}},
        "inputs": {"type": "array", "items": {"type": "object", "properties": {
            "variable": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"},
            "secret": {"type": "boolean", "description": "Values masked."}}}},
        "message": {"type": "string"}, "applied_version": {"type": "integer", "nullable": True}}},
    "ServiceInstance": {"type": "object", "properties": {
        "id": {"type": "string", "description": "metadata.uid"}, "name": {"type": "string"},
        "namespace": {"type": "string"}, "environment": {"type": "string", "description": "The namespace."},
        "service_entity": {"type": "string"}, "version": {"type": "integer"}, "config": {"type": "object"},
        "service_entity_version": {"type": "integer", "nullable": True,
                                   "description": "The entity version the instance uses."},
        "state": {"type": "string", "nullable": True}, "candidate_attributes": {"type": "object", "nullable": True},
        "active_attributes": {"type": "object", "nullable": True},
        "rollback_attributes": {"type": "object", "nullable": True},
        "created_at": {"type": "string"}, "last_updated": {"type": "string"}, "deleted": {"type": "boolean"},
        "service_identity_attribute_value": {"type": "string", "nullable": True},
        "model_state": {"type": "string", "nullable": True}, "app": {"type": "string", "nullable": True},
        "attributes": {"type": "object", "description": "spec.attributes: the client's attributes."},
        "state_request": {"type": "object", "nullable": True}, "refused": {"type": "object", "nullable": True},
        "validation_problems": {"type": "array", "items": {"type": "string"}, "nullable": True},
        "ways_out": {"type": "array", "items": {"type": "string"}, "nullable": True},
        "log": {"type": "array", "items": {"type": "object"}}, "conditions": {"type": "array",
                                                                              "items": {"type": "object"}}}},
}
