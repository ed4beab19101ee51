-- Abort this GraphRun: Stead stops its running tasks and starts nothing more (spec.abort, the only field of a run
-- that may change once it is created).
-- Generated from charts/stead/argocd/source/actions/abort.lua (`make argocd`): edit that file, not this one.
obj.spec.abort = true
return obj
