// Forms generated from a kind's schema: the openAPIV3Schema of its CRD (from the Pydantic models), as the console
// serves it (/console/api/forms/...). Nested objects, arrays, maps (additionalProperties), enums, required fields,
// defaults (shown, never sent) and descriptions (help text). Nothing here validates: the API server does, and
// `showErrors` puts what it said next to the field it names. Every element is made with `h` (textContent and
// setAttribute only): never innerHTML.
//
// A field's path is kubectl's notation, the one the API server's messages use: `spec.graphs[0].type` for an
// array item's property, `spec.inputs[size]` for a map's entry.

import { h, text } from "./dom.js";

let serial = 0;

function label(name, required) {
  return h("span", { class: "form-label" }, text(name), ...(required ? [h("span", { class: "form-required", title: "required" }, text(" *"))] : []));
}

function help(schema) {
  const parts = [];
  if (schema.description) parts.push(schema.description);
  if (schema.default !== undefined && typeof schema.default !== "object") parts.push(`Default: ${schema.default}.`);
  return parts.length ? [h("div", { class: "form-help" }, text(parts.join(" ")))] : [];
}

function wrapper(path, ...children) {
  return h("div", { class: "form-field", "data-path": path, "data-test": `field-${path}` }, ...children,
    h("div", { class: "form-error", "data-test": `error-${path}` }));
}

function isFreeForm(schema) {
  return schema["x-kubernetes-preserve-unknown-fields"] && !schema.properties && !schema.additionalProperties;
}

function kindOf(schema) {
  if (schema.enum) return "enum";
  if (isFreeForm(schema)) return "json";
  if (schema.type === "object" && schema.additionalProperties && !schema.properties) return "map";
  if (schema.type === "object" || schema.properties) return "object";
  return schema.type || "json";
}

// One field of `schema` at `path`, holding `value`: {el, get()} where get() is the value as typed (null when empty;
// the server prunes what is empty).
export function field(schema, path, value, name, required, opts) {
  switch (kindOf(schema)) {
    case "object": return objectField(schema, path, value, name, required, opts);
    case "array": return arrayField(schema, path, value, name, required, opts);
    case "map": return mapField(schema, path, value, name, required, opts);
    case "json": return jsonField(schema, path, value, name, required, opts);
    default: return scalarField(schema, path, value, name, required, opts);
  }
}

// What the form suggests at `path`: given for the path itself, or for every item of its arrays (a suggestion's path
// may write an index as `[]`: `spec.graphs[].type` is offered in `spec.graphs[0].type` and `spec.graphs[1].type`).
function suggestionsAt(suggestions, path) {
  return suggestions[path] || suggestions[path.replace(/\[\d+\]/g, "[]")];
}

function scalarField(schema, path, value, name, required, opts) {
  const fixed = opts.fixed.has(path);
  const kind = kindOf(schema);
  let input;
  const attrs = { name: path, "data-test": `input-${path}`, id: `f${++serial}` };
  if (fixed) attrs.disabled = "disabled";
  if (kind === "enum" || kind === "boolean") {
    const choices = kind === "enum" ? schema.enum.map(String) : ["true", "false"];
    const unset = schema.default !== undefined ? `(default: ${schema.default})` : "(unset)";
    input = h("select", attrs, h("option", { value: "" }, text(unset)),
      ...choices.map((c) => h("option", { value: c }, text(c))));
    input.value = value === undefined || value === null ? "" : String(value);
  } else {
    attrs.type = kind === "integer" || kind === "number" ? "number" : "text";
    if (schema.default !== undefined && typeof schema.default !== "object") attrs.placeholder = String(schema.default);
    const suggested = suggestionsAt(opts.suggestions, path);
    let list = [];
    if (suggested && suggested.length) {
      attrs.list = `${attrs.id}-list`;
      list = [h("datalist", { id: attrs.list }, ...suggested.map((s) => h("option", { value: String(s) })))];
    }
    input = h("input", attrs);
    input.value = value === undefined || value === null ? "" : String(value);
    input = h("span", { class: "form-input" }, input, ...list);
  }
  const control = input.tagName === "SPAN" ? input.firstChild : input;
  const el = wrapper(path, h("label", { for: attrs.id }, label(name, required)), input, ...help(schema));
  return {
    el,
    get() {
      const raw = control.value;
      if (raw === "") return null;
      if (kind === "boolean") return raw === "true";
      if (kind === "integer" || kind === "number") {
        const n = Number(raw);
        return Number.isFinite(n) ? n : raw; // the API server says why it is not a number
      }
      if (kind === "enum" && schema.type && schema.type !== "string") {
        const found = schema.enum.find((e) => String(e) === raw);
        return found === undefined ? raw : found;
      }
      return raw;
    },
  };
}

