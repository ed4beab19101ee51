-- The actions Argo CD offers on a Stead {{KIND}}, each enabled only where Stead would accept it.
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

--@kinds App
-- an App runs one action at a time: a run on a locked app is refused
actions["run-action"] = {
  ["iconClass"] = "fa fa-fw fa-play",
  ["displayName"] = "Run an action",
  ["disabled"] = deleting or not ready_now() or obj.status.lock ~= nil,
  ["params"] = {{["name"] = "action"}},
}
--@end
--@kinds ActionRun GraphRun
local state = obj.status ~= nil and obj.status.state or nil
local final = state == "Succeeded" or state == "Failed" or state == "Aborted"
actions["abort"] = {
  ["iconClass"] = "fa fa-fw fa-stop-circle",
  ["displayName"] = "Abort the run",
  ["disabled"] = final or (obj.spec.abort == true),
}
--@end
--@kinds ServiceInstance
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
--@end
--@kinds DeploymentGraph
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
--@end
return actions
