import { pathID } from '../api.js';
import { Loading, Pairs, Status, Table, ratio, shortID, time } from '../common.jsx';
import { useBlocking } from '../hooks.js';

export function PluginsPage() {
  const plugins = useBlocking('/v1/plugins', { type: 'csi' });
  return (
    <>
      <h1>Plugins</h1>
      <Loading state={plugins} what="plugins" />
      {plugins.data && (
        <Table
          caption="CSI plugins"
          head={['ID', 'Provider', 'Version', 'Controllers healthy', 'Nodes healthy']}
          empty="No plugins: plugins appear when client nodes run them"
          rows={plugins.data.map((p) => (
            <tr key={p.ID}>
              <td><a href={`#/plugins/${pathID(p.ID)}`}>{p.ID}</a></td>
              <td>{p.Provider}</td>
              <td>{p.Version}</td>
              <td>{p.ControllerRequired ? ratio(p.ControllersHealthy, p.ControllersExpected) : 'not required'}</td>
              <td>{ratio(p.NodesHealthy, p.NodesExpected)}</td>
            </tr>
          ))}
        />
      )}
    </>
  );
}

// PluginPage shows a plugin's counts and each of its instances: which node
// runs it, whether it is healthy, and why not.
export function PluginPage({ id }) {
  const plugin = useBlocking(`/v1/plugin/csi/${pathID(id)}`, {}, id);
  const p = plugin.data;
  const instances = (kind, m) => Object.entries(m || {}).sort(([a], [b]) => a.localeCompare(b)).map(([node, info]) => (
    <tr key={`${kind}/${node}`}>
      <td>{kind}</td>
      <td>{shortID(node)}</td>
      <td><Status value={info.Healthy ? 'healthy' : 'unhealthy'} /></td>
      <td class="wrap">{info.HealthDescription}</td>
      <td>{info.ProviderVersion}</td>
      <td>{time(info.UpdateTime)}</td>
    </tr>
  ));
  return (
    <>
      <h1>Plugin {id}</h1>
      <Loading state={plugin} what={`plugin ${id}`} />
      {p && (
        <>
          <Pairs
            label="Plugin"
            pairs={[
              ['Provider', p.Provider], ['Version', p.Version],
              ['Controllers healthy', p.ControllerRequired ? ratio(p.ControllersHealthy, p.ControllersExpected) : 'not required'],
              ['Nodes healthy', ratio(p.NodesHealthy, p.NodesExpected)],
            ]}
          />
          <Table
            caption="Instances"
            head={['Type', 'Node', 'Health', 'Reason', 'Version', 'Updated']}
            rows={[...instances('controller', p.Controllers), ...instances('node', p.Nodes)]}
          />
          <p><a href={`#/volumes?plugin=${encodeURIComponent(id)}`}>Volumes of this plugin</a></p>
        </>
      )}
    </>
  );
}