function jsonField(schema, path, value, name, required, opts) {
  const attrs = { name: path, "data-test": `input-${path}`, rows: "4", class: "form-json", spellcheck: "false" };
  if (opts.fixed.has(path)) attrs.disabled = "disabled";
  const area = h("textarea", attrs);
  area.value = value === undefined || value === null ? "" : JSON.stringify(value, null, 2);
  const hint = h("div", { class: "form-help" }, text("JSON."));
  const el = wrapper(path, h("label", {}, label(name, required)), area, ...help(schema), hint);
  return {
    el,
    get() {
      const raw = area.value.trim();
      hint.classList.remove("form-bad");
      if (raw === "") return null;
      try {
        return JSON.parse(raw);
      } catch (_) {
        hint.classList.add("form-bad");
        hint.textContent = "Not JSON: sent as text.";
        return raw;
      }
    },
  };
}

function objectField(schema, path, value, name, required, opts) {
  const props = schema.properties || {};
  const needed = new Set(schema.required || []);
  const current = value && typeof value === "object" ? value : {};
  const children = Object.entries(props).map(([key, sub]) => [key, field(sub, path ? `${path}.${key}` : key,
    current[key], key, needed.has(key), opts)]);
  const body = h("div", { class: "form-object" }, ...children.map(([, f]) => f.el));
  // Optional nested objects start closed unless they hold something: a Blueprint's schema is long.
  const open = required || path === "spec" || Object.keys(current).length > 0 || opts.depth(path) < 2;
  const details = h("details", open ? { open: "open" } : {}, h("summary", {}, label(name, required)), ...help(schema), body);
  return {
    el: wrapper(path, details),
    get() {
      const out = {};
      for (const [key, f] of children) out[key] = f.get();
      return out;
    },
  };
}

function arrayField(schema, path, value, name, required, opts) {
  const itemSchema = schema.items || {};
  const list = h("div", { class: "form-array" });
  let items = [];
  const render = (values) => {
    while (list.firstChild) list.removeChild(list.firstChild);
    items = values.map((v, i) => {
      const f = field(itemSchema, `${path}[${i}]`, v, `${name}[${i}]`, false, opts);
      const remove = h("button", { type: "button", class: "form-remove", "data-test": `remove-${path}[${i}]` }, text("Remove"));
      remove.addEventListener("click", () => {
        const now = items.map((it) => it.get());
        now.splice(i, 1);
        render(now);
        list.dispatchEvent(new Event("input", { bubbles: true }));
      });
      if (opts.fixed.has(path)) remove.disabled = true;
      list.appendChild(h("div", { class: "form-item" }, f.el, remove));
      return f;
    });
  };
  render(Array.isArray(value) ? value : []);
  const add = h("button", { type: "button", class: "form-add", "data-test": `add-${path}` }, text(`Add ${name}`));
  add.addEventListener("click", () => {
    render([...items.map((it) => it.get()), itemSchema.default !== undefined ? itemSchema.default : null]);
    list.dispatchEvent(new Event("input", { bubbles: true }));
  });
  if (opts.fixed.has(path)) add.disabled = true;
  const details = h("details", { open: "open" }, h("summary", {}, label(name, required)), ...help(schema), list, add);
  return { el: wrapper(path, details), get: () => items.map((it) => it.get()) };
}

