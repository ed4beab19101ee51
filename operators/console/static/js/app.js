// The console's shell: sign-in, the bar, the namespace's objects, an object's page; the views of each kind
// (views/*.js) draw below an object's header, conditions and Events.
import {api, ApiFailure, setCsrf} from './api.js';
import {age, clear, h, on} from './dom.js';
import {navigate, objectHash, parse} from './router.js';
import {stream} from './stream.js';
import {PAGES, VIEWS} from './views/index.js';

const bar = document.getElementById('bar');
const main = document.getElementById('main');
let session = null;
let signinOffer = {oidc: false, problem: null};  // what the sign-in page offers, from the signed-out answer
let kinds = null;
let cleanups = [];
let generation = 0;

function cleanup() {
  for (const fn of cleanups.splice(0)) {
    try {
      fn();
    } catch (error) {
      console.warn(error);
    }
  }
}

function problem(error) {
  const message = error instanceof ApiFailure ? `${error.status}: ${error.message}` : String(error);
  return h('p', {class: 'problem', 'data-test': 'problem'}, message);
}

function ctxFor(namespace) {
  return {namespace, api, stream, navigate, session, kinds, onCleanup: (fn) => cleanups.push(fn)};
}

// --- sign-in ------------------------------------------------------------------------------------------

function drawBar() {
  clear(bar);
  const brand = h('a', {href: '#/', class: 'brand'}, 'Stead');
  if (!session) return bar.append(brand);
  const ns = h('input', {id: 'namespace', 'data-test': 'namespace', placeholder: 'namespace', size: 18,
    value: parse(location.hash).namespace || session.namespace || ''});
  on(ns, 'change', () => ns.value && navigate(`#/ns/${encodeURIComponent(ns.value)}`));
  const out = on(h('button', {type: 'button', 'data-test': 'signout'}, 'Sign out'), 'click', async () => {
    try {
      await api.send('DELETE', '/console/api/session');
    } catch { /* signed out either way */ }
    session = null;
    navigate('#/signin');
  });
  const live = h('span', {class: 'live', 'data-test': 'stream-state'}, '');
  stream.onStatus((status) => {
    live.textContent = status.state === 'live' ? '● live' : status.state;
  });
  const who = session.name && session.name !== session.user ? `${session.name} (${session.user})` : session.user;
  bar.append(brand, h('label', {}, 'Namespace ', ns), h('span', {class: 'user', 'data-test': 'user'}, who),
    live, out);
}

function signIn(reason) {
  clear(main);
  const token = h('textarea', {id: 'token', 'data-test': 'token', rows: 5, cols: 80, autocomplete: 'off',
    spellcheck: 'false', placeholder: 'kubectl create token NAME -n NAMESPACE'});
  const message = h('p', {class: 'problem', 'data-test': 'signin-problem'}, reason || signinOffer.problem || '');
  signinOffer.problem = null;  // shown once
  // OIDC: a plain link to the console's own route, which sends the browser on to the issuer
  const oidc = signinOffer.oidc
    ? h('p', {}, h('a', {href: '/console/oidc/login', class: 'button', 'data-test': 'signin-oidc'}, 'Sign in with OIDC'),
      ' or paste a token:')
    : '';
  const form = h('form', {class: 'signin', 'data-test': 'signin'},
    h('h1', {}, 'Sign in'), oidc,
    h('p', {}, 'Paste a Kubernetes token. The console acts with it alone: you see and change what your RBAC ',
      'allows, nothing more. It is kept in an encrypted cookie only this console can read.'),
    token, h('div', {}, h('button', {type: 'submit', 'data-test': 'signin-submit'}, 'Sign in')), message);
  on(form, 'submit', async (event) => {
    event.preventDefault();
    try {
      const resp = await fetch('/console/api/session', {method: 'POST', credentials: 'same-origin',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify({token: token.value.trim()})});
      const body = await resp.json();
      if (!resp.ok) throw new ApiFailure(resp.status, body.message);
      session = body;
      setCsrf(body.csrf);
      stream.resume();
      navigate(session.namespace ? `#/ns/${encodeURIComponent(session.namespace)}` : '#/');
    } catch (error) {
      message.textContent = error instanceof ApiFailure ? error.message : String(error);
    }
  });
  main.append(form);
  drawBar();
}

