import { describe, expect, it } from 'vitest';
import { drainProgress, drainText, eligibility, lastDrainText, taskEvents } from './drain.js';

describe('node drain', () => {
  it('shows eligibility, an unset one as eligible', () => {
    expect(eligibility('')).toBe('eligible');
    expect(eligibility(undefined)).toBe('eligible');
    expect(eligibility('ineligible')).toBe('ineligible');
  });

  it('describes a drain as node status does', () => {
    const started = '2026-11-28T00:00:00Z';
    expect(drainText(null)).toBe('false');
    expect(drainText({ Deadline: 60e9, ForceDeadline: '2026-11-28T00:01:00Z', StartedAt: started, IgnoreSystemJobs: false }))
      .toBe('true (started 2026-11-28T00:00:00Z, deadline 2026-11-28T00:01:00Z)');
    expect(drainText({ Deadline: 0, ForceDeadline: '0001-01-01T00:00:00Z', StartedAt: started, IgnoreSystemJobs: true }))
      .toBe('true (started 2026-11-28T00:00:00Z, no deadline, ignoring system jobs)');
    expect(drainText({ Deadline: -1, StartedAt: started })).toBe('true (started 2026-11-28T00:00:00Z, forced)');
  });

  it('describes the last drain with its message', () => {
    expect(lastDrainText(null)).toBe('');
    expect(lastDrainText({
      Status: 'complete', StartedAt: '2026-11-28T00:00:00Z', UpdatedAt: '2026-11-28T00:00:05Z', Meta: { message: 'kernel "upgrade"' },
    })).toBe('complete (started 2026-11-28T00:00:00Z, updated 2026-11-28T00:00:05Z): "kernel \\"upgrade\\""');
  });

  it('lists what is left on the node: running allocations and those holding claims there', () => {
    const allocs = [
      { ID: 'b2', Name: 'web.app[1]', NodeID: 'n1', ClientStatus: 'running' },
      { ID: 'a1', Name: 'web.app[0]', NodeID: 'n1', ClientStatus: 'complete' },
      { ID: 'c3', Name: 'web.app[2]', NodeID: 'n1', ClientStatus: 'complete' },
      { ID: 'd4', Name: 'web.app[3]', NodeID: 'n2', ClientStatus: 'running' },
    ];
    const volumes = [
      { ID: 'vol[0]', PastClaims: { a1: { NodeID: 'n1', State: 4 } }, WriteClaims: { a1: { NodeID: 'n1', State: 0 } } },
      { ID: 'vol[1]', WriteClaims: { b2: { NodeID: 'n1', State: 0 } }, ReadClaims: { d4: { NodeID: 'n2', State: 0 } } },
    ];
    const p = drainProgress('n1', allocs, volumes);
    expect(p.allocs.map((a) => a.ID)).toEqual(['a1', 'b2']);
    expect(p.claims).toEqual({ a1: ['vol[0] (unpublishing)'], b2: ['vol[1] (taken)'] });
    expect(p.claimCount).toBe(2);
    expect(drainProgress('n3', allocs, volumes)).toEqual({ allocs: [], claims: {}, claimCount: 0 });
  });
});

describe('task events', () => {
  it('lists the newest first, with the display message else the message', () => {
    const events = taskEvents({
      Events: [
        { Type: 'Received', Time: 1e18, Message: '', DisplayMessage: 'Task received by client' },
        { Type: 'Started', Time: 3e18, Message: '', DisplayMessage: 'Task started by client' },
        { Type: 'Driver Failure', Time: 2e18, Message: 'no such file', DisplayMessage: '' },
        null,
      ],
    });
    expect(events.map((e) => [e.type, e.message])).toEqual([
      ['Started', 'Task started by client'], ['Driver Failure', 'no such file'], ['Received', 'Task received by client'],
    ]);
    expect(taskEvents(undefined)).toEqual([]);
    expect(taskEvents({ Events: null })).toEqual([]);
  });
});
