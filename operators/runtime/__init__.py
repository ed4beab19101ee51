"""The operator runtime, in layers (each may use the ones below it, never those above; checked by
import-linter, see pyproject.toml):

- `process`: the operator process (`run_operator`): builds the engine, starts the rest, in order;
- `kopfwiring`: the Kopf adapter, the only module that imports Kopf;
- `engine`: reconcilers, the services steps use, Events, addons, workflow run supervision;
- `secrets` (the vault) and `serving` (the HTTP server of Stead's APIs, TLS, workers, metrics);
- `kube`: the API client, CRDs, admission webhook configurations;
- `core`: kinds, pipelines, conditions, the LMDB store, the ownership ring, the clock.

docs/architecture.md describes each part.
"""
