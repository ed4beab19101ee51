"""The operator runtime: object pipelines, the local LMDB store, the ownership ring, kube access.

The core modules here are pure or I/O-only and know nothing of Kopf; only `operators.runtime.kopfwiring`
and `operators.runtime.admission` translate between Kopf and them.
"""
