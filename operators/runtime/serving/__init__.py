"""Serving: the HTTP server of Stead's APIs (granian), TLS and certificates, worker processes,
the event loop, and metrics with the health endpoints."""
