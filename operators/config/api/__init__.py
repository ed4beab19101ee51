"""The configuration store's HTTP API (docs/configuration.md), under `/api/v1/config`.

`ConfigStoreApi` is the configuration store's extension of the API server (`operators.runtime.api`), which
the operator process serves over TLS; `ConfigApi(repository, authenticator)` is the server's handler with it
first, as the server composes it. Routes (HEAD too where GET is allowed):

    GET  /components                      list components   POST /components      create one
    GET  /components/<name>
    GET  /environments                    list environments POST /environments    create one
    GET  /environments/<env>
    GET|PUT|DELETE|POST  /environments/<env>[/<level>/<value>...]/resources/<resource>/values
                                                  (and .../overrides; .../override too)
    GET  /openapi.json
    GET  / (also /api/v1, /api/v1/config)   the routes, one per line (`ROUTES`)

Levels in the path name the environment's hierarchy levels root first; the plural
`nodes/<fqdn>` is accepted for a level `node` (any level's plural with an `s`). A node is
written by FQDN or name; its role level may be left out when it has one role
(`.../nodes/<fqdn>/resources/...` under levels `role, node`). On a values path:

- `GET` returns the data stored at that point; `?effective` the merged values from the root
  down to the point (see `operators.config.merge`), `&trace` (or `&show_lookup`, Fuel's spelling)
  adds which layer gave each key; `?version=<n>` reads a kept version of the object at the
  point (with `effective`, that object's layer at version n merged with the others as they
  are now); `?key=a.b.0` returns one key; `?history` lists the kept versions.
- `PUT` replaces the data with the JSON body (a mapping), or with `?key=` sets one key to the
  body (any JSON value). The response is the data now stored.
- `DELETE` with `?key=` removes a key; without, it deletes the values object (and its history).
- `POST ?revert=<n>` makes version n's data current again (recorded as a new version).
- Writes take an optional `If-Match` with the `ETag` of a `GET` without `effective` (or of a
  write): the object's generation and uid, so the operator's status writes do not invalidate
  it; a changed spec is 409. Without it, whole writes are last-writer-wins, and key writes
  retry their read-modify-write so concurrent key updates are not lost.

Errors are JSON `{"code", "error", "message"}`, plus `"notFound": "<what>"` on 404s:
environment, level, role (no node of the environment has it, and no values are stored at it),
node (not found at all, or not assigned to this environment), resource (not defined by an
enabled component), version, values, key.

Authentication comes first, for every route (`operators.runtime.api.host`): without valid credentials the
answer is 401 with the same body whatever the path, so an anonymous client learns nothing (not even whether
an environment exists). An authenticated caller lacking RBAC permission gets 403.

The package: `paths` (the prefix, values paths), `bodies` (components and environments in and out),
`handlers` (`ConfigStoreApi` and its routes, declared once), `openapi` (their operations and schemas).
"""

from operators.config.api.handlers import ROUTES as STORE_ROUTES
from operators.config.api.handlers import ConfigApi, ConfigStoreApi
from operators.config.api.paths import PREFIX, ValuesPath, parse_values_path
from operators.runtime import HOST_ROUTES

ROUTES = (*HOST_ROUTES.docs(), *STORE_ROUTES.docs())
"""Every route of the API without other extensions, as its root lists them."""

__all__ = ["PREFIX", "ROUTES", "STORE_ROUTES", "ConfigApi", "ConfigStoreApi", "ValuesPath", "parse_values_path"]
