import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { getToken, setToken } from './api.js';
import { AllocPage } from './pages/alloc.jsx';
import { JobPage, JobsPage } from './pages/jobs.jsx';
import { NodePage, NodesPage } from './pages/nodes.jsx';
import { PluginPage, PluginsPage } from './pages/plugins.jsx';
import { VolumePage, VolumesPage } from './pages/volumes.jsx';
import './style.css';

// The pages live in the URL's fragment (#/volumes, #/volumes/ns/id, ...),
// so the agent serves index.html for all of them.
function parseHash(hash) {
  const [path, qs] = (hash.replace(/^#/, '') || '/volumes').split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, query: new URLSearchParams(qs || '') };
}

function route({ parts, query }, navigate) {
  const [section, a, b] = parts;
  switch (section) {
    case 'volumes':
      return a && b ? <VolumePage namespace={a} id={b} navigate={navigate} /> : <VolumesPage query={query} navigate={navigate} />;
    case 'plugins':
      return a ? <PluginPage id={a} /> : <PluginsPage />;
    case 'nodes':
      return a ? <NodePage id={a} /> : <NodesPage />;
    case 'jobs':
      return a && b ? <JobPage namespace={a} id={b} /> : <JobsPage />;
    case 'allocations':
      return a ? <AllocPage id={a} /> : <JobsPage />;
    default:
      return <p role="alert">No page at {parts.join('/')}. <a href="#/volumes">Volumes</a></p>;
  }
}

const SECTIONS = [['volumes', 'Volumes'], ['plugins', 'Plugins'], ['nodes', 'Nodes'], ['jobs', 'Jobs']];

// TokenForm keeps the ACL token in the browser's local storage; every
// request sends it as X-Nomad-Token.
function TokenForm() {
  const [value, setValue] = useState(getToken());
  const [saved, setSaved] = useState(getToken() !== '');
  return (
    <form class="token" onSubmit={(e) => { e.preventDefault(); setToken(value.trim()); setSaved(value.trim() !== ''); }}>
      <label>
        ACL token
        <input type="password" autocomplete="off" value={value} placeholder="none" onInput={(e) => setValue(e.currentTarget.value)} />
      </label>
      <button type="submit">{saved ? 'Update' : 'Use'}</button>
      {saved && <button type="button" onClick={() => { setToken(''); setValue(''); setSaved(false); }}>Clear</button>}
    </form>
  );
}

function App() {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const f = () => setHash(window.location.hash);
    window.addEventListener('hashchange', f);
    return () => window.removeEventListener('hashchange', f);
  }, []);
  const r = parseHash(hash);
  const navigate = (h) => {
    window.location.hash = h;
  };
  useEffect(() => {
    document.title = `${r.parts.join(' / ') || 'volumes'} · volplane`;
  }, [hash]);
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById('main').focus(); }}>Skip to content</a>
      <header>
        <a class="brand" href="#/volumes">volplane</a>
        <nav aria-label="Main">
          {SECTIONS.map(([s, label]) => (
            <a href={`#/${s}`} aria-current={r.parts[0] === s ? 'page' : undefined}>{label}</a>
          ))}
        </nav>
        <TokenForm />
      </header>
      <main id="main" tabIndex={-1}>{route(r, navigate)}</main>
    </>
  );
}

render(<App />, document.getElementById('app'));
