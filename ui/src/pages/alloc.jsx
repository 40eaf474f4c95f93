import { useEffect, useState } from 'preact/hooks';
import { logTail, pathID } from '../api.js';
import { Loading, Pairs, Status, Table, shortID, time } from '../common.jsx';
import { taskEvents } from '../drain.js';
import { useBlocking } from '../hooks.js';

// TAIL_BYTES is how much of the end of each log the page shows.
const TAIL_BYTES = 4096;

// AllocPage shows an allocation: its volumes with their step, its tasks'
// states and recent events, and the tail of each task's stdout and stderr.
export function AllocPage({ id }) {
  const alloc = useBlocking(`/v1/allocation/${pathID(id)}`, {}, id);
  const a = alloc.data;
  return (
    <>
      <h1>Allocation {shortID(id)}</h1>
      <Loading state={alloc} what={`allocation ${id}`} />
      {a && (
        <>
          <Pairs
            label="Allocation"
            pairs={[
              ['ID', a.ID], ['Name', a.Name],
              ['Job', <a href={`#/jobs/${pathID(a.Namespace)}/${pathID(a.JobID)}`}>{a.JobID}</a>],
              ['Node', a.NodeID], ['Desired status', a.DesiredStatus],
              ['Client status', <Status value={a.ClientStatus} />], ['Client description', a.ClientDescription],
              ['Created', time(a.CreateTime)], ['Modified', time(a.ModifyTime)],
            ]}
          />
          <Table
            caption="Volumes"
            head={['Alias', 'Volume', 'Step', 'Waiting for', 'Attempts', 'Next retry']}
            empty="No volumes reported yet"
            rows={Object.entries(a.VolumeStates || {}).sort(([x], [y]) => x.localeCompare(y)).map(([alias, s]) => (
              <tr key={alias}>
                <td>{alias}</td>
                <td><a href={`#/volumes/${pathID(a.Namespace)}/${pathID(s.VolumeID)}`}>{s.VolumeID}</a></td>
                <td><Status value={s.Step} /></td>
                <td class="wrap">{s.Waiting}</td>
                <td>{s.Attempts}</td>
                <td>{time(s.NextRetry)}</td>
              </tr>
            ))}
          />
          <Table
            caption="Tasks"
            head={['Task', 'State', 'Failed', 'Started', 'Finished', 'Description']}
            empty="No tasks reported yet"
            rows={Object.entries(a.TaskStates || {}).sort(([x], [y]) => x.localeCompare(y)).map(([name, t]) => (
              <tr key={name}>
                <td>{name}</td>
                <td><Status value={t.State} /></td>
                <td>{t.Failed ? 'yes' : 'no'}</td>
                <td>{time(t.StartedAt)}</td>
                <td>{time(t.FinishedAt)}</td>
                <td class="wrap">{t.Description}</td>
              </tr>
            ))}
          />
          {Object.entries(a.TaskStates || {}).sort(([x], [y]) => x.localeCompare(y)).map(([task, t]) => (
            <Table
              key={`events-${task}`}
              caption={`Recent events of task ${task}`}
              head={['Time', 'Type', 'Description']}
              empty="No events yet"
              attrs={{ 'data-events': task }}
              rows={taskEvents(t).map((e, i) => (
                <tr key={i}>
                  <td>{time(e.time)}</td>
                  <td>{e.type}</td>
                  <td class="wrap">{e.message}</td>
                </tr>
              ))}
            />
          ))}
          {Object.keys(a.TaskStates || {}).sort().map((task) => (
            <TaskLogs alloc={a} task={task} key={task} />
          ))}
        </>
      )}
    </>
  );
}

// TaskLogs shows the end of a task's stdout and stderr, read again each
// time the allocation changes.
function TaskLogs({ alloc, task }) {
  const [logs, setLogs] = useState({});
  useEffect(() => {
    const ctrl = new AbortController();
    for (const type of ['stdout', 'stderr']) {
      logTail({ allocID: alloc.ID, namespace: alloc.Namespace, task, type, bytes: TAIL_BYTES, signal: ctrl.signal })
        .then((text) => setLogs((l) => ({ ...l, [type]: { text } })))
        .catch((err) => !ctrl.signal.aborted && setLogs((l) => ({ ...l, [type]: { error: err.message } })));
    }
    return () => ctrl.abort();
  }, [alloc.ID, alloc.ModifyIndex, task]);
  return (
    <section aria-label={`Logs of task ${task}`}>
      <h2>Logs of task {task}</h2>
      {['stdout', 'stderr'].map((type) => (
        <figure>
          <figcaption>{type} (last {TAIL_BYTES} bytes; <code>volplane alloc logs {type === 'stderr' ? '-stderr ' : ''}-f {shortID(alloc.ID)} {task}</code> follows it)</figcaption>
          {logs[type]?.error ? (
            <p class="error" role="alert">Could not read the {type}: {logs[type].error}</p>
          ) : (
            <pre class="log" tabIndex={0} aria-label={`${type} of task ${task}`}>{logs[type]?.text || (logs[type] ? '(empty)' : 'Loading…')}</pre>
          )}
        </figure>
      ))}
    </section>
  );
}
