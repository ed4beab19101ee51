// A GraphRun's page: the run view (runtree.js) per node, with its DAG and timeline, and each instance's
// whole output streamed from the operator's API while it runs.

import { renderFor } from "./runtree.js";

export const { render, update } = renderFor("graphruns");
