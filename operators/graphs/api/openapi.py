"""What the deployment graph routes say of themselves in the API's OpenAPI document: their operations and
schemas (the routes are declared in `operators.graphs.api.handlers`)."""

from __future__ import annotations

from typing import Any

from operators.graphs.history import MAX_PAGE
from operators.graphs.output import PAGE_BYTES

PREFIX = "/api/v1"
def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/GraphError"}}}}


def _graph(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DeploymentGraph"}}}}


_NS = {"name": "namespace", "in": "query", "required": False, "schema": {"type": "string"},
       "description": "The Kubernetes namespace (default: the server's)."}


def _path_param(name: str, description: str, enum: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if enum:
        schema["enum"] = enum
    return {"name": name, "in": "path", "required": True, "schema": schema, "description": description}


_COMMON = {"401": _error("No valid credentials."), "403": _error("Not permitted by RBAC."),
           "503": _error("The Kubernetes API server or the authentication backend is unreachable.")}
_WRITE = {"400": _error("Malformed body: the message names the task and field."),
          "404": _error("No such graph or cluster (see notFound)."),
          "409": _error("A second graph of an owner and type, or a concurrent write."),
          "422": _error("Refused by the admission webhook (its message)."), **_COMMON}
_TASKS_BODY = {"required": True, "content": {"application/json": {"schema": {"type": "object", "properties": {
    "name": {"type": "string"}, "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/FuelTask"}}}}}}}
GRAPHS: dict[str, Any] = {
        "parameters": [_NS],
        "get": {"summary": "List the deployment graphs of the namespace.", "responses": {"200": {
            "description": "The graphs.", "content": {"application/json": {"schema": {
                "type": "array", "items": {"$ref": "#/components/schemas/DeploymentGraph"}}}}}, **_COMMON}},
        "post": {"summary": "Create a graph (a DeploymentGraph object).",
                 "requestBody": {"required": True, "content": {"application/json": {"schema": {
                     "$ref": "#/components/schemas/DeploymentGraph"}}}},
                 "responses": {"201": _graph("Created."), **_WRITE}},
    }
GRAPH: dict[str, Any] = {
        "parameters": [_path_param("name", "The DeploymentGraph's name (a graph's id)."), _NS],
        "get": {"summary": "One graph.", "responses": {"200": _graph("The graph."),
                                                       "404": _error("No such graph."), **_COMMON}},
        "put": {"summary": "Replace the verbose name and tasks.", "requestBody": _TASKS_BODY,
                "responses": {"200": _graph("The graph now."), **_WRITE}},
        "patch": {"summary": "Change the verbose name or the tasks.", "requestBody": _TASKS_BODY,
                  "responses": {"200": _graph("The graph now."), **_WRITE}},
        "delete": {"summary": "Delete the graph.", "responses": {"204": {"description": "Deleted."}, **_WRITE}},
    }
OWNED: dict[str, Any] = {
        "parameters": [_path_param("model", "What owns the graph.", ["releases", "clusters", "plugins"]),
                       _path_param("owner", "The release, environment (cluster) or plugin."),
                       _path_param("type", "The graph type."), _NS],
        "get": {"summary": "The graph of this owner and type.",
                "responses": {"200": _graph("The graph."), "404": _error("None (the owner's types are named)."),
                              **_COMMON}},
        "put": {"summary": "Create or replace the graph of this owner and type.", "requestBody": _TASKS_BODY,
                "responses": {"200": _graph("Replaced."), "201": _graph("Created."), **_WRITE}},
        "patch": {"summary": "Change the graph of this owner and type.", "requestBody": _TASKS_BODY,
                  "responses": {"200": _graph("The graph now."), **_WRITE}},
    }
DEPLOYMENT_TASKS: dict[str, Any] = {
        "parameters": [_path_param("env", "The environment (cluster)."), _NS,
                       {"name": "graph_type", "in": "query", "required": False, "schema": {"type": "string"},
                        "description": "The graph type (default 'default'); also ?type="},
                       {"name": "level", "in": "query", "required": False,
                        "schema": {"type": "string", "enum": ["all", "release", "plugins", "cluster"]},
                        "description": "One level of the merge only (default all)."},
                       {"name": "origin", "in": "query", "required": False, "schema": {"type": "boolean"},
                        "description": "Add to each task the level it came from (`origin`)."}],
        "get": {"summary": "The merged tasks (release < enabled plugins < cluster, whole-task replacement), in "
                           "order.",
                "responses": {"200": {"description": "The tasks.", "content": {"application/json": {"schema": {
                    "type": "array", "items": {"$ref": "#/components/schemas/FuelTask"}}}}},
                    "404": _error("No such cluster."), "409": _error("Graphs that cannot be merged."), **_COMMON}},
    }
