// Claims as the UI shows them: one row per allocation's claim on a volume,
// kept live from the event stream. A claim that is freed disappears from
// its volume; the UI keeps its row, marked "freed", so that one can watch
// a release end.

// The claim states by their wire numbers (structs.CSIVolumeClaimState).
const STATES = ['taken', 'node-detached', 'controller-detached', 'ready-to-free', 'unpublishing', 'waiting-for-client'];

export const FREED = 'freed';

export function claimState(s) {
  if (typeof s === 'string') return s;
  return STATES[s] ?? String(s);
}

export function claimMode(m) {
  return m === 1 || m === 'write' ? 'write' : 'read';
}

const key = (ns, vol, alloc) => `${ns}\u0000${vol}\u0000${alloc}`;

// claimRows returns the claims of a volume: live claims, replaced by the
// allocation's past claim (being released) when there is one. Each row
// carries the index it is true at: the volume's modify index, which every
// write of its claims moves.
export function claimRows(vol) {
  const rows = new Map();
  const add = (c) => {
    if (!c) return;
    rows.set(key(vol.Namespace, vol.ID, c.AllocationID), {
      index: vol.ModifyIndex || 0,
      namespace: vol.Namespace,
      volumeID: vol.ID,
      allocID: c.AllocationID,
      nodeID: c.NodeID,
      mode: claimMode(c.Mode),
      state: claimState(c.State),
      attempts: c.Attempts || 0,
      lastError: c.LastError || '',
      nextAttempt: c.NextAttempt || 0,
      note: c.Note || '',
    });
  };
  for (const m of [vol.ReadClaims, vol.WriteClaims, vol.PastClaims]) {
    Object.values(m || {}).forEach(add);
  }
  return [...rows.values()];
}

// volumeKey names a volume in mergeRows' set.
export const volumeKey = (ns, id) => `${ns}\u0000${id}`;

// mergeRows takes the claims of a fresh read of some volumes (read maps
// each one's volumeKey to the index the read saw it at: its modify index,
// or Infinity for a volume the read found gone): their rows are replaced,
// and a row the read no longer lists is kept as freed (the read came after
// its release ended). A row newer than the read (an event that arrived
// while the read was on its way) stays as it is: the read is older news.
// Rows of other volumes stay as they are.
export function mergeRows(prev, fresh, read) {
  const out = new Map(fresh.map((r) => [key(r.namespace, r.volumeID, r.allocID), r]));
  for (const r of prev) {
    const k = key(r.namespace, r.volumeID, r.allocID);
    const vk = volumeKey(r.namespace, r.volumeID);
    if (!read.has(vk)) {
      if (!out.has(k)) out.set(k, r);
    } else if ((r.index || 0) > read.get(vk)) {
      out.set(k, r);
    } else if (!out.has(k)) {
      out.set(k, { ...r, state: FREED, lastError: '', nextAttempt: 0 });
    }
  }
  return sortRows([...out.values()]);
}

// applyClaimEvent returns the rows after a claim event (state.CSIClaimEvent
// as its payload); accept says whether the claim is one the view shows.
export function applyClaimEvent(rows, ev, accept) {
  const p = ev.Payload;
  if (ev.Topic !== 'CSIClaim' || !p || !accept(p)) return rows;
  const k = key(p.Namespace, p.VolumeID, p.AllocationID);
  const row = {
    index: ev.Index || 0,
    namespace: p.Namespace,
    volumeID: p.VolumeID,
    allocID: p.AllocationID,
    nodeID: p.NodeID,
    mode: claimMode(p.Mode),
    state: ev.Type === 'ClaimFreed' ? FREED : claimState(p.State),
    attempts: p.Attempts || 0,
    lastError: ev.Type === 'ClaimFreed' ? '' : p.LastError || '',
    nextAttempt: ev.Type === 'ClaimFreed' ? 0 : p.NextAttempt || 0,
    note: p.Note || '',
  };
  const others = rows.filter((r) => key(r.namespace, r.volumeID, r.allocID) !== k);
  return sortRows([...others, row]);
}

function sortRows(rows) {
  return rows.sort((a, b) => a.volumeID.localeCompare(b.volumeID) || a.allocID.localeCompare(b.allocID));
}

// perAllocVolumeID is the volume a group's volume request means for an
// allocation: with per_alloc, the source followed by the allocation's
// index, "source[N]", the index taken from its name "job.group[N]" (as structs.VolumeIDForAlloc).
export function perAllocVolumeID(req, allocName) {
  const name = allocName || '';
  const i = name.lastIndexOf('[');
  if (!req.PerAlloc || i < 0 || !name.endsWith(']')) return req.Source;
  return req.Source + name.slice(i);
}
