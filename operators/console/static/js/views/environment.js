// An Environment's configuration: its levels (root, roles, nodes) with the layers stored at each, the
// effective values of a resource at a level with the layer each value comes from, and the diff between two
// kept versions of a layer. The diff is computed by the server and shown as text.
import { h, clear } from "../dom.js";
import { enc, failure } from "./topodraw.js";

export async function render(root, obj, ctx) {
  const base = `/console/api/config/${enc(obj.metadata.namespace)}/${enc(obj.metadata.name)}`;
  const section = h("section", { class: "topo config", "data-test": "environment-config" },
                    h("h2", {}, "Configuration"));
  root.append(section);
  let env;
  try {
    env = await ctx.api.get(base);
  } catch (error) {
    section.append(failure(error));
    return;
  }
  const effective = h("div", { class: "config-effective" });
  const history = h("div", { class: "config-history" });
  section.append(levels(env), effectivePanel(env, base, ctx, effective), effective,
                 historyPanel(env, base, ctx, history), history);
}

function option(value, label, selected) {
  const attrs = { value };
  if (selected) attrs.selected = "selected";
  return h("option", attrs, label ?? value);
}

function levels(env) {
  const rows = env.points.map((point) => h("tr", { class: `depth-${point.depth}`, "data-test": "config-level" },
    h("td", { class: "level" }, point.level),
    h("td", {}, point.layers.map((l) => `${l.object} (${l.resource} ${l.kind}` +
      (l.version != null ? `, v${l.version}` : "") + (l.revertTo != null ? `, reverted to v${l.revertTo}` : "") + ")")
      .join("; ") || "-")));
  return h("div", { class: "config-levels" },
    h("h3", {}, `Levels: ${env.hierarchy.join(" > ")}`),
    h("table", { class: "topo-table" }, h("thead", {}, h("tr", {}, h("th", {}, "level"),
      h("th", {}, "layers stored there"))), h("tbody", {}, ...rows)));
}

function effectivePanel(env, base, ctx, out) {
  const resource = h("select", { "data-test": "config-resource" }, ...env.resources.map((r) => option(r)));
  const level = h("select", { "data-test": "config-point" }, ...env.points.map((p) => option(p.level)));
  const show = h("button", { type: "button", "data-test": "config-show" }, "Effective values");
  show.addEventListener("click", async () => {
    clear(out);
    try {
      const view = await ctx.api.get(`${base}/effective?resource=${enc(resource.value)}&level=${enc(level.value)}`);
      out.append(h("p", {}, `${view.resource} at ${view.level}, merged from: ` +
        (view.layers.map((l) => `${l.object} (${l.level} ${l.kind})`).join(", ") || "no layer")));
      out.append(h("table", { class: "topo-table", "data-test": "config-effective" },
        h("thead", {}, h("tr", {}, ...["key", "value", "from level", "kind", "version", "object"]
          .map((t) => h("th", {}, t)))),
        h("tbody", {}, ...view.trace.map((row) => h("tr", { "data-test": "config-trace-row" },
          h("td", {}, row.key), h("td", { class: "value" }, row.value), h("td", {}, row.level ?? ""),
          h("td", {}, row.kind ?? ""), h("td", {}, row.version != null ? String(row.version) : ""),
          h("td", {}, row.object ?? ""))))));
    } catch (error) {
      out.append(failure(error));
    }
  });
  return h("div", { class: "config-controls" }, h("h3", {}, "Effective values"),
           h("label", {}, "resource ", resource), h("label", {}, " at ", level), " ", show);
}

function historyPanel(env, base, ctx, out) {
  const layers = env.points.flatMap((p) => p.layers.map((l) => ({ ...l, level: p.level })));
  const layer = h("select", { "data-test": "config-layer" }, ...layers.map((l, i) =>
    option(String(i), `${l.object}: ${l.resource} ${l.kind} at ${l.level}`)));
  const load = h("button", { type: "button", "data-test": "config-versions" }, "Versions");
  load.addEventListener("click", async () => {
    clear(out);
    const chosen = layers[Number(layer.value)];
    if (!chosen) return;
    const query = `resource=${enc(chosen.resource)}&level=${enc(chosen.level)}&kind=${enc(chosen.kind)}`;
    try {
      const kept = await ctx.api.get(`${base}/history?${query}`);
      const numbers = (kept.versions || []).map((v) => v.version);
      out.append(h("ul", { class: "config-version-list" }, ...(kept.versions || []).map((v) =>
        h("li", { "data-test": "config-version" }, `v${v.version} ${v.createdAt || ""} (${v.source})` +
          (v.version === kept.current ? " in force" : "")))));
      if (numbers.length < 2) {
        out.append(h("p", {}, "Fewer than two versions are kept: nothing to compare."));
        return;
      }
      const from = h("select", { "data-test": "config-from" }, ...numbers.map((n, i) =>
        option(String(n), `v${n}`, i === numbers.length - 2)));
      const to = h("select", { "data-test": "config-to" }, ...numbers.map((n, i) =>
        option(String(n), `v${n}`, i === numbers.length - 1)));
      const text = h("pre", { class: "config-diff", "data-test": "config-diff" });
      const compare = h("button", { type: "button", "data-test": "config-compare" }, "Diff");
      compare.addEventListener("click", async () => {
        text.textContent = "";
        try {
          const diff = await ctx.api.get(`${base}/diff?${query}&from=${enc(from.value)}&to=${enc(to.value)}`);
          text.textContent = diff.text;
        } catch (error) {
          text.textContent = String(error.message || error);
        }
      });
      out.append(h("div", { class: "config-controls" }, h("label", {}, "from ", from), h("label", {}, " to ", to),
                   " ", compare), text);
    } catch (error) {
      out.append(failure(error));
    }
  });
  return h("div", { class: "config-controls" }, h("h3", {}, "Versions of a layer"),
           h("label", {}, "layer ", layer), " ", load);
}

// A change of the Environment (its status, most often) keeps what the user chose and read here: the levels
// and values are asked for again with the buttons, not redrawn under the user's hands.
export function update() {}
