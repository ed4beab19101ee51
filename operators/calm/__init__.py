"""The Calm domain (seed 000): blueprints, their compiler, macros, apps and action runs."""
