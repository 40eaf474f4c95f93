import { Loading, Status, Table, shortID, time } from '../common.jsx';
import { useBlocking } from '../hooks.js';

// NodesPage lists the client nodes: status, the plugins they run, and
// their drain when the agent reports one.
export function NodesPage() {
  const nodes = useBlocking('/v1/nodes', {});
  const withDrain = (nodes.data || []).some((n) => 'Drain' in n || 'DrainStrategy' in n);
  return (
    <>
      <h1>Nodes</h1>
      <Loading state={nodes} what="nodes" />
      {nodes.data && (
        <Table
          caption="Client nodes"
          head={['ID', 'Name', 'Datacenter', 'Address', 'Status', ...(withDrain ? ['Drain'] : []), 'Controller plugins', 'Node plugins', 'Last heartbeat']}
          empty="No client nodes"
          rows={nodes.data.map((n) => (
            <tr key={n.ID}>
              <td title={n.ID}>{shortID(n.ID)}</td>
              <td>{n.Name}</td>
              <td>{n.Datacenter}</td>
              <td>{n.Address}</td>
              <td><Status value={n.Status} />{n.StatusDescription && <small> ({n.StatusDescription})</small>}</td>
              {withDrain && <td>{n.Drain || n.DrainStrategy ? 'draining' : 'no'}</td>}
              <td>{(n.CSIControllerPlugins || []).map((p) => <a href={`#/plugins/${encodeURIComponent(p)}`}>{p} </a>)}</td>
              <td>{(n.CSINodePlugins || []).map((p) => <a href={`#/plugins/${encodeURIComponent(p)}`}>{p} </a>)}</td>
              <td>{time(n.LastHeartbeat)}</td>
            </tr>
          ))}
        />
      )}
    </>
  );
}
