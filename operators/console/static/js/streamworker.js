// One stream for every tab of the console's origin (a SharedWorker; in a page when there is none).
//
// Browsers give an origin six HTTP/1.1 connections: a stream per tab would leave the seventh tab nothing.
// So every tab sends its topics here, and this keeps ONE stream (`/console/api/stream`) naming the topics
// of the tabs that are visible; it reopens it when that set changes, each topic resuming from the last
// position it delivered. Hidden tabs' topics are dropped (the stream closes when no tab is visible) and
// taken up again, from their positions, when the tab shows.
// Failures back off (1 s doubling to 30 s, with jitter). A 401, or the server's `unauthorized` event,
// stops everything until a tab signs in again (`resume`): an expired token never becomes a reconnect loop.

const ports = new Map();  // port -> {n, visible, subs: Map(localId -> topic)}
const positions = new Map();  // global topic id -> last position delivered
let portCount = 0;
let current = null;  // {key, controller}
let backoff = 1000;
let stopped = false;
let timer = null;

function topics() {
  const list = [];
  for (const state of ports.values()) {
    if (!state.visible) continue;
    for (const [id, topic] of state.subs) {
      const global = `p${state.n}-${id}`;
      list.push({...topic, id: global, position: positions.has(global) ? positions.get(global) : null});
    }
  }
  return list;
}

function broadcast(message) {
  for (const port of ports.keys()) port.postMessage(message);
}

function deliver(global, message) {
  const match = /^p(\d+)-(.*)$/.exec(global);
  if (!match) return;
  for (const [port, state] of ports) {
    if (String(state.n) === match[1]) port.postMessage({...message, id: match[2]});
  }
}

function schedule(delay) {
  clearTimeout(timer);
  timer = setTimeout(reconcile, delay);
}

function reconcile() {
  if (stopped) return;
  const wanted = topics();
  const key = JSON.stringify(wanted.map((t) => t.id).sort());
  if (current && current.key === key) return;
  if (current) current.controller.abort();
  current = null;
  if (wanted.length) open(wanted, key);
}

function retry(reason) {
  if (stopped) return;
  const delay = Math.round(backoff * (0.5 + Math.random()));
  backoff = Math.min(backoff * 2, 30000);
  broadcast({type: 'status', state: 'reconnecting', in: delay, reason});
  current = null;
  schedule(delay);
}

function signedOut(reason) {
  stopped = true;
  clearTimeout(timer);
  if (current) current.controller.abort();
  current = null;
  broadcast({type: 'unauthorized', reason});
}

function handle(event, data) {
  if (event === 'unauthorized') return signedOut(data.reason);
  if (event === 'close') {  // every topic ended: the same topics again would end again
    if (current) current.closed = true;
    return;
  }
  if (event === 'open') {
    backoff = 1000;
    return broadcast({type: 'status', state: 'live'});
  }
  if (!data || typeof data.topic !== 'string') return;
  if (event === 'data' || event === 'end' || event === 'retry') {
    if (data.position !== undefined && data.position !== null) positions.set(data.topic, data.position);
  }
  deliver(data.topic, {type: event, position: data.position, data: data.data, status: data.status,
                       message: data.message || data.reason});
}

async function open(wanted, key) {
  const controller = new AbortController();
  current = {key, controller};
  const url = '/console/api/stream?topics=' + encodeURIComponent(JSON.stringify(wanted));
  let resp;
  try {
    resp = await fetch(url, {credentials: 'same-origin', signal: controller.signal,
                             headers: {Accept: 'text/event-stream'}});
  } catch (error) {
    if (!controller.signal.aborted) retry(String(error));
    return;
  }
  if (resp.status === 401) return signedOut('the session ended');
  if (!resp.ok || !resp.body) {
    let message = resp.statusText;
    try {
      message = (await resp.json()).message;
    } catch { /* not JSON */ }
    if (resp.status === 400) {  // a topic the server refused: tell the tabs, do not loop on it
      broadcast({type: 'status', state: 'refused', reason: message});
      return;
    }
    return retry(`${resp.status} ${message}`);
  }
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = 'message';
        const lines = [];
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) event = line.slice(7);
          else if (line.startsWith('data: ')) lines.push(line.slice(6));
        }
        if (!lines.length) continue;  // a heartbeat
        let data = null;
        try {
          data = JSON.parse(lines.join('\n'));
        } catch {
          continue;
        }
        handle(event, data);
        if (stopped) return;
      }
    }
  } catch (error) {
    if (controller.signal.aborted) return;
  }
  if (!controller.signal.aborted && current && current.controller === controller && !current.closed) {
    retry('the stream ended');
  }
}

export function connect(port) {
  const state = {n: portCount++, visible: true, subs: new Map()};
  ports.set(port, state);
  port.onmessage = (event) => {
    const message = event.data || {};
    if (message.op === 'sub') state.subs.set(message.id, message.topic);
    else if (message.op === 'unsub') state.subs.delete(message.id);
    else if (message.op === 'visible') state.visible = Boolean(message.visible);
    else if (message.op === 'bye') ports.delete(port);
    else if (message.op === 'resume') {
      stopped = false;
      backoff = 1000;
    }
    schedule(30);  // a page subscribes several topics at once: one reopen for all of them
  };
  port.start();
}

if (typeof SharedWorkerGlobalScope !== 'undefined' && self instanceof SharedWorkerGlobalScope) {
  self.onconnect = (event) => connect(event.ports[0]);
}