EXECUTE: dict[str, Any] = {
        "parameters": [_NS],
        "post": {"summary": "Run graphs on a cluster: creates a GraphRun (follow it with stead graph status).",
                 "requestBody": {"required": True, "content": {"application/json": {"schema": {
                     "type": "object", "required": ["cluster", "graphs"], "properties": {
                         "cluster": {"type": "string"}, "name": {"type": "string"},
                         "graphs": {"type": "array", "items": {"type": "object", "properties": {
                             "type": {"type": "string"}, "nodes": {"type": "array", "items": {"type": "string"}},
                             "tasks": {"type": "array", "items": {"type": "string"}}}}},
                         "dry_run": {"type": "boolean"}, "noop_run": {"type": "boolean"},
                         "force": {"type": "boolean"},
                         "subgraphs": {"type": "array", "items": {"type": "object", "properties": {
                             "start": {"type": "array", "items": {"type": "string"},
                                       "description": "Task ids or /regex/; an entry may end with /NODES "
                                                      "(netconfig/node-1,node-2), Fuel's node range."},
                             "end": {"type": "array", "items": {"type": "string"}},
                             "start_nodes": {"type": "array", "items": {"type": "string"}},
                             "end_nodes": {"type": "array", "items": {"type": "string"}}}}}}}}}},
                 "responses": {"202": {"description": "Accepted: the GraphRun's name.", "content": {
                     "application/json": {"schema": {"type": "object", "properties": {
                         "name": {"type": "string"}, "namespace": {"type": "string"},
                         "cluster": {"type": "string"}}}}}},
                     "400": _error("Malformed body, nodes not in the cluster, or a type it has no graph of (its "
                                   "types are named)."),
                     "404": _error("No such cluster."),
                     "409": _error("A run is going on the cluster (named)."), **_COMMON}},
    }
_RUN = _path_param("run", "The GraphRun's name.")
_FILTERS = [{"name": name, "in": "query", "required": False, "schema": {"type": "string"}, "description": text}
            for name, text in (("node", "The node (needed when the task runs on several)."),
                               ("type", "The graph type (needed when the task is in several of the run's types)."))]