function mapField(schema, path, value, name, required, opts) {
  const valueSchema = typeof schema.additionalProperties === "object" ? schema.additionalProperties : {};
  const list = h("div", { class: "form-map" });
  let rows = [];
  const render = (entries) => {
    while (list.firstChild) list.removeChild(list.firstChild);
    rows = entries.map(([k, v], i) => {
      const key = h("input", { type: "text", class: "form-key", placeholder: "key", "data-test": `key-${path}[${i}]` });
      key.value = k;
      const f = field(valueSchema, `${path}[${k}]`, v, "value", false, opts);
      const remove = h("button", { type: "button", class: "form-remove" }, text("Remove"));
      remove.addEventListener("click", () => {
        const now = rows.map((r) => [r.key.value, r.f.get()]);
        now.splice(i, 1);
        render(now);
        list.dispatchEvent(new Event("input", { bubbles: true }));
      });
      // A key renamed: the value's path (where the API server's errors are shown) follows it.
      key.addEventListener("input", () => f.el.setAttribute("data-path", `${path}[${key.value}]`));
      list.appendChild(h("div", { class: "form-entry" }, key, f.el, remove));
      return { key, f };
    });
  };
  render(Object.entries(value && typeof value === "object" ? value : {}));
  const add = h("button", { type: "button", class: "form-add", "data-test": `add-${path}` }, text(`Add ${name} entry`));
  add.addEventListener("click", () => {
    render([...rows.map((r) => [r.key.value, r.f.get()]), ["", null]]);
    list.dispatchEvent(new Event("input", { bubbles: true }));
  });
  if (opts.fixed.has(path)) add.disabled = true;
  const details = h("details", { open: "open" }, h("summary", {}, label(name, required)), ...help(schema), list, add);
  return {
    el: wrapper(path, details),
    get() {
      const out = {};
      for (const r of rows) if (r.key.value !== "") out[r.key.value] = r.f.get();
      return out;
    },
  };
}

const MAP_OF_STRINGS = { type: "object", additionalProperties: { type: "string" } };

// The whole form of one object: {el, value(), showErrors(errors) -> unplaced errors, clearErrors()}.
// `form` is the console's form (mode, schema, object, fixed, suggestions).
export function buildForm(form) {
  const fixed = new Set(form.fixed || []);
  const opts = { fixed, suggestions: form.suggestions || {}, depth: (p) => (p.match(/[.[]/g) || []).length };
  const object = form.object || {};
  const meta = object.metadata || {};
  const named = form.mode === "create" ? !["ActionRun", "GraphRun"].includes(form.kind) : true;
  const parts = [];
  const name = scalarField({ type: "string", description: named ? "The object's name." : "Empty: generated." },
    "metadata.name", meta.name, "name", named, opts);
  parts.push(["name", name]);
  if (form.mode !== "patch") {
    parts.push(["labels", mapField(MAP_OF_STRINGS, "metadata.labels", meta.labels, "labels", false, opts)]);
    parts.push(["annotations", mapField(MAP_OF_STRINGS, "metadata.annotations", meta.annotations, "annotations", false, opts)]);
  }
  const spec = objectField(form.schema, "spec", object.spec, "spec", true, opts);
  const el = h("div", { class: "form-fields" },
    h("fieldset", { class: "form-meta" }, h("legend", {}, text("metadata")), ...parts.map(([, f]) => f.el)), spec.el);
  // What the API server said of a field goes once the user changes that field.
  el.addEventListener("input", (event) => {
    const at = event.target.closest ? event.target.closest(".form-field.form-invalid") : null;
    if (!at) return;
    at.classList.remove("form-invalid");
    const slot = [...at.children].find((c) => c.classList.contains("form-error"));
    if (slot) slot.textContent = "";
  });
  return {
    el,
    value() {
      const metadata = { ...meta };
      for (const [key, f] of parts) metadata[key] = f.get();
      return { apiVersion: object.apiVersion, kind: object.kind, metadata, spec: spec.get() };
    },
    clearErrors() {
      for (const slot of el.querySelectorAll(".form-error")) slot.textContent = "";
      for (const f of el.querySelectorAll(".form-field.form-invalid")) f.classList.remove("form-invalid");
    },
    // Each error at its path, else at the nearest ancestor the form has; those with no field are returned.
    showErrors(errors) {
      const fields = new Map();
      for (const f of el.querySelectorAll("[data-path]")) fields.set(f.getAttribute("data-path"), f);
      const unplaced = [];
      for (const error of errors) {
        const at = (error.fallbacks || []).map((p) => fields.get(p)).find(Boolean);
        if (!error.path || !at) { unplaced.push(error); continue; }
        at.classList.add("form-invalid");
        for (let up = at; up && up !== el; up = up.parentElement) if (up.tagName === "DETAILS") up.open = true;
        const slot = [...at.children].find((c) => c.classList.contains("form-error"));
        const said = error.path === at.getAttribute("data-path") ? error.message : `${error.path}: ${error.message}`;
        slot.textContent = slot.textContent ? `${slot.textContent} ${said}` : said;
      }
      const first = el.querySelector(".form-invalid");
      if (first && first.scrollIntoView) first.scrollIntoView({ block: "center" });
      return unplaced;
    },
  };
}
