// An ActionRun's page: the run view (runtree.js) per replica, and each task instance's whole output streamed
// from the operator's API while it runs (GET /api/v1/actionruns/<run>/output/<step>/), readable whole after.

import { renderFor } from "./runtree.js";

export const { render, update } = renderFor("actionruns");
