// An ActionRun's page: the run view (runtree.js) per replica, its output the tail the status keeps.

import { renderFor } from "./runtree.js";

export const { render, update } = renderFor("actionruns");
