// An App's topology: its deployments (lanes), substrates, packages and services, and the dependencies
// between them; implicit (macro) edges are dashed, coloured and labelled apart from the declared ones.
import { h, svg } from "../dom.js";
import { enc, markers, pathOf, box, failure } from "./topodraw.js";

const TYPES = ["inherent", "explicit", "implicit"];
const LEGEND = {
  inherent: "inherent: placed on the same deployment",
  explicit: "explicit: dependsOn",
  implicit: "implicit (macro): a task reads an attribute another entity's task sets",
};

export async function render(root, obj, ctx) {
  const section = h("section", { class: "topo", "data-test": "app-topology" }, h("h2", {}, "Topology"));
  root.append(section);
  let topo;
  try {
    topo = await ctx.api.get(`/console/api/app-topology/${enc(obj.metadata.namespace)}/${enc(obj.metadata.name)}`);
  } catch (error) {
    section.append(failure(error));
    return;
  }
  draw(section, topo);
}

function draw(section, topo) {
  const origin = topo.source === "snapshot" ? `the snapshot of blueprint ${topo.blueprint} the App runs`
    : topo.source === "blueprint" ? `blueprint ${topo.blueprint} (the App has no snapshot yet)` : "nothing";
  section.append(h("p", { class: "topo-source" }, `From ${origin}. A -> B: A depends on B.`));
  for (const error of topo.errors || []) section.append(h("p", { class: "topo-error" }, error));
  if (!topo.nodes.length) return;
  const picture = svg("svg", { class: "topo-drawing", "data-test": "topology-svg", width: String(topo.width),
                               height: String(topo.height), viewBox: `0 0 ${topo.width} ${topo.height}` },
                      markers("app", TYPES));
  for (const lane of topo.lanes) {
    picture.append(svg("rect", { class: "lane", x: String(lane.x), y: String(lane.y), width: String(lane.width),
                                 height: String(lane.height), rx: "8" }));
  }
  for (const node of topo.nodes) {
    const lines = [node.name, node.kind + (node.kind === "Deployment" && node.replicas != null
      ? ` x${node.replicas}` : "")];
    picture.append(box(node.x, node.y, topo.nodeWidth, topo.nodeHeight, lines,
      { class: `node kind-${node.kind.toLowerCase()}`, "data-test": `node-${node.id}` },
      `${node.kind} ${node.name}` + (node.deployment ? ` (deployment ${node.deployment})` : "")));
  }
  for (const edge of topo.edges) {
    const path = svg("path", { d: pathOf(edge.points), class: `edge edge-${edge.type}` + (edge.macro ? " macro" : ""),
                               "marker-end": `url(#app-${edge.type})`, "data-test": `edge-${edge.type}`,
                               "data-from": edge.from, "data-to": edge.to },
                     svg("title", {}, `${edge.from} -> ${edge.to} (${edge.type}): ${edge.why}`));
    picture.append(path);
    if (edge.macro) {
      const [, c] = edge.points;
      picture.append(svg("text", { x: String(c[0]), y: String(c[1] - 4), class: "macro-label",
                                   "data-test": "macro-label" }, "@@{ }@@"));
    }
  }
  section.append(h("div", { class: "topo-scroll" }, picture));
  section.append(h("ul", { class: "topo-legend" }, ...TYPES.map((type) =>
    h("li", { class: `legend-${type}` }, LEGEND[type]))));
  const rows = topo.edges.map((edge) => h("tr", { class: `edge-row edge-${edge.type}`, "data-test": "edge-row" },
    h("td", {}, edge.from), h("td", {}, edge.to), h("td", {}, edge.macro ? "implicit (macro)" : edge.type),
    h("td", {}, edge.why)));
  section.append(h("table", { class: "topo-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "entity"), h("th", {}, "depends on"), h("th", {}, "type"),
                     h("th", {}, "why"))), h("tbody", {}, ...rows)));
}
