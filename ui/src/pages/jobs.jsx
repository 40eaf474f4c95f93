import { pathID, request } from '../api.js';
import { ClaimsTable } from '../ClaimsTable.jsx';
import { perAllocVolumeID } from '../claims.js';
import { ConfirmButton, Loading, Pairs, Status, Table, shortID, time } from '../common.jsx';
import { useBlocking } from '../hooks.js';

export function JobsPage() {
  const jobs = useBlocking('/v1/jobs', {});
  return (
    <>
      <h1>Jobs</h1>
      <Loading state={jobs} what="jobs" />
      {jobs.data && (
        <Table
          caption="Jobs"
          head={['ID', 'Namespace', 'Type', 'Status', 'Version', 'Placed']}
          empty="No jobs"
          rows={jobs.data.map((j) => (
            <tr key={`${j.Namespace}/${j.ID}`}>
              <td><a href={`#/jobs/${pathID(j.Namespace)}/${pathID(j.ID)}`}>{j.ID}</a></td>
              <td>{j.Namespace}</td>
              <td>{j.Type}</td>
              <td><Status value={j.Stop ? 'stopped' : j.Status} /></td>
              <td>{j.Version}</td>
              <td>{`${j.Placed}/${j.Desired}`}</td>
            </tr>
          ))}
        />
      )}
    </>
  );
}

// JobPage shows a job's placement per group and why anything is blocked,
// its allocations, and the claims they hold, live; stopping it asks first.
export function JobPage({ namespace, id }) {
  const job = useBlocking(`/v1/job/${pathID(id)}`, { namespace }, `${namespace}|${id}`);
  const allocs = useBlocking(`/v1/job/${pathID(id)}/allocations`, { namespace }, `${namespace}|${id}`);
  const j = job.data;
  const list = (allocs.data || []).slice().sort((a, b) => a.Name.localeCompare(b.Name) || b.CreateIndex - a.CreateIndex);
  // The volumes the allocations use, as the servers compute them.
  const volumes = new Map();
  const allocIDs = new Set(list.map((a) => a.ID));
  if (j) {
    for (const a of list) {
      const tg = (j.TaskGroups || []).find((g) => g.Name === a.TaskGroup);
      for (const req of Object.values(tg?.Volumes || {})) {
        if (req.Type !== 'csi') continue;
        const vid = perAllocVolumeID(req, a.Name);
        volumes.set(vid, { namespace: a.Namespace || namespace, id: vid });
      }
    }
  }
  const stop = async () => {
    const { data } = await request('DELETE', `/v1/job/${pathID(id)}`, { query: { namespace } });
    return `Job ${id} stopped (index ${data?.Index ?? ''}). Its claims are released once the clients report the tasks stopped.`;
  };
  return (
    <>
      <h1>Job {id}</h1>
      <Loading state={job} what={`job ${id}`} />
      {j && (
        <>
          <Pairs
            label="Job"
            pairs={[
              ['Namespace', j.Namespace], ['Type', j.Type], ['Status', <Status value={j.Stop ? 'stopped' : j.Status} />],
              ['Version', j.Version], ['Submitted', time(j.SubmitTime)],
            ]}
          />
          <Table
            caption="Placement"
            head={['Group', 'Desired', 'Placed', 'Blocked because']}
            rows={(j.TaskGroups || []).map((tg) => {
              const p = (j.Placement || {})[tg.Name];
              return (
                <tr key={tg.Name}>
                  <td>{tg.Name}</td>
                  <td>{p ? p.Desired : tg.Count}</td>
                  <td>{p ? p.Placed : 'pending'}</td>
                  <td class="wrap">
                    {p && p.Blocked && p.Blocked.length > 0 ? <ul>{p.Blocked.map((r) => <li>{r}</li>)}</ul> : '—'}
                    {p && p.NextPlacement ? <p>Next placement at {time(p.NextPlacement)}</p> : null}
                  </td>
                </tr>
              );
            })}
          />
          <Table
            caption="Allocations"
            head={['ID', 'Name', 'Node', 'Desired', 'Status', 'Description', 'Volumes']}
            empty="No allocations"
            rows={list.map((a) => (
              <tr key={a.ID}>
                <td><a href={`#/allocations/${pathID(a.ID)}`}>{shortID(a.ID)}</a></td>
                <td>{a.Name}</td>
                <td>{shortID(a.NodeID)}</td>
                <td>{a.DesiredStatus}</td>
                <td><Status value={a.ClientStatus} /></td>
                <td class="wrap">{a.ClientDescription}</td>
                <td>{Object.entries(a.VolumeStates || {}).map(([alias, s]) => `${alias}: ${s.Step}`).join(', ')}</td>
              </tr>
            ))}
          />
          <h2>Claims</h2>
          <ClaimsTable
            volumes={[...volumes.values()]}
            accept={(c) => allocIDs.has(c.AllocationID)}
            acceptKey={[...allocIDs].sort().join('|')}
            caption={`Claims of job ${id}`}
          />
          <div class="actions">
            <ConfirmButton label="Stop job" title={`Stop job ${id}?`} action={stop} danger disabled={j.Stop}>
              <p>Its allocations are stopped and, once their clients report them done, the volumes they claimed are released.</p>
            </ConfirmButton>
          </div>
        </>
      )}
    </>
  );
}
