-- Health of a Stead ServiceOrder (stead.dev/v1alpha1) for Argo CD, read from the standard conditions every Stead kind
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
  hs.message = "Waiting for Stead to reconcile the ServiceOrder"
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


-- a permanent failure (bad input, a failed or aborted run, a rejected instance) waits for a spec change
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled, "Stalled")
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready, "Ready")
  return hs
end

-- not Ready and not Stalled: Stead is working on it, or waiting for something (a run slot, a dependency)
hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling, "Reconciling")
else
  hs.message = said(ready, "Not ready yet")
end
return hs
