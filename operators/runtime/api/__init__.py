"""The HTTP API platform: one TLS server (`server.ApiServer`, an addon of the operator process, or N worker
processes, `worker`) serving every domain's routes behind one authentication (`auth`: Kubernetes tokens,
client certificates, Basic).

A domain ships its API as an extension (`extension.ApiExtension`, built by a factory the catalog lists:
`operators.catalog.API_EXTENSIONS`) whose routes are declared once (`routes.Route`): the matching, the root's
route list and the OpenAPI document all derive from that declaration (`host.ApiHost`). Handlers work with
`calls` (the call, its query and JSON body, errors as JSON answers).
"""