// --- the namespace's objects --------------------------------------------------------------------------

function cell(value, column) {
  if (column.type === 'date') return age(value);
  if (value === null || value === undefined) return '';
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}

async function listPage(namespace, mine) {
  const root = h('section', {class: 'objects', 'data-test': 'objects'});
  main.append(h('h1', {}, `Stead objects in ${namespace}`), root);
  const draw = async () => {
    const answer = await api.get(`/console/api/objects/${encodeURIComponent(namespace)}`);
    if (mine !== generation) return;
    clear(root);
    if (!answer.groups.length) root.append(h('p', {'data-test': 'empty'}, 'No Stead objects here that you may see.'));
    for (const group of answer.groups) {
      const columns = group.kind.columns;
      root.append(h('h2', {}, group.kind.kind, ' ',
        h('a', {href: `#/ns/${encodeURIComponent(namespace)}/new/${group.kind.plural}`, class: 'new'}, 'new')),
      h('table', {'data-test': `kind-${group.kind.plural}`},
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), columns.map((c) => h('th', {}, c.name)))),
        h('tbody', {}, group.rows.map((row) => h('tr', {'data-test': `row-${row.plural}-${row.name}`},
          h('td', {}, h('a', {href: objectHash(namespace, row.plural, row.name)}, row.name)),
          row.cells.map((value, i) => h('td', {}, cell(value, columns[i]))))))));
    }
    if (answer.refused.length) {
      root.append(h('p', {class: 'refused', 'data-test': 'refused'},
        `Not shown (your RBAC does not let you list them here): ${answer.refused.join(', ')}`));
    }
    return answer;
  };
  const first = await draw();
  let pending = null;
  const again = () => {
    clearTimeout(pending);
    pending = setTimeout(() => draw().catch(() => {}), 300);
  };
  const kindsHere = kinds.filter((k) => k.namespaced && !first.refused.includes(k.kind));
  for (const kind of kindsHere) {
    let listed = false;
    cleanups.push(stream.subscribe({kind: 'list', plural: kind.plural, namespace}, (message) => {
      if (message.type !== 'data') return;
      if (listed || message.data.type !== 'LIST') again();
      listed = true;
    }));
  }
  cleanups.push(() => clearTimeout(pending));
}

// --- one object ---------------------------------------------------------------------------------------

// How a condition reads: Ready True is good, Stalled True is bad, Reconciling True is work in progress.
function conditionClass(c) {
  if (c.type === 'Stalled') return c.status === 'True' ? 'cond-bad' : 'cond-quiet';
  if (c.type === 'Reconciling') return c.status === 'True' ? 'cond-busy' : 'cond-quiet';
  return c.status === 'True' ? 'cond-good' : (c.status === 'False' ? 'cond-bad' : 'cond-quiet');
}

function conditionsTable(obj) {
  const conditions = (obj.status && obj.status.conditions) || [];
  return h('table', {class: 'conditions', 'data-test': 'conditions'},
    h('thead', {}, h('tr', {}, ['Type', 'Status', 'Reason', 'Message', 'Since'].map((t) => h('th', {}, t)))),
    h('tbody', {}, conditions.map((c) => h('tr', {'data-test': `condition-${c.type}`, class: conditionClass(c)},
    h('td', {}, c.type), h('td', {}, c.status), h('td', {}, c.reason || ''), h('td', {}, c.message || ''),
    h('td', {}, age(c.lastTransitionTime))))));
}

function eventsTable(events) {
  if (events === null) return h('p', {class: 'refused'}, 'Events: your RBAC does not let you list them here.');
  return h('table', {class: 'events', 'data-test': 'events'},
    h('thead', {}, h('tr', {}, ['Type', 'Reason', 'Age', 'From', 'Message'].map((t) => h('th', {}, t)))),
    h('tbody', {}, events.map((e) => h('tr', {class: `event-${e.type}`},
      h('td', {}, e.type || ''), h('td', {}, e.reason || ''),
      h('td', {}, `${age(e.last)}${e.count > 1 ? ` (x${e.count})` : ''}`), h('td', {}, e.from || ''),
      h('td', {}, e.message || '')))));
}