OUTPUTS: dict[str, Any] = {
    "parameters": [_RUN, _NS, *_FILTERS,
                   {"name": "task", "in": "query", "required": False, "schema": {"type": "string"},
                    "description": "Only this task's instances."}],
    "get": {"summary": "The run's task instances, with the bytes of output each stored (a caller that may get the "
                       "GraphRun).",
            "responses": {"200": {"description": "The instances.", "content": {"application/json": {"schema": {
                "type": "object", "properties": {
                    "run": {"type": "string"}, "namespace": {"type": "string"},
                    "instances": {"type": "array", "items": {"type": "object", "properties": {
                        "type": {"type": "string"}, "task": {"type": "string"},
                        "node": {"type": "string", "nullable": True}, "bytes": {"type": "integer"}}}}}}}}},
                "404": _error("No such run, or no plan of it on this operator's volume."),
                "503": _error("This server has no runs' files (or the API server is unreachable).")} | {
                k: v for k, v in _COMMON.items() if k != "503"}},
}
OUTPUT: dict[str, Any] = {
    "parameters": [_RUN, _path_param("task", "The task's id."), _NS, *_FILTERS,
                   {"name": "offset", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
                    "description": "The first byte to return (default 0)."},
                   {"name": "limit", "in": "query", "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": PAGE_BYTES},
                    "description": f"At most this many bytes (default and most: {PAGE_BYTES})."}],
    "get": {"summary": "A task instance's whole output, masked as stored, a page at a time.",
            "responses": {"200": {"description": "A page: next_offset is where the next starts (null: the end).",
                                  "content": {"application/json": {"schema": {
                                      "$ref": "#/components/schemas/OutputPage"}}}},
                          "400": _error("A malformed name or number, or a task on several nodes with none named."),
                          "404": _error("No such run, task, node or type (see notFound; the message says what "
                                        "there is)."), **_COMMON}},
}
HISTORY: dict[str, Any] = {
    "parameters": [_path_param("env", "The environment (cluster)."), _NS,
                   *({"name": name, "in": "query", "required": False, "schema": {"type": "string"},
                      "description": text} for name, text in (
                       ("node", "Only this node's instances."), ("task", "Only this task's instances."),
                       ("type", "Only this graph type's instances."),
                       ("state", "Only instances that ended so: success, failure or aborted."),
                       ("run", "Only this GraphRun's instances."),
                       ("continue", "The `continue` of the previous page (CSV: its X-Continue header)."))),
                   {"name": "limit", "in": "query", "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
                    "description": "Entries per page (default 100)."},
                   {"name": "format", "in": "query", "required": False,
                    "schema": {"type": "string", "enum": ["json", "csv"]}, "description": "json (default) or csv."}],
    "get": {"summary": "Task instances of the environment's runs, newest first (a caller that may list GraphRuns).",
            "responses": {"200": {"description": "A page of entries; `continue` is null on the last page.",
                                  "content": {"application/json": {"schema": {
                                      "$ref": "#/components/schemas/HistoryPage"}},
                                      "text/csv": {"schema": {"type": "string"}}}},
                          "400": _error("A malformed filter, limit or continue token."),
                          "404": _error("No such cluster (see notFound)."), **_COMMON}},
}
SCHEMAS: dict[str, Any] = {
    "HistoryPage": {"type": "object", "properties": {
        "cluster": {"type": "string"}, "namespace": {"type": "string"},
        "continue": {"type": "string", "nullable": True},
        "entries": {"type": "array", "items": {"type": "object", "properties": {
            "seq": {"type": "integer"}, "run": {"type": "string"}, "runUid": {"type": "string"},
            "step": {"type": "string"}, "type": {"type": "string"}, "task": {"type": "string"},
            "node": {"type": "string", "nullable": True},
            "state": {"type": "string", "enum": ["success", "failure", "aborted"]},
            "started": {"type": "string", "nullable": True}, "finished": {"type": "string", "nullable": True},
            "duration": {"type": "number", "nullable": True}, "attempts": {"type": "integer"},
            "reason": {"type": "string"},
            "noop": {"type": "object", "properties": {
                "wouldChange": {"type": "integer"}, "more": {"type": "integer"},
                "resources": {"type": "array", "items": {"type": "string"}}}}}}}}},
    "OutputPage": {"type": "object", "properties": {
        "run": {"type": "string"}, "namespace": {"type": "string"}, "type": {"type": "string"},
        "task": {"type": "string"}, "node": {"type": "string", "nullable": True},
        "size": {"type": "integer", "description": "Bytes stored in all."},
        "offset": {"type": "integer"}, "next_offset": {"type": "integer", "nullable": True},
        "truncated": {"type": "boolean", "description": "More follows from next_offset."},
        "message": {"type": "string", "description": "When truncated: where it was cut and how to go on."},
        "output": {"type": "string"}}},
    "GraphError": {"type": "object", "required": ["code", "error", "message"], "properties": {
        "code": {"type": "integer"}, "error": {"type": "string"}, "message": {"type": "string"},
        "notFound": {"type": "string", "enum": ["graph", "cluster", "route", "graphrun", "task", "node", "type"]}}},
    "FuelTask": {"type": "object", "required": ["id", "type"], "additionalProperties": True,
                 "description": "A task as Fuel's task files write it (id, type, version, roles/groups/tags, "
                                "requires, required_for, cross-depends, cross-depended-by, condition, parameters, "
                                "strategy, ...); unknown keys are kept.",
                 "properties": {"id": {"type": "string"}, "type": {"type": "string"}}},
    "DeploymentGraph": {"type": "object", "properties": {
        "id": {"type": "string", "description": "The DeploymentGraph's name."},
        "name": {"type": "string", "nullable": True, "description": "The verbose name."},
        "type": {"type": "string"}, "namespace": {"type": "string"}, "ready": {"type": "boolean"},
        "relations": {"type": "array", "items": {"type": "object", "properties": {
            "model": {"type": "string", "enum": ["cluster", "release", "plugin"]}, "model_id": {"type": "string"},
            "type": {"type": "string"}}}},
        "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/FuelTask"}}}},
}

