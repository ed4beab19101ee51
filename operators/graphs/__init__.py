"""Deployment graphs (seed 004): Fuel-style task graphs attached to releases, plugins and environments."""
