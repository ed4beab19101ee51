// The console's own API, as the signed-in user. Writes carry the session's CSRF token; a 401 anywhere
// signs the page out (the app shows the sign-in page) instead of retrying.

let csrf = null;

export class ApiFailure extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function setCsrf(token) {
  csrf = token;
}

async function answer(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  if (!resp.ok) {
    const failure = new ApiFailure(resp.status, (body && body.message) || resp.statusText);
    if (resp.status === 401) window.dispatchEvent(new CustomEvent('console:signedout', {detail: failure.message}));
    throw failure;
  }
  return body;
}

export async function get(path) {
  return answer(await fetch(path, {credentials: 'same-origin', headers: {Accept: 'application/json'}}));
}

export async function send(method, path, body) {
  const headers = {Accept: 'application/json', 'X-CSRF-Token': csrf || ''};
  const init = {method, credentials: 'same-origin', headers};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  return answer(await fetch(path, init));
}

export const api = {get, send};
