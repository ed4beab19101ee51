// Drawing helpers shared by the topology part's views (app, environment, deploymentgraph). Layout comes
// from the server (Python): these only turn coordinates into SVG with dom.js's svg(), never markup.
import { h, svg } from "../dom.js";

export const enc = encodeURIComponent;

// The arrowhead markers of a drawing: one per edge class, so that a marked edge's head is marked too.
export function markers(prefix, classes) {
  return svg("defs", {}, ...classes.map((cls) =>
    svg("marker", { id: `${prefix}-${cls}`, viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7",
                    markerHeight: "7", orient: "auto-start-reverse", class: `marker marker-${cls}` },
        svg("path", { d: "M0,0 L10,5 L0,10 z" }))));
}

// A quadratic path through [start, control, end], or a straight one through [start, end].
export function pathOf(points) {
  const [a, b, c] = points;
  return c ? `M${a[0]},${a[1]} Q${b[0]},${b[1]} ${c[0]},${c[1]}` : `M${a[0]},${a[1]} L${b[0]},${b[1]}`;
}

// A box with lines of text in it, and a tooltip (an SVG title: text, never markup).
export function box(x, y, width, height, lines, attrs, tip) {
  const group = svg("g", { transform: `translate(${x},${y})`, ...attrs },
    svg("rect", { width: String(width), height: String(height), rx: "6", ry: "6" }),
    ...lines.map((line, i) => svg("text", { x: "8", y: String(17 + i * 16), class: i ? "sub" : "main" },
                                  String(line))));
  if (tip) group.append(svg("title", {}, tip));
  return group;
}

// An error from the API as a line of text (a 403 says nothing more than that: the user may not see it).
export function failure(error) {
  const status = error && error.status;
  const message = status === 403 ? "You may not see this." : String((error && error.message) || error);
  return h("p", { class: "topo-error", "data-test": "topo-error" }, message);
}
