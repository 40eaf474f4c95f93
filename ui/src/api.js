// The agent's HTTP API as the UI uses it: requests carry the ACL token
// (X-Nomad-Token) kept in the browser's local storage; reads can block on
// X-Nomad-Index; the event stream is read with fetch, which, unlike
// EventSource, can send the token.

const TOKEN_KEY = 'volplane.token';
const tokenListeners = new Set();

export function getToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

export function setToken(token) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage may be disabled; the token then lasts for this page only.
  }
  tokenListeners.forEach((f) => f(token));
}

// onTokenChange calls f with the new token after every change; it returns
// the function that stops it.
export function onTokenChange(f) {
  tokenListeners.add(f);
  return () => tokenListeners.delete(f);
}

// APIError is an answer other than 2xx: its status and the server's
// message.
export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function url(path, query) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (Array.isArray(v)) v.forEach((x) => params.append(k, x));
    else if (v !== undefined && v !== null && v !== '') params.set(k, String(v));
  }
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

function headers(extra) {
  const h = { ...extra };
  const token = getToken();
  if (token) h['X-Nomad-Token'] = token;
  return h;
}

async function fail(res) {
  const text = (await res.text()).trim();
  return new APIError(res.status, text || `${res.status} ${res.statusText}`);
}

// request sends one call and returns its decoded JSON (null when empty)
// with the index the server answered at.
export async function request(method, path, { query, body, signal } = {}) {
  const res = await fetch(url(path, query), {
    method,
    headers: headers(body ? { 'Content-Type': 'application/json' } : {}),
    body: body ? JSON.stringify(body) : undefined,
    signal,
  });
  if (!res.ok) throw await fail(res);
  const text = await res.text();
  return { data: text ? JSON.parse(text) : null, index: Number(res.headers.get('X-Nomad-Index') || 0) };
}

export const get = (path, query, signal) => request('GET', path, { query, signal }).then((r) => r.data);

// pathID escapes an ID as one path segment ("vol[0]" stays one segment).
export const pathID = (id) => encodeURIComponent(id);

// parseStreamLines splits the text read so far from the event stream into
// complete lines and returns the events they hold, the unfinished rest,
// and the error a line ended the stream with. The stream may frame events
// one per line or in Nomad's batches {"Index":N,"Events":[...]}; "{}" is
// a heartbeat.
export function parseStreamLines(text) {
  const lines = text.split('\n');
  const rest = lines.pop();
  const events = [];
  let error = '';
  for (const line of lines) {
    if (!line.trim()) continue;
    const obj = JSON.parse(line);
    if (obj.Error) {
      error = obj.Error;
      break;
    }
    if (Array.isArray(obj.Events)) events.push(...obj.Events);
    else if (obj.Topic) events.push(obj);
  }
  return { events, rest, error };
}

// subscribe reads the event stream of the topics and calls onEvent with
// each event until the returned function is called. When the stream ends
// it subscribes again from the last index it saw, after a pause; when that
// index is no longer buffered, from now, after calling onReset (the caller
// should read the current state again).
export function subscribe(topics, onEvent, { onReset, onState } = {}) {
  const ctrl = new AbortController();
  let index = 0;
  let stopped = false;
  const pause = (ms) => new Promise((r) => setTimeout(r, ms));
  (async () => {
    while (!stopped) {
      try {
        const res = await fetch(url('/v1/event/stream', { topic: topics, index }), {
          headers: headers(), signal: ctrl.signal,
        });
        if (res.status === 400 && index > 0) {
          index = 0;
          onReset && onReset();
          continue;
        }
        if (!res.ok) throw await fail(res);
        onState && onState('live');
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += decoder.decode(value, { stream: true });
          const { events, rest, error } = parseStreamLines(buf);
          buf = rest;
          for (const ev of events) {
            index = Math.max(index, ev.Index || 0);
            onEvent(ev);
          }
          if (error) break;
        }
      } catch (err) {
        if (stopped) return;
        onState && onState(`event stream: ${err.message}`);
      }
      if (!stopped) await pause(1000);
    }
  })();
  return () => {
    stopped = true;
    ctrl.abort();
  };
}

// logTail reads the last bytes of a task's stdout or stderr as text.
export async function logTail({ allocID, namespace, task, type, bytes = 4096, signal }) {
  const res = await fetch(url(`/v1/client/fs/logs/${pathID(allocID)}`, {
    namespace, task, type, origin: 'end', offset: bytes, plain: 'true',
  }), { headers: headers(), signal });
  if (!res.ok) throw await fail(res);
  return res.text();
}
