// The run view shared by ActionRuns and GraphRuns (and so a ServiceInstance's transfers, which are
// ActionRuns): the summary, the per-node timeline, a GraphRun's DAG, and the tree of tasks per replica or
// node with their output. The server shapes and lays out everything (operators/console/views/runs*.py,
// gantt.py); this module only draws, with dom.js's h()/svg()/text() (never HTML from strings: a task's
// output is text, whatever it prints).

import { clear, h, svg, text } from "../dom.js";

const RUNS = "/console/api/runs";

export function formatSeconds(value) {
  if (value === null || value === undefined) return "";
  if (value < 10) return `${value.toFixed(1)}s`;
  const whole = Math.round(value);
  const minutes = Math.floor(whole / 60);
  const rest = whole % 60;
  if (minutes === 0) return `${rest}s`;
  const hours = Math.floor(minutes / 60);
  if (hours) return `${hours}h${String(minutes % 60).padStart(2, "0")}m`;
  return `${minutes}m${String(rest).padStart(2, "0")}s`;
}

function badge(state, test) {
  return h("span", { class: `run-state state-${state}`, "data-test": test }, state);
}

function path(...parts) {
  return parts.map(encodeURIComponent).join("/");
}

// --- the timeline (Gantt) -------------------------------------------------------------------------

const LABEL_WIDTH = 140;
const LANE = 20;

function drawTimeline(box, chart) {
  clear(box);
  box.append(h("h3", {}, "Timeline"));
  if (!chart.rows.length) {
    box.append(h("p", { class: "muted", "data-test": "run-timeline-empty" }, "No task has started yet."));
    return;
  }
  const width = Math.max(520, Math.min(box.clientWidth || 900, 1400));
  const plot = width - LABEL_WIDTH - 12;
  const span = chart.span > 0 ? chart.span : 1;
  const scale = plot / span;
  const height = chart.lanes * LANE + 26;
  const chartSvg = svg("svg", {
    class: "timeline", "data-test": "run-timeline", width, height, viewBox: `0 0 ${width} ${height}`,
    role: "img", "aria-label": "timeline of the run's tasks per node",
  });
  for (let i = 0; i <= 4; i += 1) {
    const x = LABEL_WIDTH + (plot * i) / 4;
    chartSvg.append(svg("line", { class: "tick", x1: x, x2: x, y1: 0, y2: height - 16 }));
    chartSvg.append(svg("text", { class: "tick-label", x, y: height - 4 }, formatSeconds((span * i) / 4)));
  }
  for (const row of chart.rows) {
    const group = svg("g", { class: "timeline-row", "data-test": "timeline-row", "data-row": row.label });
    const top = row.lane * LANE;
    group.append(svg("rect", { class: "row-band", x: 0, y: top, width, height: row.lanes * LANE }));
    group.append(svg("text", { class: "row-label", x: 4, y: top + LANE - 6 }, row.label));
    for (const bar of row.bars) {
      const rect = svg("rect", {
        class: `bar state-${bar.state}`, "data-test": "timeline-bar", "data-task": bar.task,
        x: LABEL_WIDTH + bar.x0 * scale, y: bar.lane * LANE + 3,
        width: Math.max(2, (bar.x1 - bar.x0) * scale), height: LANE - 6,
      });
      rect.append(svg("title", {}, `${bar.task} on ${row.label}: ${bar.state}, ${formatSeconds(bar.x1 - bar.x0)}`));
      group.append(rect);
    }
    chartSvg.append(group);
  }
  box.append(chartSvg);
}

// --- the DAG (GraphRuns) ------------------------------------------------------------------------------

const COLUMN = 190;
const ROW = 34;
const NODE_W = 160;
const NODE_H = 24;

function nodeText(id) {
  return id.length > 24 ? `${id.slice(0, 23)}…` : id;
}

