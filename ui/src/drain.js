// Node drain and task events as the UI shows them, in the words of
// `volplane node status` and `volplane alloc status`.
import { claimState } from './claims.js';
import { time } from './common.jsx';

// eligibility is a node's scheduling eligibility; a node stored before
// eligibility existed is eligible.
export const eligibility = (e) => e || 'eligible';

// drainText describes a node's drain in progress (its DrainStrategy, with
// Deadline in nanoseconds), as node status does; null is "false".
export function drainText(d) {
  if (!d) return 'false';
  let deadline;
  if (d.Deadline < 0) deadline = 'forced';
  else if (!d.Deadline) deadline = 'no deadline';
  else deadline = `deadline ${time(d.ForceDeadline)}`;
  return `true (started ${time(d.StartedAt)}, ${deadline}${d.IgnoreSystemJobs ? ', ignoring system jobs' : ''})`;
}

// lastDrainText describes a node's LastDrain, with the operator's message.
export function lastDrainText(m) {
  if (!m) return '';
  const msg = m.Meta?.message ? `: ${JSON.stringify(m.Meta.message)}` : '';
  return `${m.Status} (started ${time(m.StartedAt)}, updated ${time(m.UpdatedAt)})${msg}`;
}

// byteOrder compares as Go's strings.Compare does, not by locale.
const byteOrder = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

const TERMINAL = new Set(['complete', 'failed', 'lost']);

// drainProgress is what is left on a node being drained, as node status
// computes it: the claims the volumes hold on the node (past claims first,
// each allocation's once per volume) and the allocations on the node that
// still run or still hold claims there, sorted by name then ID.
export function drainProgress(nodeID, allocs, volumes) {
  const claims = {};
  for (const v of volumes || []) {
    const seen = new Set();
    for (const m of [v.PastClaims, v.WriteClaims, v.ReadClaims]) {
      for (const [id, c] of Object.entries(m || {})) {
        if (!c || c.NodeID !== nodeID || seen.has(id)) continue;
        seen.add(id);
        (claims[id] ||= []).push(`${v.ID} (${claimState(c.State)})`);
      }
    }
  }
  Object.values(claims).forEach((c) => c.sort(byteOrder));
  const left = (allocs || [])
    .filter((a) => a.NodeID === nodeID && (!TERMINAL.has(a.ClientStatus) || (claims[a.ID] || []).length > 0))
    .sort((a, b) => byteOrder(a.Name + a.ID, b.Name + b.ID));
  const claimCount = Object.values(claims).reduce((n, c) => n + c.length, 0);
  return { allocs: left, claims, claimCount };
}

// taskEvents is a task's events, the newest first, each with the line
// alloc status shows: its DisplayMessage, else its Message.
export function taskEvents(state) {
  return (state?.Events || [])
    .map((e, i) => ({ e, i }))
    .filter(({ e }) => e)
    .sort((x, y) => (y.e.Time || 0) - (x.e.Time || 0) || y.i - x.i)
    .map(({ e }) => ({ time: e.Time, type: e.Type, message: e.DisplayMessage || e.Message || '' }));
}
