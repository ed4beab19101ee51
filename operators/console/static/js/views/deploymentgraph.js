// A DeploymentGraph type's dry plan over chosen nodes, before any run: the operator's planner plans it from
// what the user may read, nothing is created. Each chosen node is a lane; a dependency on a task of a node
// left out is drawn to a dashed ghost box in that node's lane (it counts as done, it is not waited for).
import { h, svg, clear } from "../dom.js";
import { enc, markers, pathOf, box, failure } from "./topodraw.js";

export async function render(root, obj, ctx) {
  const base = `/console/api/plan/${enc(obj.metadata.namespace)}/${enc(obj.metadata.name)}`;
  const section = h("section", { class: "topo plan", "data-test": "dry-plan" }, h("h2", {}, "Dry plan"));
  root.append(section);
  let choices;
  try {
    choices = await ctx.api.get(base);
  } catch (error) {
    section.append(failure(error));
    return;
  }
  if (!choices.environments.length) {
    section.append(h("p", {}, "No environment of this namespace takes this graph (its release, plugin or own)."));
    return;
  }
  const out = h("div", { class: "plan-out" });
  const environment = h("select", { "data-test": "plan-environment" },
                        ...choices.environments.map((e) => h("option", { value: e.name }, e.name)));
  const nodes = h("span", { class: "plan-nodes" });
  const showNodes = () => {
    clear(nodes);
    const env = choices.environments.find((e) => e.name === environment.value);
    for (const node of env ? env.nodes : []) {
      nodes.append(h("label", { class: "plan-node" },
        h("input", { type: "checkbox", value: node.name, checked: "checked", "data-test": `plan-node-${node.name}` }),
        ` ${node.name} (${node.roles.join(", ")})`));
    }
  };
  environment.addEventListener("change", showNodes);
  showNodes();
  const plan = h("button", { type: "button", "data-test": "plan-run" }, "Plan");
  plan.addEventListener("click", async () => {
    clear(out);
    const chosen = [...nodes.querySelectorAll("input:checked")].map((input) => input.value);
    out.append(h("p", { class: "plan-wait" }, "Planning..."));
    try {
      const view = await ctx.api.get(`${base}/dry?environment=${enc(environment.value)}&nodes=${enc(chosen.join(","))}`);
      clear(out);
      draw(out, view);
    } catch (error) {
      clear(out);
      out.append(failure(error));
    }
  });
  section.append(h("p", {}, `Graph type ${choices.type}: the plan a run would follow on the chosen nodes. ` +
                            "Nothing runs and nothing is created."),
                 h("div", { class: "config-controls" }, h("label", {}, "environment ", environment), " ", nodes,
                   " ", plan), out);
}

function draw(out, view) {
  const s = view.summary;
  out.append(h("p", { class: "plan-summary", "data-test": "plan-summary" },
    `${s.instances} task instances: ${s.planned} planned, ${s.skipped} skipped, ${s.noop} noop; ${s.edges} ` +
    `dependencies, ${s.outsideSubset} on nodes outside the chosen ones (counted as done, not waited for). ` +
    "The last run's data is the operator's: changed() counts every value as changed here."));
  if (!view.drawn) {
    out.append(h("p", {}, `${view.steps} steps: too many to draw.`));
  } else {
    const picture = svg("svg", { class: "topo-drawing", "data-test": "plan-svg", width: String(view.width),
                                 height: String(view.height), viewBox: `0 0 ${view.width} ${view.height}` },
                        markers("plan", ["inside", "outside"]));
    for (const lane of view.lanes) {
      picture.append(svg("rect", { class: "lane" + (lane.outside ? " outside" : ""), x: "8", y: String(lane.y),
                                   width: String(view.width - 16), height: String(lane.height), rx: "8" }),
                     svg("text", { class: "lane-label", x: "16", y: String(lane.y + 26) }, lane.node));
      if (lane.outside) {
        picture.append(svg("text", { class: "lane-note", x: "16", y: String(lane.y + 42) }, "not chosen"));
      }
    }
    for (const b of view.boxes) {
      picture.append(box(b.x, b.y, view.boxWidth, view.boxHeight, [b.task, b.state],
        { class: `step state-${b.state}` + (b.outside ? " outside" : ""),
          "data-test": b.outside ? "plan-box-outside" : `plan-box-${b.state}` },
        `${b.task}${b.node ? " on " + b.node : ""}: ${b.state}` + (b.reason ? ` (${b.reason})` : "")));
    }
    for (const e of view.edges) {
      const kind = e.outside ? "outside" : "inside";
      picture.append(svg("path", { d: pathOf(e.points), class: `edge edge-${kind}`, "marker-end": `url(#plan-${kind})`,
                                   "data-test": `plan-edge-${kind}`, "data-from": e.from, "data-to": e.to },
                         svg("title", {}, `${e.from} waits for ${e.to}` +
                             (e.outside ? ` (${e.rule}: outside the chosen nodes)` : ""))));
    }
    out.append(h("div", { class: "topo-scroll" }, picture));
  }
  if (view.outsideEdges.length) {
    out.append(h("h3", {}, "Dependencies on nodes outside the chosen ones"),
      h("ul", { class: "plan-outside", "data-test": "plan-outside-list" }, ...view.outsideEdges.map((e) =>
        h("li", {}, `${e.dependent} -> ${e.dependency} (${e.type})`))));
  }
}

// A change of the graph keeps the plan on the page: the user plans again with the button.
export function update() {}
