// Building the page without markup: every value becomes a text node or an attribute, never HTML.
// Nothing in the console sets markup from strings (a unit test greps every script for the ways to), so a
// task's output or an attribute value is shown as the characters it is, whatever it holds.

const SVG_NS = 'http://www.w3.org/2000/svg';
const URL_ATTRIBUTES = new Set(['href', 'src', 'action', 'formaction', 'xlink:href']);
const SAFE_URL = /^(#|\/(?!\/)|https?:|data:image\/(png|svg\+xml);)/i;

function apply(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (/^on/i.test(name)) throw new Error(`dom: ${name}: event handlers are added with addEventListener`);
    if (name === 'class') {
      el.setAttribute('class', Array.isArray(value) ? value.filter(Boolean).join(' ') : String(value));
      continue;
    }
    const text = value === true ? '' : String(value);
    if (URL_ATTRIBUTES.has(name.toLowerCase()) && !SAFE_URL.test(text)) {
      throw new Error(`dom: ${name}: refused URL ${JSON.stringify(text.slice(0, 40))}`);
    }
    el.setAttribute(name, text);
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h('a', {href: '#/x', class: 'link'}, 'text', otherElement). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  apply(el, attrs);
  return append(el, children);
}

/** An SVG element, the same way. */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, attrs);
  return append(el, children);
}

export function text(value) {
  return document.createTextNode(value === null || value === undefined ? '' : String(value));
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

/** el with a listener added (for handlers built inline: on(h('button', {}, 'Go'), 'click', go)). */
export function on(el, event, listener) {
  el.addEventListener(event, listener);
  return el;
}

/** How long ago an ISO time was, as kubectl's AGE column says it. */
export function age(iso) {
  if (!iso) return '';
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 120) return `${Math.floor(seconds)}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}
