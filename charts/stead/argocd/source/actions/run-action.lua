-- Run an action of this App: create an ActionRun for it, as `stead app run` does (Argo CD's "create" operation).
-- Generated from charts/stead/argocd/source/actions/run-action.lua (`make argocd`): edit that file, not this one.
local os = require("os")

local action = actionParams ~= nil and actionParams["action"] or nil
if action == nil or action == "" then
  error("parameter action: the action to run (create, start, stop, restart, delete, or one of the blueprint's)", 0)
end

-- a name of its own per run: <app>-<action>-<UTC time>, lower case, short enough for any name Stead makes of it
local stem = string.lower(obj.metadata.name .. "-" .. action)
stem = string.gsub(stem, "[^a-z0-9.-]", "-")
local stamp = os.date("!%Y%m%d%H%M%S")
local run = {
  ["apiVersion"] = "stead.dev/v1alpha1",
  ["kind"] = "ActionRun",
  ["metadata"] = {
    ["name"] = string.sub(stem, 1, 40) .. "-" .. stamp,
    ["namespace"] = obj.metadata.namespace,
    ["labels"] = {["stead.dev/app"] = obj.metadata.name},
  },
  ["spec"] = {["app"] = obj.metadata.name, ["action"] = action},
}
return {{["operation"] = "create", ["resource"] = run}}
