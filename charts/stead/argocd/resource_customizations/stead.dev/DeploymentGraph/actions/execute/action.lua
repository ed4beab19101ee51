-- Execute this DeploymentGraph's type: create a GraphRun of it, as `stead graph execute` does (Argo CD's "create"
-- operation), on the graph's environment or, for a release's or a plugin's graph, on the one named.
-- Generated from charts/stead/argocd/source/actions/execute.lua (`make argocd`): edit that file, not this one.
local os = require("os")

local environment = obj.spec.environment
if environment == nil then
  environment = actionParams ~= nil and actionParams["environment"] or nil
end
if environment == nil or environment == "" then
  error("parameter environment: the Environment (same namespace) to run this release's or plugin's graph on", 0)
end
local graphType = obj.spec.type or "default"
local stem = string.lower(environment .. "-" .. graphType)
stem = string.gsub(stem, "[^a-z0-9.-]", "-")
local stamp = os.date("!%Y%m%d%H%M%S")
local run = {
  ["apiVersion"] = "stead.dev/v1alpha1",
  ["kind"] = "GraphRun",
  ["metadata"] = {
    ["name"] = string.sub(stem, 1, 40) .. "-" .. stamp,
    ["namespace"] = obj.metadata.namespace,
  },
  ["spec"] = {["environment"] = environment, ["graphs"] = {{["type"] = graphType}}},
}
return {{["operation"] = "create", ["resource"] = run}}
