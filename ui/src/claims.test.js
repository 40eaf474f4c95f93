import { describe, expect, it } from 'vitest';
import { parseStreamLines } from './api.js';
import { FREED, applyClaimEvent, claimRows, mergeRows, perAllocVolumeID, volumeKey } from './claims.js';

const vol = {
  ID: 'vol[0]', Namespace: 'default',
  WriteClaims: { a1: { AllocationID: 'a1', NodeID: 'n1', Mode: 1, State: 0 } },
  PastClaims: { a2: { AllocationID: 'a2', NodeID: 'n1', Mode: 0, State: 5, Attempts: 2, LastError: 'busy' } },
};

describe('claims', () => {
  it('lists a volume\'s claims, past ones with their release state', () => {
    expect(claimRows(vol).map((r) => [r.allocID, r.mode, r.state, r.attempts])).toEqual([
      ['a1', 'write', 'taken', 0],
      ['a2', 'read', 'waiting-for-client', 2],
    ]);
  });

  it('follows claim events, keeping a freed claim as freed', () => {
    let rows = claimRows(vol);
    const ev = (Type, State, AllocationID = 'a1') => ({
      Topic: 'CSIClaim', Type, Payload: { Namespace: 'default', VolumeID: 'vol[0]', AllocationID, NodeID: 'n1', Mode: 'write', State },
    });
    rows = applyClaimEvent(rows, ev('ClaimReleasing', 'unpublishing'), () => true);
    expect(rows.find((r) => r.allocID === 'a1').state).toBe('unpublishing');
    rows = applyClaimEvent(rows, ev('ClaimFreed', 'ready-to-free'), () => true);
    expect(rows.find((r) => r.allocID === 'a1').state).toBe(FREED);
    // Claims the view does not show are left out.
    rows = applyClaimEvent(rows, ev('ClaimTaken', 'taken', 'other'), (p) => p.AllocationID !== 'other');
    expect(rows.map((r) => r.allocID)).toEqual(['a1', 'a2']);
  });

  it('marks as freed what a fresh read of the volume no longer lists', () => {
    const other = { namespace: 'default', volumeID: 'vol[1]', allocID: 'a9', state: 'taken' };
    const rows = mergeRows([...claimRows(vol), other], [], new Map([[volumeKey('default', 'vol[0]'), 10]]));
    expect(rows.map((r) => [r.volumeID, r.allocID, r.state])).toEqual([
      ['vol[0]', 'a1', FREED], ['vol[0]', 'a2', FREED], ['vol[1]', 'a9', 'taken'],
    ]);
  });

  it('keeps what an event told while an older read was on its way', () => {
    // The read saw the volume at index 15, before the claim taken at 20
    // (its event arrived during the read); a read at 25 is newer.
    const taken = applyClaimEvent([], {
      Index: 20, Topic: 'CSIClaim', Type: 'ClaimTaken',
      Payload: { Namespace: 'default', VolumeID: 'vol[0]', AllocationID: 'a3', NodeID: 'n1', Mode: 'write', State: 'taken' },
    }, () => true);
    const stale = mergeRows(taken, [], new Map([[volumeKey('default', 'vol[0]'), 15]]));
    expect(stale.map((r) => [r.allocID, r.state])).toEqual([['a3', 'taken']]);
    const newer = mergeRows(taken, [], new Map([[volumeKey('default', 'vol[0]'), 25]]));
    expect(newer.map((r) => [r.allocID, r.state])).toEqual([['a3', FREED]]);
    // A stale read that still lists a claim an event freed leaves it freed.
    const freed = applyClaimEvent(taken, {
      Index: 30, Topic: 'CSIClaim', Type: 'ClaimFreed',
      Payload: { Namespace: 'default', VolumeID: 'vol[0]', AllocationID: 'a3', NodeID: 'n1', Mode: 'write', State: 'ready-to-free' },
    }, () => true);
    const listed = claimRows({ ID: 'vol[0]', Namespace: 'default', ModifyIndex: 20,
      WriteClaims: { a3: { AllocationID: 'a3', NodeID: 'n1', Mode: 1, State: 0 } } });
    const kept = mergeRows(freed, listed, new Map([[volumeKey('default', 'vol[0]'), 20]]));
    expect(kept.map((r) => [r.allocID, r.state])).toEqual([['a3', FREED]]);
  });

  it('computes per_alloc volume IDs as the servers do', () => {
    expect(perAllocVolumeID({ Source: 'vol', PerAlloc: true }, 'web.app[2]')).toBe('vol[2]');
    expect(perAllocVolumeID({ Source: 'vol', PerAlloc: false }, 'web.app[2]')).toBe('vol');
  });
});

describe('event stream', () => {
  it('reads both framings, skips heartbeats and keeps an unfinished line', () => {
    const text = '{"Index":3,"Topic":"CSIClaim","Type":"ClaimTaken"}\n{}\n'
      + '{"Index":4,"Events":[{"Index":4,"Topic":"CSIVolume"},{"Index":4,"Topic":"CSIClaim"}]}\n{"Ind';
    const { events, rest, error } = parseStreamLines(text);
    expect(events.map((e) => [e.Index, e.Topic])).toEqual([[3, 'CSIClaim'], [4, 'CSIVolume'], [4, 'CSIClaim']]);
    expect(rest).toBe('{"Ind');
    expect(error).toBe('');
  });

  it('stops at the line that ends the stream', () => {
    const { events, error } = parseStreamLines('{"Error":"subscribe again"}\n{"Index":5,"Topic":"CSIClaim"}\n');
    expect(events).toEqual([]);
    expect(error).toBe('subscribe again');
  });
});
