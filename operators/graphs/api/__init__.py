"""The deployment graphs HTTP API (seed 004; docs/graphs.md, "The REST API"): Fuel's paths under `/api/v1`,
served on the configuration API's server (same port, TLS and authentication) as its extension
(`operators.runtime.api.extension`).

    GET|POST                  /api/v1/graphs/                                   list, create
    GET|PUT|PATCH|DELETE      /api/v1/graphs/<name>/                            one graph (its object's name)
    GET|PUT|PATCH             /api/v1/releases/<release>/deployment_graphs/<type>/
    GET|PUT|PATCH             /api/v1/clusters/<environment>/deployment_graphs/<type>/
    GET|PUT|PATCH             /api/v1/plugins/<plugin>/deployment_graphs/<type>/
    GET                       /api/v1/clusters/<environment>/deployment_tasks/?graph_type=T
    GET                       /api/v1/clusters/<environment>/history/          task instances across runs
    POST                      /api/v1/graphs/execute/                           a GraphRun (202)
    GET                       /api/v1/graphruns/<run>/output/                   its task instances, output sizes
    GET                       /api/v1/graphruns/<run>/output/<task>/?node=N     an instance's whole output, paged

The trailing slash is optional. Bodies use Fuel's names: a graph is `{id, name, type, relations: [{model,
model_id, type}], tasks}` with the tasks in Fuel's task file form (`cross-depends`, `required_for`, `role`,
`{yaql_exp: ...}`), translated with `operators.graphs.fuel`; "cluster" is Fuel's word for an Environment.
Kubernetes stays the source of truth: every write is a DeploymentGraph or a GraphRun object, so the
admission webhook judges it (a second graph of an owner and type is its 409, passed on) and GitOps sees
the same data.

Writes impersonate the caller (`ExtensionBase.caller`): the API server authorizes, admits and audits them as the
caller's. Authorization: a SubjectAccessReview of the caller for `deploymentgraphs.stead.dev` with the verb (get,
list, create, update, delete), `graphruns.stead.dev` (create) for an execution, (list) for the history, in the
namespace (`?namespace=`, default the server's).

The helpers that find, write and merge graphs (`graph_items`, `find_graph`, `save_graph`, `levels_of`) are
shared with `stead graph` (`operators.graphs.cli`); those that need no models are in `operators.graphs.objects`.

The package: `graphs` (what the routes and `stead graph` share), `handlers` (`GraphsApi` and its routes,
declared once), `openapi` (their operations and schemas).
"""

from operators.graphs.api.graphs import environment_graph_types, levels_of, save_graph
from operators.graphs.api.handlers import ROUTE_DOCS, ROUTES, GraphsApi

__all__ = ["ROUTES", "ROUTE_DOCS", "GraphsApi", "environment_graph_types", "levels_of", "save_graph"]
