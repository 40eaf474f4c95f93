import { useEffect, useRef, useState } from 'preact/hooks';
import { onTokenChange, request, subscribe } from './api.js';

// How long each blocking query waits for a change before asking again.
const BLOCK_WAIT = '60s';

// useBlocking reads path and keeps it current with blocking queries
// (?index=&wait=): the page follows the cluster without polling. key
// restarts it (say, when the filters change); so does a new token.
export function useBlocking(path, query, key = '') {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const [token, setToken] = useState(0);
  useEffect(() => onTokenChange(() => setToken((n) => n + 1)), []);
  useEffect(() => {
    if (!path) return undefined;
    const ctrl = new AbortController();
    let index = 0;
    setState({ data: null, error: null, loading: true });
    (async () => {
      while (!ctrl.signal.aborted) {
        try {
          const q = { ...query };
          if (index) Object.assign(q, { index, wait: BLOCK_WAIT });
          const r = await request('GET', path, { query: q, signal: ctrl.signal });
          index = r.index || 0;
          setState({ data: r.data, error: null, loading: false });
          if (!r.index) return;
        } catch (err) {
          if (ctrl.signal.aborted) return;
          setState((s) => ({ ...s, error: err, loading: false }));
          if (err.status === 404 || err.status === 403) return;
          await new Promise((r) => setTimeout(r, 2000));
        }
      }
    })();
    return () => ctrl.abort();
  }, [path, key, token]);
  return state;
}

// useEvents subscribes to the event stream's topics while the component
// is mounted; onEvent sees every event. It returns the stream's state.
export function useEvents(topics, onEvent, onReset) {
  const handler = useRef(onEvent);
  handler.current = onEvent;
  const reset = useRef(onReset);
  reset.current = onReset;
  const [state, setState] = useState('connecting');
  const [token, setToken] = useState(0);
  useEffect(() => onTokenChange(() => setToken((n) => n + 1)), []);
  useEffect(
    () => subscribe(topics, (ev) => handler.current(ev), {
      onState: setState,
      onReset: () => reset.current && reset.current(),
    }),
    [topics.join(','), token],
  );
  return state;
}
