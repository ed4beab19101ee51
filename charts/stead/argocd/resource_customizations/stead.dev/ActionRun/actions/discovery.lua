-- The actions Argo CD offers on a Stead ActionRun, each enabled only where Stead would accept it.
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

local state = obj.status ~= nil and obj.status.state or nil
local final = state == "Succeeded" or state == "Failed" or state == "Aborted"
actions["abort"] = {
  ["iconClass"] = "fa fa-fw fa-stop-circle",
  ["displayName"] = "Abort the run",
  ["disabled"] = final or (obj.spec.abort == true),
}
return actions