let actionsByPlural = null;  // the actions a form can call, by kind (views/forms.py's catalog), fetched once

async function actionsOf(plural) {
  if (!actionsByPlural) {
    try {
      actionsByPlural = Object.fromEntries((await api.get('/console/api/forms')).map((k) => [k.plural, k.actions]));
    } catch {
      return [];
    }
  }
  return actionsByPlural[plural] || [];
}

function header(obj, kind, actions) {
  const status = obj.status || {};
  const ready = (status.conditions || []).find((c) => c.type === 'Ready');
  return h('div', {class: 'object-head'},
    h('h1', {}, `${kind.kind} `, h('span', {'data-test': 'object-name'}, obj.metadata.name)),
    h('p', {class: 'summary'},
      h('span', {class: 'phase', 'data-test': 'phase'}, status.phase || 'Init'), ' · ',
      h('span', {class: `ready ${ready ? conditionClass(ready) : 'cond-quiet'}`, 'data-test': 'ready'},
        `Ready ${ready ? ready.status : 'Unknown'}`),
      status.state ? [' · ', h('span', {class: 'state', 'data-test': 'state'}, status.state)] : null,
      ' · generation ', String(obj.metadata.generation || ''), ' · ',
      h('a', {href: `${objectHash(obj.metadata.namespace || '-', kind.plural, obj.metadata.name)}/edit`}, 'edit'),
      actions.map((action) => [' · ', h('a', {'data-test': `do-${action}`,
        href: `${objectHash(obj.metadata.namespace || '-', kind.plural, obj.metadata.name)}/do/${action}`}, action)])));
}

/** A page opened on a name that does not exist (yet): a form has just sent it, or the operator is about to make
 * it (an App's create run). Say so, and follow the name until the object appears; true once it has, false when
 * the name is not one the stream can follow (the 404 is then the answer). */
function created(route, mine, error) {
  const note = h('p', {class: 'problem', 'data-test': 'problem'},
    `${error.message} · waiting for ${route.plural}/${route.name} to be created`);
  main.append(note);
  return new Promise((resolve) => {
    const stop = stream.subscribe({kind: 'object', plural: route.plural, namespace: route.namespace, name: route.name},
      (message) => {
        if (message.type === 'error' || message.type === 'end') {
          stop();
          resolve(false);
        } else if (message.type === 'data' && message.data && message.data.metadata && mine === generation) {
          stop();
          note.remove();
          resolve(true);
        }
      });
    cleanups.push(stop);
  });
}

