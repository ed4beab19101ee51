// The page's side of the one stream: subscribe(topic, onMessage) -> unsubscribe. The stream itself lives
// in a SharedWorker (streamworker.js), shared by every tab of the console.

let port = null;
let seq = 0;
const handlers = new Map();
const statusListeners = new Set();

async function connect() {
  if (typeof SharedWorker !== 'undefined') {
    const worker = new SharedWorker('/console/static/js/streamworker.js', {type: 'module', name: 'stead-stream'});
    port = worker.port;
  } else {
    const channel = new MessageChannel();
    (await import('./streamworker.js')).connect(channel.port2);
    port = channel.port1;
  }
  port.onmessage = (event) => {
    const message = event.data || {};
    if (message.type === 'unauthorized') {
      window.dispatchEvent(new CustomEvent('console:signedout', {detail: message.reason}));
    } else if (message.type === 'status') {
      for (const listener of statusListeners) listener(message);
    } else {
      const handler = handlers.get(message.id);
      if (handler) handler(message);
    }
  };
  port.start();
  const visibility = () => port.postMessage({op: 'visible', visible: document.visibilityState !== 'hidden'});
  document.addEventListener('visibilitychange', visibility);
  window.addEventListener('pagehide', () => port.postMessage({op: 'bye'}));
  visibility();
}

const ready = connect();

/** Follow `topic` ({kind, ...params}); onMessage gets {type: data|error|end|retry, data, position, message}. */
export function subscribe(topic, onMessage) {
  const id = `t${seq++}`;
  handlers.set(id, onMessage);
  ready.then(() => port.postMessage({op: 'sub', id, topic}));
  return () => {
    handlers.delete(id);
    ready.then(() => port.postMessage({op: 'unsub', id}));
  };
}

/** After a sign-in: let the stream open again. */
export function resume() {
  ready.then(() => port.postMessage({op: 'resume'}));
}

export function onStatus(listener) {
  statusListeners.add(listener);
}

export const stream = {subscribe, resume, onStatus};
