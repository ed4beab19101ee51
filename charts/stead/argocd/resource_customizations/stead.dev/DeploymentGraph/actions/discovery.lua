-- The actions Argo CD offers on a Stead DeploymentGraph, each enabled only where Stead would accept it.
-- Generated from charts/stead/argocd/source/discovery.lua (`make argocd`): edit that file, not this one.
local actions = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function ready_now()
  local ready = condition("Ready")
  return ready ~= nil and ready.status == "True" and obj.status.observedGeneration == obj.metadata.generation
end

local deleting = obj.metadata.deletionTimestamp ~= nil

-- a release's or a plugin's graph runs on an environment the user names; an environment's graph on its own
local execute = {
  ["iconClass"] = "fa fa-fw fa-play",
  ["displayName"] = "Execute this graph type",
  ["disabled"] = deleting or not ready_now(),
}
if obj.spec.environment == nil then
  execute["params"] = {{["name"] = "environment"}}
end
actions["execute"] = execute
return actions
