"""Kubernetes access: the API client, CRDs made from the kinds (and installed), admission
webhook configurations."""
