// A GraphRun's page: the run view (runtree.js) per node, with its DAG and timeline, and each instance's
// whole output streamed from the operator's API while it runs.

import { renderRun } from "./runtree.js";

export function render(root, obj, ctx) {
  return renderRun(root, "graphruns", obj, ctx);
}
