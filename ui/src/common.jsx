import { useRef, useState } from 'preact/hooks';

export const shortID = (id) => (id && id.length > 8 ? id.slice(0, 8) : id || '');

// time formats Unix nanoseconds (or an RFC 3339 string); 0 is never.
export function time(t) {
  if (!t) return '';
  const d = typeof t === 'string' ? new Date(t) : new Date(Number(t) / 1e6);
  return Number.isNaN(d.getTime()) || d.getFullYear() < 1971 ? '' : d.toISOString().replace('.000Z', 'Z');
}

export const ratio = (h, e) => `${h ?? 0}/${e ?? 0}`;

export function Loading({ state, what }) {
  if (state.error) {
    return (
      <p class="error" role="alert">
        Could not read {what}: {state.error.message}
        {state.error.status === 403 ? ' (set an ACL token above)' : ''}
      </p>
    );
  }
  return state.loading ? <p aria-busy="true">Loading {what}…</p> : null;
}

// Table is a captioned table in a scrolling box, so that wide tables stay
// readable on a phone.
export function Table({ caption, head, rows, empty, attrs }) {
  return (
    <div class="table-wrap">
      <table {...attrs}>
        <caption>{caption}</caption>
        <thead>
          <tr>{head.map((h) => <th scope="col">{h}</th>)}</tr>
        </thead>
        <tbody>
          {rows.length === 0 ? (
            <tr><td colSpan={head.length} class="empty">{empty || 'None'}</td></tr>
          ) : rows}
        </tbody>
      </table>
    </div>
  );
}

// Pairs is a definition list of label/value pairs.
export function Pairs({ pairs, label }) {
  return (
    <dl class="pairs" aria-label={label}>
      {pairs.map(([k, v]) => [<dt>{k}</dt>, <dd>{v === '' || v === undefined || v === null ? '—' : v}</dd>])}
    </dl>
  );
}

export function Status({ value }) {
  const cls = {
    running: 'ok', ready: 'ok', eligible: 'ok', complete: 'ok', healthy: 'ok', freed: 'ok', true: 'ok',
    failed: 'bad', lost: 'bad', down: 'bad', unhealthy: 'bad', false: 'bad',
    pending: 'wait', ineligible: 'wait', draining: 'wait', 'waiting-for-client': 'wait', unpublishing: 'wait', 'node-detached': 'wait',
    'controller-detached': 'wait', 'ready-to-free': 'wait', initializing: 'wait', dead: 'muted',
  }[String(value)] || '';
  return <span class={`status ${cls}`}>{String(value)}</span>;
}

// ConfirmButton asks in a modal dialog before it runs action; the dialog
// shows what the action answered, or its error.
export function ConfirmButton({ label, title, children, action, danger, disabled }) {
  const dialog = useRef(null);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState(null);
  const id = `dlg-${label.replace(/\W+/g, '-').toLowerCase()}`;
  const open = () => {
    setResult(null);
    dialog.current.showModal();
  };
  const run = async () => {
    setBusy(true);
    try {
      const out = await action();
      setResult({ ok: true, text: out || 'Done.' });
    } catch (err) {
      setResult({ ok: false, text: err.message });
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button type="button" class={danger ? 'danger' : ''} disabled={disabled} onClick={open}>{label}</button>
      <dialog ref={dialog} aria-labelledby={`${id}-title`}>
        <h2 id={`${id}-title`}>{title}</h2>
        <div>{children}</div>
        {result && (
          <pre class={result.ok ? 'result' : 'result error'} role={result.ok ? 'status' : 'alert'}>{result.text}</pre>
        )}
        <div class="actions">
          {!result?.ok && (
            <button type="button" class={danger ? 'danger' : ''} disabled={busy} onClick={run}>
              {busy ? 'Working…' : `Yes, ${label.toLowerCase()}`}
            </button>
          )}
          <button type="button" onClick={() => dialog.current.close()}>{result?.ok ? 'Close' : 'Cancel'}</button>
        </div>
      </dialog>
    </>
  );
}

// LiveState tells whether live updates are flowing.
export function LiveState({ state }) {
  return (
    <p class="live" aria-live="polite">
      Live updates: {state === 'live' ? 'on' : state}
    </p>
  );
}
