"""The life of one object, without Kubernetes: kinds and their models, pipelines of steps and
their phases, conditions, the local LMDB store, the ownership ring, the clock."""
