-- Ask this ServiceInstance's lifecycle for a state (spec.stateRequest, Inmanta's api_set_state), at the version
-- the instance is at: Stead refuses a request made from a stale version.
-- Generated from charts/stead/argocd/source/actions/request-state.lua (`make argocd`): edit that file, not this one.
local target = actionParams ~= nil and actionParams["target"] or nil
local allowed = {}
if obj.status ~= nil and obj.status.waysOut ~= nil then
  for _, way in ipairs(obj.status.waysOut) do
    local to = string.match(way, "^state request ([^ ]+)")
    if to ~= nil then
      table.insert(allowed, to)
    end
  end
end
local ok = false
for _, to in ipairs(allowed) do
  if to == target then
    ok = true
  end
end
if not ok then
  local here = "none"
  if #allowed > 0 then
    here = table.concat(allowed, ", ")
  end
  local state = obj.status ~= nil and obj.status.state or "?"
  error("parameter target: no state request to " .. tostring(target) .. " from state " .. tostring(state) ..
    " (states requestable here: " .. here .. ")", 0)
end
local request = {["target"] = target, ["currentVersion"] = obj.status.version}
local message = actionParams["message"]
if message ~= nil and message ~= "" then
  request["message"] = message
end
obj.spec.stateRequest = request
return obj
