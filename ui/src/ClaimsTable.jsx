import { useEffect, useState } from 'preact/hooks';
import { get, pathID } from './api.js';
import { applyClaimEvent, claimRows, FREED, mergeRows, volumeKey } from './claims.js';
import { LiveState, Status, Table, shortID, time } from './common.jsx';
import { useEvents } from './hooks.js';

const TOPICS = ['CSIClaim', 'CSIVolume'];

// ClaimsTable shows the claims on volumes (a list of {namespace, id}) that
// accept lets through, with each claim's state, attempts, last error and
// next attempt, kept live from the event stream: every step of a release
// shows as it happens, and a freed claim stays, marked freed. acceptKey
// changes when what accept lets through does (a job's new allocations):
// the claims are read again, since events of claims it refused before it
// knew them are gone.
export function ClaimsTable({ volumes, accept = () => true, acceptKey = '', caption = 'Claims', actions }) {
  const [rows, setRows] = useState([]);
  const [error, setError] = useState(null);
  const wanted = new Set(volumes.map((v) => volumeKey(v.namespace, v.id)));
  const ids = [...wanted].sort().join('|');

  const load = async () => {
    try {
      const fresh = [];
      // The index each volume was read at: claim events that arrive
      // meanwhile are newer than what the read says of their claims.
      const read = new Map();
      for (const v of volumes) {
        try {
          const vol = await get(`/v1/volume/csi/${pathID(v.id)}`, { namespace: v.namespace });
          fresh.push(...claimRows(vol).filter((r) => accept({ AllocationID: r.allocID, VolumeID: r.volumeID })));
          read.set(volumeKey(v.namespace, v.id), vol.ModifyIndex || 0);
        } catch (err) {
          if (err.status !== 404) throw err;
          read.set(volumeKey(v.namespace, v.id), Infinity);
        }
      }
      setRows((prev) => mergeRows(prev, fresh, read));
      setError(null);
    } catch (err) {
      setError(err);
    }
  };
  useEffect(() => {
    load();
  }, [ids, acceptKey]);

  const live = useEvents(TOPICS, (ev) => {
    const p = ev.Payload || {};
    if (ev.Topic === 'CSIClaim') {
      if (!wanted.has(volumeKey(p.Namespace, p.VolumeID))) return;
      setRows((prev) => applyClaimEvent(prev, ev, accept));
    } else if (ev.Type === 'VolumeUpdated' && wanted.has(volumeKey(p.Namespace, p.ID))) {
      // The volume as it is after the write: its claims are the truth.
      const fresh = claimRows(p).filter((r) => accept({ AllocationID: r.allocID, VolumeID: r.volumeID }));
      setRows((prev) => mergeRows(prev, fresh, new Map([[volumeKey(p.Namespace, p.ID), p.ModifyIndex || ev.Index || 0]])));
    }
  }, load);

  return (
    <section>
      <LiveState state={live} />
      {error && <p class="error" role="alert">Could not read the claims: {error.message}</p>}
      <Table
        attrs={{ 'data-claims': '' }}
        caption={caption}
        head={['Volume', 'Allocation', 'Node', 'Mode', 'State', 'Attempts', 'Last error', 'Next attempt', ...(actions ? ['Actions'] : [])]}
        empty="No claims"
        rows={rows.map((r) => (
          <tr data-state={r.state} key={`${r.volumeID}/${r.allocID}`}>
            <td><a href={`#/volumes/${pathID(r.namespace)}/${pathID(r.volumeID)}`}>{r.volumeID}</a></td>
            <td><a href={`#/allocations/${pathID(r.allocID)}`}>{shortID(r.allocID)}</a></td>
            <td>{shortID(r.nodeID)}</td>
            <td>{r.mode}</td>
            <td><Status value={r.state} />{r.note && <small> ({r.note})</small>}</td>
            <td>{r.attempts}</td>
            <td class="wrap">{r.lastError}</td>
            <td>{r.state === FREED ? '' : time(r.nextAttempt)}</td>
            {actions && <td>{r.state === FREED ? '' : actions(r)}</td>}
          </tr>
        ))}
      />
    </section>
  );
}
