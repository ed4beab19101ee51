"""The Calm domain (docs/calm.md): blueprints, their compiler, macros, apps and action runs."""