async function objectPage(route, mine) {
  const path = `/console/api/objects/${encodeURIComponent(route.namespace)}/${encodeURIComponent(route.plural)}/` +
    encodeURIComponent(route.name);
  let answer;
  try {
    answer = await api.get(path);
  } catch (error) {
    if (!(error instanceof ApiFailure && error.status === 404 && await created(route, mine, error))) throw error;
    answer = await api.get(path);
  }
  if (mine !== generation) return;
  const kind = answer.kind;
  const head = h('div', {});
  const conditions = h('section', {class: 'conditions'});
  const viewRoot = h('section', {class: 'view', 'data-test': 'view'});
  const events = h('section', {class: 'events'});
  const yamlText = h('pre', {class: 'yaml', 'data-test': 'yaml'});
  main.append(head, h('h2', {}, 'Conditions'), conditions, viewRoot, h('h2', {}, 'Events'), events,
    h('details', {}, h('summary', {}, 'YAML'), yamlText));
  const ctx = ctxFor(route.namespace);
  const actions = await actionsOf(kind.plural);
  let view = null;
  const load = VIEWS[kind.plural];
  if (load) {
    try {
      view = await load();
    } catch (error) {
      console.warn(`no view for ${kind.plural}`, error);
    }
  }
  const drawAll = (first) => {
    clear(head).append(header(answer.object, kind, actions));
    clear(conditions).append(conditionsTable(answer.object));
    clear(events).append(eventsTable(answer.events));
    yamlText.textContent = answer.yaml;
    if (!view) return;
    try {
      if (first || !view.update) {
        clear(viewRoot);
        view.render(viewRoot, answer.object, ctx);
      } else {
        view.update(viewRoot, answer.object, ctx);
      }
    } catch (error) {
      viewRoot.append(problem(error));
    }
  };
  drawAll(true);
  let pending = null;
  const again = () => {
    clearTimeout(pending);
    pending = setTimeout(async () => {
      try {
        answer = await api.get(path);
        if (mine === generation) drawAll(false);
      } catch (error) {
        if (error.status === 404) clear(head).append(problem('deleted'));
      }
    }, 150);
  };
  let seen = answer.object.metadata.resourceVersion;
  cleanups.push(stream.subscribe({kind: 'object', plural: kind.plural, namespace: route.namespace, name: route.name},
    (message) => {
      if (message.type !== 'data') return;
      const rv = message.data && message.data.metadata ? message.data.metadata.resourceVersion : null;
      if (rv && rv === seen) return;
      seen = rv;
      again();
    }));
  if (kind.namespaced && answer.events !== null) {
    let listed = false;
    cleanups.push(stream.subscribe({kind: 'events', namespace: route.namespace, uid: answer.object.metadata.uid},
      (message) => {
        if (message.type !== 'data') return;
        if (listed || message.data.type !== 'LIST') again();
        listed = true;
      }));
  }
  cleanups.push(() => clearTimeout(pending));
}

// --- the router ---------------------------------------------------------------------------------------

async function formPage(route) {
  const load = PAGES.forms;
  const module = await load();
  module[route.fn](main, route, ctxFor(route.namespace));
}

function homePage() {
  const ns = h('input', {'data-test': 'namespace-choice', placeholder: 'namespace'});
  const form = on(h('form', {}, h('label', {}, 'Namespace ', ns), h('button', {type: 'submit'}, 'Open')),
    'submit', (event) => {
      event.preventDefault();
      if (ns.value) navigate(`#/ns/${encodeURIComponent(ns.value)}`);
    });
  main.append(h('h1', {}, 'Stead'), form);
  api.get('/console/api/namespaces').then((answer) => {
    if (answer.namespaces.length) {
      main.append(h('ul', {class: 'namespaces'}, answer.namespaces.map((name) =>
        h('li', {}, h('a', {href: `#/ns/${encodeURIComponent(name)}`}, name)))));
    }
  }).catch(() => {});
}

async function show() {
  cleanup();
  const mine = ++generation;
  const route = parse(location.hash);
  if (route.page === 'signin' || !session) return signIn();
  clear(main);
  drawBar();
  try {
    if (!kinds) kinds = (await api.get('/console/api/kinds')).kinds;
    if (route.page === 'list') await listPage(route.namespace, mine);
    else if (route.page === 'object') await objectPage(route, mine);
    else if (route.page === 'form') await formPage(route);
    else if (session.namespace) navigate(`#/ns/${encodeURIComponent(session.namespace)}`);
    else homePage();
  } catch (error) {
    if (mine === generation && !(error instanceof ApiFailure && error.status === 401)) main.append(problem(error));
  }
}

window.addEventListener('console:signedout', (event) => {
  session = null;
  cleanup();
  signIn(event.detail ? `Signed out: ${event.detail}` : 'Signed out.');
});
window.addEventListener('hashchange', show);

(async () => {
  try {
    const resp = await fetch('/console/api/session', {credentials: 'same-origin'});
    if (resp.ok) {
      session = await resp.json();
      setCsrf(session.csrf);
    } else {
      const answer = await resp.json();
      signinOffer = {oidc: Boolean(answer.oidc), problem: answer.problem || null};
    }
  } catch { /* not signed in */ }
  show();
})();
