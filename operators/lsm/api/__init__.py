"""The service inventory HTTP API (docs/services.md, "The inventory HTTP API"): Inmanta's paths under
`/lsm/v1`, served on the configuration API's server (same port, TLS and authentication) as its
extension (`operators.runtime.api.extension`).

    GET|POST               /lsm/v1/service_inventory/<entity>
    GET|PATCH|DELETE       /lsm/v1/service_inventory/<entity>/<id>
    POST                   /lsm/v1/service_inventory/<entity>/<id>/state  (also /lsm/v1/services/...)
    GET                    /lsm/v1/service_inventory/<entity>/<id>/diff   (what would change: status.diff)
    GET|POST               /lsm/v2/order        service orders: a POST creates a ServiceOrder object
    GET                    /lsm/v2/order/<id>   one order (name or uid): its items' states, its result

`<id>` is the instance's uid, its name, or `<identity attribute>=<value>`. Kubernetes stays the
source of truth: reads are ServiceInstance objects, writes create the object, patch
`spec.attributes` / `spec.currentVersion` / `spec.stateRequest`, or delete it. Before writing, the
checks of the admission webhook run (`check_request`, `check_delete`): a refusal is the answer (409
or 422, its reason as `error`), and nothing is written; a refusal of the webhook itself (the object
changed meanwhile) comes back from the API server and is passed on with its message. Patches carry
the `resourceVersion` the checks saw, so a write never lands on an object they did not judge.

Writes impersonate the caller (`ExtensionBase.caller`): the API server authorizes, admits and audits them as the
caller's. Authorization: a SubjectAccessReview of the caller for `serviceinstances.stead.dev` with the verb
(get, list, create, update, delete) in the namespace (`?namespace=`, default the server's), before the
entity or the instance is looked up: on the instance `<id>` names when it can be a name, else on all of the
namespace's. A caller without it gets 403 whether the entity exists or not; a 404 for an unknown entity
lists the entities there only to a caller who may list `serviceentities`.

The package: `handlers` (`InventoryApi` and its routes, declared once), `openapi` (their operations and
schemas).
"""

from operators.lsm.api.handlers import ROUTE_DOCS, ROUTES, InventoryApi
from operators.lsm.api.views import view

__all__ = ["ROUTES", "ROUTE_DOCS", "InventoryApi", "view"]
