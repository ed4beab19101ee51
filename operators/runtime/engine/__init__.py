"""The operator's engine: reconcilers that run kinds' pipelines on events, the services steps
use, Events, addons, and the shared supervision of workflow runs."""
