-- The actions Argo CD offers on a Stead ServiceInstance, each enabled only where Stead would accept it.
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

-- the states an api_set_state transfer leads to from here (status.waysOut: "state request <target>")
local targets = false
if obj.status ~= nil and obj.status.waysOut ~= nil then
  for _, way in ipairs(obj.status.waysOut) do
    if string.find(way, "^state request ") ~= nil then
      targets = true
    end
  end
end
local reconciling = condition("Reconciling")
actions["request-state"] = {
  ["iconClass"] = "fa fa-fw fa-exchange",
  ["displayName"] = "Request a state",
  ["disabled"] = deleting or not targets or (reconciling ~= nil and reconciling.status == "True"),
  ["params"] = {{["name"] = "target"}, {["name"] = "message"}},
}
return actions
