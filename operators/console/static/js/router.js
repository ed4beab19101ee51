// Hash routes: #/signin, #/ns/NS (every object), #/ns/NS/PLURAL/NAME (one object),
// #/ns/NS/new/PLURAL and #/ns/NS/PLURAL/NAME/edit (forms: views/forms.js renderNew / renderEdit).
const ROUTES = [
  [/^\/signin$/, () => ({page: 'signin'})],
  [/^\/ns\/([^/]+)$/, (m) => ({page: 'list', namespace: m[1]})],
  [/^\/ns\/([^/]+)\/new\/([^/]+)$/, (m) => ({page: 'form', fn: 'renderNew', namespace: m[1], plural: m[2]})],
  [/^\/ns\/([^/]+)\/([^/]+)\/([^/]+)\/edit$/,
    (m) => ({page: 'form', fn: 'renderEdit', namespace: m[1], plural: m[2], name: m[3]})],
  [/^\/ns\/([^/]+)\/([^/]+)\/([^/]+)$/, (m) => ({page: 'object', namespace: m[1], plural: m[2], name: m[3]})],
];

export function parse(hash) {
  const path = decodeURIComponent((hash || '').replace(/^#/, '')) || '/';
  for (const [pattern, make] of ROUTES) {
    const match = pattern.exec(path);
    if (match) return make(match);
  }
  return {page: 'home'};
}

export function navigate(hash) {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent('hashchange'));
  else location.hash = hash;
}

export function objectHash(namespace, plural, name) {
  return `#/ns/${encodeURIComponent(namespace)}/${encodeURIComponent(plural)}/${encodeURIComponent(name)}`;
}
