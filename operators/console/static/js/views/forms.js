// The form pages: create an object (#/ns/<ns>/new/<plural>[?spec.app=web]), edit one
// (#/ns/<ns>/<plural>/<name>/edit), call an action on one (#/ns/<ns>/<plural>/<name>/do/<action>: run an App's
// action, execute graph types on an Environment, request a ServiceInstance's state). Beside the form, the YAML and
// the kubectl and stead commands equivalent to it, kept in sync as the user types (the server makes them: the same
// code as everything else that writes YAML). Submitting sends the object as the user with dryRun=All first, so what
// is refused is refused by the API server itself (schema, admission webhooks, policies), and shown at its field.

import { h, text, clear } from "../dom.js";
import { get, send } from "../api.js";
import { buildForm } from "../forms.js";

const API = "/console/api/forms";
const enc = encodeURIComponent;
const PREVIEW_DELAY_MS = 150;

// The hash patterns this view serves, with what each names; the router hands over the match.
export const ROUTES = [
  [/^#\/ns\/([^/]+)\/new\/([^/?]+)(?:\?(.*))?$/, (m) => ({ namespace: m[1], plural: m[2], query: m[3] || "" })],
  [/^#\/ns\/([^/]+)\/([^/]+)\/([^/]+)\/edit$/, (m) => ({ namespace: m[1], plural: m[2], name: m[3] })],
  [/^#\/ns\/([^/]+)\/([^/]+)\/([^/]+)\/do\/([^/]+)$/, (m) => ({ namespace: m[1], plural: m[2], name: m[3], action: m[4] })],
];

// The form route a hash names, or null.
export function match(hash) {
  for (const [pattern, named] of ROUTES) {
    const m = pattern.exec(hash);
    if (m) return named(m.map((part) => (part === undefined ? part : decodeURIComponent(part))));
  }
  return null;
}

function formUrl(route) {
  const ns = enc(route.namespace);
  if (route.action) return `${API}/action/${ns}/${enc(route.plural)}/${enc(route.name)}/${enc(route.action)}`;
  if (route.name) return `${API}/edit/${ns}/${enc(route.plural)}/${enc(route.name)}`;
  return `${API}/new/${ns}/${enc(route.plural)}${route.query ? `?${route.query}` : ""}`;
}

function failure(root, error) {
  root.appendChild(h("p", { class: "form-failure", "data-test": "form-failure" },
    text(error && error.message ? error.message : String(error))));
}

// The router's entry points (router.js: page 'form', fn ...): its route objects, whose plural may still carry
// the link's query (`actionruns?spec.app=web`: the router decodes and matches the path only).
export function renderNew(root, route, ctx) {
  const [plural, query] = route.plural.split("?");
  return render(root, { namespace: route.namespace, plural, query: query || route.query || "" }, ctx);
}

export function renderEdit(root, route, ctx) {
  return render(root, { namespace: route.namespace, plural: route.plural, name: route.name }, ctx);
}

export function renderAction(root, route, ctx) {
  return render(root, { namespace: route.namespace, plural: route.plural, name: route.name, action: route.action }, ctx);
}

// Render the form `route` names (an object from `match`, or a hash) into `root`.
export async function render(root, route, ctx = {}) {
  if (typeof route === "string") route = match(route);
  clear(root);
  if (!route) return failure(root, "no such form");
  let form;
  try {
    form = await get(formUrl(route));
  } catch (error) {
    return failure(root, error);
  }
  const built = buildForm(form);
  const yamlText = h("pre", { class: "form-yaml", "data-test": "form-yaml" });
  const kubectlText = h("pre", { class: "form-command", "data-test": "form-kubectl" });
  const steadText = h("pre", { class: "form-command", "data-test": "form-stead" });
  const steadBlock = h("div", { class: "form-stead" }, h("h3", {}, text("stead")), steadText);
  const errors = h("ul", { class: "form-errors", "data-test": "form-errors" });
  const status = h("div", { class: "form-status", "data-test": "form-status", role: "status" });
  const verb = { create: "Create", edit: "Save", patch: "Request" }[form.mode] || "Send";
  const submit = h("button", { type: "submit", class: "form-submit", "data-test": "form-submit" }, text(verb));
  const formEl = h("form", { class: "form", novalidate: "novalidate", "data-test": "form" },
    errors, built.el, h("div", { class: "form-actions" }, submit, status));
  root.appendChild(h("section", { class: "form-page", "data-test": `form-${form.plural}` },
    h("h2", {}, text(form.title)),
    h("p", { class: "form-help" }, text(form.description || "")),
    h("div", { class: "form-columns" }, formEl,
      h("aside", { class: "form-side" },
        h("h3", {}, text("YAML")), yamlText,
        h("h3", {}, text("kubectl")), kubectlText,
        steadBlock))));

  // An edit sends the object its form was opened on: the console then sends it at the object's present version
  // unless someone else changed one of its fields since (the operator's status writes move the version often).
  const body = () => ({ plural: form.plural, mode: form.mode, object: built.value(),
    ...(form.mode === "edit" ? { base: form.object } : {}) });
  let asked = 0;
  let timer = null;
  const refresh = async () => {
    const mine = ++asked;
    try {
      const shown = await send("POST", `${API}/preview/${enc(route.namespace)}`, body());
      if (mine !== asked) return; // an older answer arriving after a newer question
      yamlText.textContent = shown.yaml;
      kubectlText.textContent = shown.kubectl;
      steadText.textContent = shown.stead || "";
      steadBlock.hidden = !shown.stead;
    } catch (error) {
      if (mine === asked) kubectlText.textContent = `(${error.message || error})`;
    }
  };
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, PREVIEW_DELAY_MS);
  };
  formEl.addEventListener("input", schedule);
  formEl.addEventListener("change", schedule);
  await refresh();

  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    built.clearErrors();
    clear(errors);
    clear(status);
    submit.disabled = true;
    status.appendChild(text("Checking with the API server (dry run)…"));
    let answer;
    try {
      answer = await send("POST", `${API}/submit/${enc(route.namespace)}`, body());
    } catch (error) {
      answer = { ok: false, message: error.message || String(error), errors: [{ path: null, message: error.message || String(error) }] };
    } finally {
      submit.disabled = false;
    }
    clear(status);
    if (!answer.ok) {
      const stage = { "dry-run": "Refused by the API server (dry run)", conflict: "Changed since this form was opened" }[
        answer.stage] || "Refused by the API server";
      status.appendChild(text(`${stage}: nothing was ${form.mode === "create" ? "created" : "changed"}.`));
      for (const e of built.showErrors(answer.errors || [])) {
        errors.appendChild(h("li", { "data-test": "form-error" }, text(e.message)));
      }
      return;
    }
    const made = answer.object || {};
    const name = (made.metadata || {}).name || "";
    const plural = answer.plural || form.plural;
    const hash = `#/ns/${enc(route.namespace)}/${enc(plural)}/${enc(name)}`;
    const done = { create: "Created", edit: "Saved", patch: "Requested on" }[form.mode] || "Sent";
    status.appendChild(h("span", { "data-test": "form-done" }, text(`${done} ${form.kind.toLowerCase()}/${name}: `)));
    const link = h("a", { href: hash, "data-test": "form-open" }, text("open it"));
    if (ctx.navigate) link.addEventListener("click", (e) => { e.preventDefault(); ctx.navigate(hash); });
    status.appendChild(link);
  });
}