function drawDag(box, layout, states) {
  clear(box);
  box.append(h("h3", {}, "Graph"));
  if (!layout) return;
  if (!layout.available) {
    box.append(h("p", { class: "muted", "data-test": "run-dag-unavailable" }, `Not drawn: ${layout.reason}`));
    return;
  }
  const width = layout.layers * COLUMN + 20;
  const height = Math.max(1, layout.width) * ROW + 20;
  const dagSvg = svg("svg", {
    class: "dag", "data-test": "run-dag", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "the run's tasks and their order",
  });
  const at = new Map(layout.nodes.map((n) => [n.id, { x: 10 + n.layer * COLUMN, y: 10 + n.slot * ROW }]));
  for (const [from, to] of layout.edges) {
    const a = at.get(from);
    const b = at.get(to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x;
    const y2 = b.y + NODE_H / 2;
    const mid = (x1 + x2) / 2;
    dagSvg.append(svg("path", { class: "edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}` }));
  }
  for (const node of layout.nodes) {
    const { x, y } = at.get(node.id);
    const state = states[node.id] || "pending";
    const g = svg("g", { class: `dag-node state-${state}`, "data-test": "dag-node", "data-task": node.id });
    g.append(svg("rect", { x, y, width: NODE_W, height: NODE_H, rx: 4 }));
    g.append(svg("text", { x: x + 6, y: y + 16 }, nodeText(node.id)));
    g.append(svg("title", {}, `${node.id}: ${state}`));
    dagSvg.append(g);
  }
  box.append(dagSvg);
}

// --- output ---------------------------------------------------------------------------------------------

// One output pane per instance, kept across repaints (a stream appends to it), opened by a click.
class Outputs {
  constructor(ctx, run) {
    this.ctx = ctx;
    this.run = run;
    this.panes = new Map();
  }

  pane(task, view) {
    let found = this.panes.get(task.id);
    if (!found) {
      const pre = h("pre", { class: "output", "data-test": `output-${task.id}` });
      const note = h("p", { class: "muted output-note" });
      found = { box: h("div", { class: "output-box" }, note, pre), pre, note, unsubscribe: null, tail: "" };
      this.panes.set(task.id, found);
    }
    found.tail = task.output || "";
    if (view.wholeOutput && task.outputRef) {
      // the whole output from the operator's API, streamed while the task runs (an ActionRun's task gets its
      // outputRef once it is reached: a pane opened before then starts following now)
      if (!found.unsubscribe) this.follow(found, task.outputRef);
    } else {
      // not reached yet, or no output route: the tail the status keeps (refreshed with the status)
      clear(found.pre);
      found.pre.append(text(found.tail));
      const live = task.state === "running" || task.state === "pending";
      found.note.textContent = found.tail
        ? "The last 2 KiB of the output (masked), as the run's status keeps it."
        : live ? "No output yet." : "No output.";
    }
    return found.box;
  }

  follow(found, ref) {
    found.note.textContent = "Output (masked), streamed while the task runs.";
    const { namespace, name } = this.run;
    const topic = ref.plural === "actionruns"
      ? { kind: "output", plural: "actionruns", namespace, run: name, step: ref.step, target: ref.target || null }
      : { kind: "output", namespace, run: name, task: ref.task, node: ref.node || null, type: ref.type || null };
    found.unsubscribe = this.ctx.stream.subscribe(topic, (message) => {
      if (message.type === "data" && message.data && message.data.text) {
        found.pre.append(text(message.data.text));
        found.pre.dataset.offset = message.position;
      } else if (message.type === "end") {
        found.pre.classList.add("done");
        found.note.textContent = found.pre.textContent ? "The whole output (masked)." : "No output.";
      } else if (message.type === "error") {
        const why = message.message || message.status;
        if (!found.pre.textContent && found.tail) {
          // the operator's API cannot be read (no --stead-api, say): the tail the status keeps, as text
          found.pre.append(text(found.tail));
          found.note.textContent = `The last 2 KiB of the output (masked), as the run's status keeps it (the whole output is not shown: ${why}).`;
        } else {
          found.note.textContent = `Output not shown: ${why}`;
        }
      }
    });
  }

  has(id) {
    return this.panes.has(id);
  }

  close(id) {
    const found = this.panes.get(id);
    if (found && found.unsubscribe) found.unsubscribe();
    this.panes.delete(id);
  }

  closeAll() {
    for (const id of [...this.panes.keys()]) this.close(id);
  }
}

// --- the tree ------------------------------------------------------------------------------------------

function taskRow(task, view, outputs, repaint) {
  const cells = [
    h("td", { class: "task-name" }, task.task, task.type ? h("span", { class: "muted" }, ` (${task.type})`) : ""),
    h("td", {}, badge(task.state, `task-state-${task.id}`)),
    h("td", { class: "num" }, String(task.attempts || "")),
    h("td", { class: "num" }, formatSeconds(task.duration)),
    h("td", { class: "num" }, task.exitCode === undefined || task.exitCode === null ? "" : String(task.exitCode)),
    h("td", { class: "reason" }, task.reason || ""),
  ];
  const row = h("tr", { class: `task state-${task.state}`, "data-test": `task-${task.id}`, tabindex: "0" }, ...cells);
  const toggle = () => {
    if (outputs.has(task.id)) outputs.close(task.id);
    else outputs.pane(task, view);
    repaint();
  };
  row.addEventListener("click", toggle);
  row.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      toggle();
    }
  });
  const rows = [row];
  if (outputs.has(task.id)) {
    rows.push(h("tr", { class: "output-row" }, h("td", { colspan: "6" }, outputs.pane(task, view))));
  }
  return rows;
}

function drawTree(box, view, outputs, repaint) {
  clear(box);
  if (!view.groups.length) {
    box.append(h("p", { class: "muted" }, "No tasks yet."));
    return;
  }
  for (const group of view.groups) {
    const body = h("tbody", {});
    for (const task of group.tasks) body.append(...taskRow(task, view, outputs, repaint));
    const head = h("thead", {}, h("tr", {}, ...["task", "state", "attempts", "duration", "exit", "reason"]
      .map((title) => h("th", {}, title))));
    box.append(h("details", { class: "run-group", open: "", "data-test": `group-${group.label}` },
      h("summary", {}, h("span", { class: "group-kind muted" }, `${view.groupKind} `),
        h("strong", {}, group.label), " ", badge(group.state, `group-state-${group.label}`)),
      h("table", { class: "tasks" }, head, body)));
  }
}

function drawSummary(box, view) {
  clear(box);
  const facts = [["state", badge(view.state, "run-state")]];
  if (view.progress) facts.push(["progress", h("span", { "data-test": "run-progress" }, view.progress)]);
  if (view.duration !== null) facts.push(["duration", formatSeconds(view.duration)]);
  if (view.app) facts.push(["app", view.app], ["action", view.action]);
  if (view.environment) facts.push(["environment", view.environment], ["graphs", view.graphTypes.join(", ")]);
  if (view.failedTask) facts.push(["failed task", h("span", { "data-test": "run-failed-task" }, view.failedTask)]);
  if (view.reason) facts.push(["reason", view.reason]);
  box.append(h("dl", { class: "run-facts" }, ...facts.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
}

// --- the view -----------------------------------------------------------------------------------------

// Draw the run view of `obj` (an ActionRun or a GraphRun) into `root`. The first paint comes from one GET
// of the shaped view; `refresh()` (the object page's update() when the run changed) asks for it again.
// Returns {refresh, stop}; stop ends the output streams.
export function renderRun(root, plural, obj, ctx) {
  const run = { namespace: obj.metadata.namespace, name: obj.metadata.name };
  const outputs = new Outputs(ctx, run);
  const summary = h("div", { class: "run-summary", "data-test": "run-summary" });
  const timelineBox = h("section", { class: "run-timeline" });
  const dagBox = plural === "graphruns" ? h("section", { class: "run-dag" }) : null;
  const tree = h("section", { class: "run-tree", "data-test": "run-tree" });
  const problem = h("p", { class: "error", "data-test": "run-error", hidden: true });
  root.append(h("div", { class: "runs", "data-test": "run-view" }, problem, summary, timelineBox,
    dagBox, tree));
  const opened = new Set();
  let current = null;
  let layout = null;
  let asked = 0;
  let stopped = false;

  const repaint = () => {
    if (!current || stopped) return;
    drawSummary(summary, current);
    drawTimeline(timelineBox, current.timeline);
    if (dagBox) drawDag(dagBox, layout, current.taskStates || {});
    drawTree(tree, current, outputs, repaint);
    root.dataset.runState = current.state;
  };
  const paint = (view) => {
    for (const group of view.groups) {
      for (const task of group.tasks) {
        if (task.state === "failure" && !opened.has(task.id)) outputs.pane(task, view); // a failure opens itself
        if (task.state === "failure") opened.add(task.id);
      }
    }
    current = view;
    problem.hidden = true;
    repaint();
    askDag(view);
  };
  const fail = (error) => {
    problem.hidden = false;
    problem.textContent = error && error.message ? error.message : String(error);
  };
  const refresh = () => {
    const mine = ++asked;
    ctx.api.get(`${RUNS}/${path(plural, run.namespace, run.name)}`).then((view) => {
      if (mine === asked && !stopped) paint(view); // an older answer arriving late never paints over a newer one
    }, fail);
  };
  // The DAG is asked for once the run has its tasks (it is planned after it is created), and again only if
  // the tasks it lists change.
  let dagFor = null;
  const askDag = (view) => {
    const tasks = Object.keys(view.taskStates || {}).sort().join(" ");
    if (!dagBox || !tasks || tasks === dagFor) return;
    dagFor = tasks;
    ctx.api.get(`${RUNS}/${path("graphruns", run.namespace, run.name)}/dag`).then((found) => {
      layout = found;
      repaint();
    }, fail);
  };
  refresh();
  const stop = () => {
    stopped = true;
    outputs.closeAll();
  };
  if (ctx.onCleanup) ctx.onCleanup(stop);
  return { refresh, stop };
}

const drawn = new WeakMap();

// The view modules' render/update (views/index.js): one run view per root, asked again on each change.
export function renderFor(plural) {
  const render = (root, obj, ctx) => {
    drawn.set(root, renderRun(root, plural, obj, ctx));
  };
  const update = (root, obj, ctx) => {
    const found = drawn.get(root);
    if (found) found.refresh();
    else render(root, obj, ctx);
  };
  return { render, update };
}

// A ServiceInstance's lifecycle transfers that ran an action (its App's ActionRuns), newest first, each
// linking to its run view: for the lifecycle view to place where it wants.
export function renderTransfers(root, instance, ctx) {
  const box = h("section", { class: "run-transfers", "data-test": "run-transfers" }, h("h3", {}, "Transfer runs"));
  root.append(box);
  const { namespace, name } = instance.metadata;
  ctx.api.get(`${RUNS}/${path("serviceinstances", namespace, name)}`).then((runs) => {
    if (!runs.length) {
      box.append(h("p", { class: "muted" }, "No action has run for this instance."));
      return;
    }
    const rows = runs.map((r) => {
      const href = `#/ns/${path(namespace, "actionruns", r.name)}`;
      const link = h("a", { href, "data-test": `transfer-${r.name}` }, r.name);
      return h("tr", {}, h("td", {}, link), h("td", {}, r.action || ""),
        h("td", {}, badge(r.state, `transfer-state-${r.name}`)), h("td", {}, r.started || ""),
        h("td", {}, r.failedTask || ""));
    });
    box.append(h("table", { class: "tasks" }, h("thead", {}, h("tr", {},
      ...["run", "action", "state", "started", "failed task"].map((t) => h("th", {}, t)))), h("tbody", {}, ...rows)));
  }, () => box.append(h("p", { class: "muted" }, "Not shown.")));
}
