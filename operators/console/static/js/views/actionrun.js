// An ActionRun's page: the run view (runtree.js) per replica, its output the tail the status keeps.

import { renderRun } from "./runtree.js";

export function render(root, obj, ctx) {
  return renderRun(root, "actionruns", obj, ctx);
}
