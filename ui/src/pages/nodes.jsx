import { useEffect, useState } from 'preact/hooks';
import { get, pathID } from '../api.js';
import { Loading, Pairs, Status, Table, shortID, time } from '../common.jsx';
import { drainProgress, drainText, eligibility, lastDrainText } from '../drain.js';
import { useBlocking } from '../hooks.js';

const pluginLinks = (ids) => ids.map((p) => <a href={`#/plugins/${pathID(p)}`}>{p} </a>);

// NodesPage lists the client nodes: status, scheduling eligibility, drain,
// the plugins they run.
export function NodesPage() {
  const nodes = useBlocking('/v1/nodes', {});
  return (
    <>
      <h1>Nodes</h1>
      <Loading state={nodes} what="nodes" />
      {nodes.data && (
        <Table
          caption="Client nodes"
          head={['ID', 'Name', 'Datacenter', 'Address', 'Status', 'Drain', 'Eligibility', 'Last drain', 'Controller plugins', 'Node plugins', 'Last heartbeat']}
          empty="No client nodes"
          attrs={{ 'data-nodes': '' }}
          rows={nodes.data.map((n) => (
            <tr key={n.ID} data-drain={String(!!n.Drain)} data-eligibility={eligibility(n.SchedulingEligibility)}>
              <td title={n.ID}><a href={`#/nodes/${pathID(n.ID)}`}>{shortID(n.ID)}</a></td>
              <td>{n.Name}</td>
              <td>{n.Datacenter}</td>
              <td>{n.Address}</td>
              <td><Status value={n.Status} />{n.StatusDescription && <small> ({n.StatusDescription})</small>}</td>
              <td>{n.Drain ? <Status value="draining" /> : 'false'}</td>
              <td><Status value={eligibility(n.SchedulingEligibility)} /></td>
              <td>{n.LastDrain ? `${n.LastDrain.Status} (${time(n.LastDrain.UpdatedAt)})` : '—'}</td>
              <td>{pluginLinks(n.CSIControllerPlugins || [])}</td>
              <td>{pluginLinks(n.CSINodePlugins || [])}</td>
              <td>{time(n.LastHeartbeat)}</td>
            </tr>
          ))}
        />
      )}
    </>
  );
}

// NodePage shows a node as `volplane node status NODE` does: its drain,
// eligibility and last drain, the plugins it runs and, while it drains,
// what is left on it.
export function NodePage({ id }) {
  const node = useBlocking(`/v1/node/${pathID(id)}`, {}, id);
  const n = node.data;
  return (
    <>
      <h1>Node {n?.Name || shortID(id)}</h1>
      <Loading state={node} what={`node ${id}`} />
      {n && (
        <>
          <Pairs
            label="Node"
            pairs={[
              ['ID', n.ID], ['Name', n.Name], ['Datacenter', n.Datacenter], ['Address', n.Address],
              ['Status', <Status value={n.Status} />], ['Status description', n.StatusDescription],
              ['Drain', drainText(n.DrainStrategy)],
              ['Eligibility', <Status value={eligibility(n.SchedulingEligibility)} />],
              ['Last drain', lastDrainText(n.LastDrain)],
              ['Last heartbeat', time(n.LastHeartbeat)],
            ]}
          />
          {n.DrainStrategy && <DrainProgress nodeID={n.ID} />}
          <Table
            caption="CSI plugins"
            head={['Plugin', 'Type', 'Healthy', 'Health description']}
            empty="No CSI plugins"
            rows={[['controller', n.CSIControllerPlugins], ['node', n.CSINodePlugins]].flatMap(([type, m]) =>
              Object.entries(m || {}).sort(([x], [y]) => x.localeCompare(y)).map(([p, info]) => (
                <tr key={`${type}-${p}`}>
                  <td><a href={`#/plugins/${pathID(p)}`}>{p}</a></td>
                  <td>{type}</td>
                  <td><Status value={!!info?.Healthy} /></td>
                  <td class="wrap">{info?.HealthDescription}</td>
                </tr>
              )))}
          />
        </>
      )}
    </>
  );
}

// DrainProgress is what is left on a draining node, as node status shows
// it: the allocations that still run or hold volume claims there. It reads
// the allocations (followed with a blocking query) and, each time they or
// the node's volumes change, the claims of those volumes.
function DrainProgress({ nodeID }) {
  const allocs = useBlocking('/v1/allocations', { namespace: '*' }, nodeID);
  const vols = useBlocking('/v1/volumes', { type: 'csi', namespace: '*', node_id: nodeID }, nodeID);
  const [volumes, setVolumes] = useState({ list: null, error: null });
  useEffect(() => {
    if (!vols.data) return undefined;
    const ctrl = new AbortController();
    Promise.all(vols.data.map((v) => get(`/v1/volume/csi/${pathID(v.ID)}`, { namespace: v.Namespace }, ctrl.signal)))
      .then((list) => setVolumes({ list, error: null }))
      .catch((error) => !ctrl.signal.aborted && setVolumes((s) => ({ ...s, error })));
    return () => ctrl.abort();
  }, [vols.data, allocs.data]);
  const p = allocs.data && volumes.list ? drainProgress(nodeID, allocs.data, volumes.list) : null;
  return (
    <section aria-label="Drain progress">
      <h2>Drain progress</h2>
      <Loading state={allocs} what="the node's allocations" />
      <Loading state={vols} what="the node's volumes" />
      {volumes.error && <p class="error" role="alert">Could not read the node's volumes: {volumes.error.message}</p>}
      {p && (
        <>
          <p data-drain-left={p.allocs.length}>{p.allocs.length} allocations and {p.claimCount} volume claims left on the node</p>
          <Table
            caption="Allocations left on the node"
            head={['Alloc ID', 'Job ID', 'Name', 'Desired', 'Status', 'Claims on the node']}
            empty="None: the drain is ending"
            rows={p.allocs.map((a) => (
              <tr key={a.ID}>
                <td><a href={`#/allocations/${pathID(a.ID)}`}>{shortID(a.ID)}</a></td>
                <td><a href={`#/jobs/${pathID(a.Namespace)}/${pathID(a.JobID)}`}>{a.JobID}</a></td>
                <td>{a.Name}</td>
                <td>{a.DesiredStatus}</td>
                <td><Status value={a.ClientStatus} /></td>
                <td class="wrap">{(p.claims[a.ID] || []).join(', ') || 'none'}</td>
              </tr>
            ))}
          />
        </>
      )}
    </section>
  );
}
