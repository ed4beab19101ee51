// A ServiceInstance's lifecycle (issue 29): the state diagram with the current state lit and the path taken,
// the actions the lifecycle allows now (update, set-state, delete), and the candidate/active/rollback diff.
//
// Everything is shaped by the server (operators/console/views/lifecycle_view.py): the layout comes as
// coordinates and SVG path data, the actions as the list allowed now, values as text. This module only draws,
// with h()/svg() (textContent and setAttribute: an attribute value can never run script), and re-reads the
// page when the instance changes (the object page follows it on the page's one stream and calls update()).

import { clear, h, svg } from "../dom.js";
import { renderTransfers } from "./runtree.js";

const NONE = "\u2014";
const VIEWS = new WeakMap();  // root -> {load, seen}: the view drawn in it

// children without the absent ones (null, undefined, false): h() gets only nodes and strings
function some(...children) {
  return children.filter((c) => c !== null && c !== undefined && c !== false);
}

function base(obj) {
  const ns = encodeURIComponent(obj.metadata.namespace);
  const name = encodeURIComponent(obj.metadata.name);
  return `/console/api/lifecycle/${ns}/${name}`;
}

function versions(list) {
  return list.length ? list.map((v) => `v${v}`).join(" ") : "";
}

function drawDiagram(page) {
  const d = page.diagram;
  const [x, y, width, height] = d.box;
  const lit = page.state;
  const offered = new Set(page.actions.map((a) => `${lit}->${a.target}`));
  const edges = d.edges.map((e) => {
    const classes = ["lc-edge"];
    if (e.error) classes.push("error");
    if (e.versions.length) classes.push("taken");
    if (e.source === lit && offered.has(e.id)) classes.push("offered");
    const label = e.versions.length ? `${e.label} (${versions(e.versions)})` : e.label;
    return svg("g", { class: classes.join(" "), "data-test": `edge-${e.source}-${e.target}` },
      svg("title", {}, e.parts.map((p) => p.description || p.text).join("; ")),
      svg("path", { d: e.path, "marker-end": e.error ? "url(#lc-arrow-error)" : "url(#lc-arrow)" }),
      svg("text", { x: e.label_x, y: e.label_y, class: e.source === e.target ? "lc-label loop" : "lc-label" },
        label));
  });
  const nodes = d.nodes.map((n) => {
    const classes = ["lc-state"];
    if (n.lit) classes.push("lit");
    if (n.versions.length) classes.push("visited");
    if (n.deleted) classes.push("deleted");
    if (n.initial) classes.push("initial");
    if (n.label) classes.push(`label-${n.label}`);
    const g = svg("g", { class: classes.join(" "), "data-test": `state-${n.name}` },
      svg("title", {}, n.description || n.name),
      svg("rect", { x: n.x - n.width / 2, y: n.y - n.height / 2, width: n.width, height: n.height, rx: 8 }),
      svg("text", { x: n.x, y: n.y + 4, class: "lc-name" }, n.name));
    if (n.versions.length) {
      g.appendChild(svg("text", { x: n.x, y: n.y + n.height / 2 + 13, class: "lc-versions" }, versions(n.versions)));
    }
    return g;
  });
  const marker = (id) => svg("marker", { id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 9,
    markerHeight: 9, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, svg("path", { d: "M0 0L10 5L0 10z" }));
  return svg("svg", { class: "lc-diagram", "data-test": "lifecycle-diagram", viewBox: `${x} ${y} ${width} ${height}`,
    width, height, role: "img", "aria-label": `lifecycle, current state ${lit || "none"}` },
    svg("defs", {}, marker("lc-arrow"), marker("lc-arrow-error")),
    svg("g", { class: "lc-edges" }, ...edges),
    svg("g", { class: "lc-states" }, ...nodes));
}

function drawPath(page) {
  const steps = page.diagram ? page.diagram.path : [];
  const items = steps.slice().reverse().map((s) => {
    const what = s.operation ? `${s.trigger}, ${s.operation}` : s.trigger;
    return h("li", { class: s.error ? "error" : "", "data-test": `step-v${s.version}` }, ...some(
      h("span", { class: "lc-version" }, `v${s.version}`), " ",
      `${s.source ?? "(new)"} \u2192 ${s.target}`, " ",
      h("span", { class: "lc-trigger" }, `(${what})`), " ",
      h("time", {}, s.time),
      s.message ? h("div", { class: "lc-message" }, s.message) : null));
  });
  const note = page.diagram && !page.diagram.path_complete && steps.length
    ? h("p", { class: "lc-note" }, "Older transfers are no longer kept in the instance's status.") : null;
  return h("section", { class: "lc-path" }, ...some(h("h3", {}, "Path taken (newest first)"), note,
    h("ol", { "data-test": "path" }, ...items)));
}

function cell(value, present, change) {
  if (!present) return h("td", { class: "absent" }, NONE);
  if (value === null) return h("td", { class: "missing" }, "");
  return h("td", { class: change && change !== "same" ? change : "" }, value);
}

function drawDiff(page) {
  const diff = page.diff;
  const head = ["candidate", "active", "rollback"].map((s) => h("th", {}, diff.present[s] ? s : `${s} (none)`));
  const rows = diff.rows.map((r) => h("tr", { "data-test": `diff-${r.key}` },
    h("th", { scope: "row" }, r.key),
    cell(r.candidate, diff.present.candidate, r.candidate_vs_active),
    cell(r.active, diff.present.active, null),
    cell(r.rollback, diff.present.rollback, r.active_vs_rollback)));
  return h("section", { class: "lc-diff" }, h("h3", {}, "Attribute sets"),
    h("table", { "data-test": "attribute-diff" },
      h("thead", {}, h("tr", {}, h("th", {}, "attribute"), ...head)),
      h("tbody", {}, ...rows)),
    h("p", { class: "lc-note" }, "Marked: what the candidate set changes in the active one, and what the "
      + "active set changed from the rollback one."));
}

// the update form; `drafts` keeps what the user typed across redraws (the instance's status changes under it)
function updateForm(page, act, drafts) {
  const inputs = page.fields.map((f) => {
    const input = f.type === "dict" || f.type === "list"
      ? h("textarea", { name: f.name, rows: 3, "data-test": `field-${f.name}` })
      : h("input", { name: f.name, type: "text", "data-test": `field-${f.name}` });
    input.value = f.name in drafts ? drafts[f.name] : f.value;
    input.addEventListener("input", () => { drafts[f.name] = input.value; });
    return h("label", { class: "lc-field" }, ...some(
      h("span", {}, `${f.name} (${f.type}${f.optional ? ", optional" : ""})`),
      input, f.description ? h("small", {}, f.description) : null));
  });
  const form = h("form", { class: "lc-update", "data-test": "update-form" }, ...inputs,
    h("button", { type: "submit", "data-test": "update-submit" }, "Send update"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const attributes = {};
    for (const f of page.fields) {
      const value = form.elements.namedItem(f.name).value;
      if (value !== f.value) attributes[f.name] = value;
    }
    act("update", { attributes });
  });
  return form;
}

function drawActions(page, act, ui) {
  const out = h("section", { class: "lc-actions", "data-test": "actions" }, h("h3", {}, "Actions allowed now"));
  if (page.busy) out.appendChild(h("p", { class: "lc-busy", "data-test": "busy" }, `Waiting: ${page.busy}.`));
  if (!page.actions.length && !page.busy) out.appendChild(h("p", { class: "lc-note" }, "None in this state."));
  const buttons = h("div", { class: "lc-buttons" });
  const offersUpdate = page.actions.some((a) => a.kind === "update");
  if (!offersUpdate) { ui.editing = false; ui.drafts = {}; }
  for (const a of page.actions) {
    const title = [a.description, a.operation ? `[${a.operation}]` : "", a.validate ? "validated" : ""]
      .filter(Boolean).join(" ");
    if (a.kind === "update") {
      const button = h("button", { type: "button", "data-test": a.test, title }, "Update attributes\u2026");
      button.addEventListener("click", () => {
        if (!ui.editing) { ui.editing = true; out.appendChild(updateForm(page, act, ui.drafts)); }
      });
      buttons.appendChild(button);
    } else if (a.kind === "set-state") {
      const button = h("button", { type: "button", "data-test": a.test, title }, `Set state \u2192 ${a.target}`);
      button.addEventListener("click", () => act("state", { target: a.target }));
      buttons.appendChild(button);
    } else {
      const button = h("button", { type: "button", class: "danger", "data-test": a.test, title }, "Delete");
      button.addEventListener("click", () => {
        if (button.dataset.armed) { act("delete", {}); return; }
        button.dataset.armed = "1";
        button.textContent = "Confirm delete";
      });
      buttons.appendChild(button);
    }
  }
  out.appendChild(buttons);
  if (ui.editing && offersUpdate) out.appendChild(updateForm(page, act, ui.drafts));
  return out;
}

export function render(root, obj, ctx) {
  const url = base(obj);
  const box = h("div", { class: "lifecycle", "data-test": "lifecycle" });
  root.appendChild(box);
  let page = null;
  let error = null;
  let loading = false;
  let again = false;
  const ui = { editing: false, drafts: {} };
  let shown = null;

  function draw() {
    const before = box.querySelector(".lc-picture");
    const scrolled = before ? [before.scrollLeft, before.scrollTop] : [0, 0];
    clear(box);
    if (!page) return;
    const status = h("p", { class: "lc-status" },
      "State ", h("strong", { "data-test": "current-state" }, page.state ?? "(not taken in yet)"),
      page.version ? ` at version ${page.version}` : "");
    box.appendChild(status);
    if (error) box.appendChild(h("p", { class: "lc-error", role: "alert", "data-test": "lifecycle-error" }, error));
    if (page.refused) {
      box.appendChild(h("p", { class: "lc-error", "data-test": "refused" },
        `Refused (${page.refused.reason}): ${page.refused.message}`));
    }
    if (page.validation_problems.length) {
      box.appendChild(h("ul", { class: "lc-error", "data-test": "validation-problems" },
        ...page.validation_problems.map((p) => h("li", {}, p))));
    }
    if (page.lifecycle_problem) box.appendChild(h("p", { class: "lc-note" }, page.lifecycle_problem));
    for (const note of page.diagram ? page.diagram.notes : []) box.appendChild(h("p", { class: "lc-note" }, note));
    const side = h("div", { class: "lc-side" }, drawActions(page, act, ui), drawDiff(page), drawPath(page));
    const picture = h("div", { class: "lc-picture" }, ...some(page.diagram ? drawDiagram(page) : null));
    box.appendChild(h("div", { class: "lc-columns" }, picture, side));
    if (page.diagram && page.state !== shown) {
      // bring the lit state into the diagram's scrolled view when it changes (a long lifecycle is taller than it)
      shown = page.state;
      const node = page.diagram.nodes.find((n) => n.lit);
      if (node) picture.scrollTop = Math.max(0, node.y - page.diagram.box[1] - picture.clientHeight / 2);
    } else {
      [picture.scrollLeft, picture.scrollTop] = scrolled;  // a redraw keeps where the user scrolled to
    }
  }

  async function load() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      page = await ctx.api.get(url);
    } catch (failure) {
      error = failure.message || String(failure);
    } finally {
      loading = false;
    }
    draw();
    if (again) { again = false; load(); }
  }

  async function act(action, body) {
    error = null;
    try {
      page = await ctx.api.send("POST", `${url}/${action}`, { ...body, currentVersion: page.version });
      if (action === "update") { ui.editing = false; ui.drafts = {}; }
    } catch (failure) {
      error = failure.status ? `${failure.status}: ${failure.message}` : String(failure);
    }
    draw();
  }

  const transfers = h("div", { class: "lc-transfers" });
  root.appendChild(transfers);
  const runs = () => renderTransfers(clear(transfers), obj, ctx);  // the transfers that ran an action
  VIEWS.set(root, { load, runs, seen: obj.metadata.resourceVersion });
  load();
  runs();
}

// The object page follows the instance on the page's stream and calls this with each new version of it: the
// view reads its page again, keeping the open update form and what the user typed in it.
export function update(root, obj, ctx) {
  const view = VIEWS.get(root);
  if (!view) { render(root, obj, ctx); return; }
  if (obj.metadata.resourceVersion === view.seen) return;
  view.seen = obj.metadata.resourceVersion;
  view.load();
  view.runs();
}
