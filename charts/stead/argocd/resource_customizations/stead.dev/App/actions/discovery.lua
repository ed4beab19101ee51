-- The actions Argo CD offers on a Stead App, each enabled only where Stead would accept it.
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

-- an App runs one action at a time: a run on a locked app is refused
actions["run-action"] = {
  ["iconClass"] = "fa fa-fw fa-play",
  ["displayName"] = "Run an action",
  ["disabled"] = deleting or not ready_now() or obj.status.lock ~= nil,
  ["params"] = {{["name"] = "action"}},
}
return actions
