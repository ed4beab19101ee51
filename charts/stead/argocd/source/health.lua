-- Health of a Stead {{KIND}} (stead.dev/v1alpha1) for Argo CD, read from the standard conditions every Stead kind
-- carries (Ready, Reconciling, Stalled, each with observedGeneration: the same ones kstatus and Flux read).
-- Generated from charts/stead/argocd/source/health.lua (`make argocd`): edit that file, not this one.
local hs = {}

local function condition(status, kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function said(c, otherwise)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c ~= nil and c.reason ~= nil and c.reason ~= "" then
    return c.reason
  end
  return otherwise
end

local status = obj.status
local generation = obj.metadata.generation
if status == nil or status.conditions == nil or #status.conditions == 0 then
  hs.status = "Progressing"
  hs.message = "Waiting for Stead to reconcile the {{KIND}}"
  return hs
end
-- a status about an older spec says nothing about this one (kstatus: never Current before it is observed)
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for Stead to observe generation " .. tostring(generation)
  if status.observedGeneration ~= nil then
    hs.message = hs.message .. " (status is of generation " .. tostring(status.observedGeneration) .. ")"
  end
  return hs
end

local ready = condition(status, "Ready")
local reconciling = condition(status, "Reconciling")
local stalled = condition(status, "Stalled")

--@kinds ActionRun GraphRun
-- a run asked to abort is on its way out until its state is final
local final = status.state == "Succeeded" or status.state == "Failed" or status.state == "Aborted"
if obj.spec ~= nil and obj.spec.abort == true and not final then
  hs.status = "Progressing"
  hs.message = "Aborting: " .. said(reconciling, "abort requested")
  return hs
end
--@end

-- a permanent failure (bad input, a failed or aborted run, a rejected instance) waits for a spec change
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled, "Stalled")
  return hs
end

if ready ~= nil and ready.status == "True" then
--@kinds App
  -- an action runs on the app: it holds the app's lock until the run ends
  if status.lock ~= nil then
    hs.status = "Progressing"
    hs.message = "Running action " .. tostring(status.currentAction or "?") .. " (ActionRun " ..
      tostring(status.lock.lockedBy) .. ")"
    return hs
  end
  if status.state == "error" then
    hs.status = "Degraded"
    hs.message = "The last action failed"
    if status.failure ~= nil then
      hs.message = hs.message .. ": " .. tostring(status.failure.action) .. " (ActionRun " ..
        tostring(status.failure.run) .. "): " .. tostring(status.failure.reason)
    end
    return hs
  end
  if status.state == "stopped" then
    hs.status = "Suspended"
    hs.message = "Stopped (its stop action succeeded): run its start action to resume it"
    return hs
  end
--@end
  hs.status = "Healthy"
  hs.message = said(ready, "Ready")
--@kinds App ActionRun GraphRun ServiceInstance
  if status.state ~= nil then
    hs.message = tostring(status.state) .. ": " .. hs.message
  end
--@end
  return hs
end

-- not Ready and not Stalled: Stead is working on it, or waiting for something (a run slot, a dependency)
hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling, "Reconciling")
else
  hs.message = said(ready, "Not ready yet")
end
--@kinds ActionRun GraphRun
-- a run says where it is: queued for a run slot (and behind how many), or how far it got
--@end
--@kinds ActionRun
local progress = status.progressText
--@end
--@kinds GraphRun
local progress = status.progress
--@end
--@kinds ActionRun GraphRun
if status.state == "Queued" and status.message ~= nil then
  hs.message = "Queued: " .. string.gsub(status.message, "^queued: ", "")
elseif status.state ~= nil and progress ~= nil then
  hs.message = tostring(status.state) .. " (" .. tostring(progress) .. " done): " .. hs.message
elseif status.state ~= nil then
  hs.message = tostring(status.state) .. ": " .. hs.message
end
--@end
return hs
