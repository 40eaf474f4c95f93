import { useState } from 'preact/hooks';
import { pathID, request } from '../api.js';
import { ClaimsTable } from '../ClaimsTable.jsx';
import { ConfirmButton, Loading, Pairs, Status, Table, ratio, time } from '../common.jsx';
import { useBlocking } from '../hooks.js';

// VolumesPage lists volumes, filtered by namespace and plugin (kept in the
// URL, so a filtered list can be shared).
export function VolumesPage({ query, navigate }) {
  const namespace = query.get('namespace') || 'default';
  const plugin = query.get('plugin') || '';
  const vols = useBlocking('/v1/volumes', { type: 'csi', namespace, plugin_id: plugin }, `${namespace}|${plugin}`);
  const plugins = useBlocking('/v1/plugins', { type: 'csi' });
  const [ns, setNs] = useState(namespace);
  const setFilter = (k, v) => {
    const q = new URLSearchParams(query);
    if (v) q.set(k, v);
    else q.delete(k);
    navigate(`#/volumes?${q}`);
  };
  return (
    <>
      <h1>Volumes</h1>
      <form class="filters" onSubmit={(e) => { e.preventDefault(); setFilter('namespace', ns); }}>
        <label>
          Namespace
          <input name="namespace" value={ns} onInput={(e) => setNs(e.currentTarget.value)} onChange={(e) => setFilter('namespace', e.currentTarget.value)} />
        </label>
        <label>
          Plugin
          <select name="plugin" value={plugin} onChange={(e) => setFilter('plugin', e.currentTarget.value)}>
            <option value="">All plugins</option>
            {(plugins.data || []).map((p) => <option value={p.ID}>{p.ID}</option>)}
          </select>
        </label>
      </form>
      <Loading state={vols} what="volumes" />
      {vols.data && (
        <Table
          caption={`Volumes in namespace ${namespace}${plugin ? ` of plugin ${plugin}` : ''}`}
          head={['ID', 'Name', 'Plugin', 'Schedulable', 'Access mode', 'Readers', 'Writers', 'Being released', 'Controllers', 'Nodes']}
          empty="No volumes"
          rows={vols.data.map((v) => (
            <tr key={v.ID}>
              <td><a href={`#/volumes/${pathID(v.Namespace)}/${pathID(v.ID)}`}>{v.ID}</a></td>
              <td>{v.Name}</td>
              <td><a href={`#/plugins/${pathID(v.PluginID)}`}>{v.PluginID}</a></td>
              <td><Status value={v.Schedulable} /></td>
              <td>{v.AccessMode || '—'}</td>
              <td>{v.CurrentReaders}</td>
              <td>{v.CurrentWriters}</td>
              <td>{v.PastClaims}</td>
              <td>{v.ControllerRequired ? ratio(v.ControllersHealthy, v.ControllersExpected) : 'n/a'}</td>
              <td>{ratio(v.NodesHealthy, v.NodesExpected)}</td>
            </tr>
          ))}
        />
      )}
    </>
  );
}

// VolumePage shows one volume: its capabilities, topology and every claim,
// live; detach (per node) and deregister ask for confirmation.
export function VolumePage({ namespace, id, navigate }) {
  const vol = useBlocking(`/v1/volume/csi/${pathID(id)}`, { namespace }, `${namespace}|${id}`);
  const [force, setForce] = useState(false);
  const v = vol.data;
  const claimNodes = v ? [...new Set(Object.values({ ...v.ReadClaims, ...v.WriteClaims, ...v.PastClaims }).map((c) => c.NodeID))] : [];
  const detach = (node) => async () => {
    const { data } = await request('DELETE', `/v1/volume/csi/${pathID(id)}/detach`, { query: { namespace, node } });
    return (data?.Steps || []).join('\n') || 'Detached.';
  };
  const deregister = async () => {
    const { data } = await request('DELETE', `/v1/volume/csi/${pathID(id)}`, { query: { namespace, force: force ? 'true' : '' } });
    const warnings = [].concat(data?.Warnings || []).join('\n');
    setTimeout(() => navigate(`#/volumes?namespace=${encodeURIComponent(namespace)}`), 1500);
    return `Deregistered volume ${id}.${warnings ? `\n${warnings}` : ''}`;
  };
  return (
    <>
      <h1>Volume {id}</h1>
      <Loading state={vol} what={`volume ${id}`} />
      {v && (
        <>
          <Pairs
            label="Volume"
            pairs={[
              ['Namespace', v.Namespace], ['Name', v.Name], ['External ID', v.ExternalID],
              ['Plugin', <a href={`#/plugins/${pathID(v.PluginID)}`}>{v.PluginID}</a>],
              ['Provider', `${v.Provider} ${v.ProviderVersion || ''}`], ['Schedulable', <Status value={v.Schedulable} />],
              ['Access mode', v.AccessMode], ['Attachment mode', v.AttachmentMode],
              ['Controllers healthy', v.ControllerRequired ? ratio(v.ControllersHealthy, v.ControllersExpected) : 'not required'],
              ['Nodes healthy', ratio(v.NodesHealthy, v.NodesExpected)],
              ['Capacity', v.Capacity ? `${v.Capacity} bytes` : ''], ['Created', time(v.CreateTime)], ['Modified', time(v.ModifyTime)],
            ]}
          />
          <Table
            caption="Capabilities"
            head={['Access mode', 'Attachment mode']}
            rows={(v.RequestedCapabilities || []).map((c) => <tr><td>{c.AccessMode}</td><td>{c.AttachmentMode}</td></tr>)}
          />
          <Table
            caption="Topology"
            head={['Segments']}
            empty="Accessible from every node"
            rows={(v.Topologies || []).map((t) => (
              <tr><td>{Object.entries(t?.Segments || {}).map(([k, x]) => `${k}=${x}`).join(', ')}</td></tr>
            ))}
          />
          <h2>Claims</h2>
          <ClaimsTable
            volumes={[{ namespace: v.Namespace, id: v.ID }]}
            caption={`Claims on ${v.ID}`}
          />
          <h2>Actions</h2>
          <div class="actions">
            {claimNodes.map((node) => (
              <ConfirmButton label={`Detach from node ${node.slice(0, 8)}`} title={`Detach volume ${id} from node ${node}?`} action={detach(node)}>
                <p>The release of the volume's claims on this node runs now: node unpublish, controller unpublish, then the claims are freed. A claim whose allocation still runs is refused.</p>
              </ConfirmButton>
            ))}
            <ConfirmButton label="Deregister" title={`Deregister volume ${id}?`} action={deregister} danger>
              <p>The volume is removed from volplane; it stays in the storage provider.</p>
              <label class="check">
                <input type="checkbox" checked={force} onChange={(e) => setForce(e.currentTarget.checked)} />
                Force: drop the claims of allocations that are terminal or gone, without unpublishing anything
              </label>
            </ConfirmButton>
          </div>
        </>
      )}
    </>
  );
}
