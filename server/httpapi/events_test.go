package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/server/httpapi"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// noBackend answers every RPC with an error: the event stream and the
// metrics make none.
type noBackend struct{}

func (noBackend) RPC(method string, _, _ any) error {
	return structs.NewError(structs.ErrCodeInternal, "unexpected RPC %s", method)
}

// streamLine is one line of the stream: an event, a heartbeat (all empty)
// or the last line of a stream the server ended (Error).
type streamLine struct {
	Index     uint64
	Topic     string
	Type      string
	Key       string
	Namespace string
	Payload   json.RawMessage
	Error     string
	raw       string
}

func (l streamLine) kind() string { return l.Topic + " " + l.Type + " " + l.Key }

// stream reads an event stream line by line on a goroutine of its own, so a
// test waits for a line with a deadline instead of hanging.
type stream struct {
	resp  *http.Response
	lines chan streamLine
	ended chan struct{} // closed at the end of the body
}

func openStream(t *testing.T, url string) *stream {
	t.Helper()
	resp, err := http.Get(url)
	must.NoError(t, err)
	must.Eq(t, http.StatusOK, resp.StatusCode)
	must.Eq(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	s := &stream{resp: resp, lines: make(chan streamLine, 1024), ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			// A frame holds the events of one write, in Nomad's framing;
			// each becomes a line of its own here, and must carry the
			// frame's index.
			var frame struct {
				Index  uint64
				Events []streamLine
			}
			if err := json.Unmarshal(sc.Bytes(), &frame); err == nil && len(frame.Events) > 0 {
				for _, ev := range frame.Events {
					if ev.Index != frame.Index {
						ev.Error = fmt.Sprintf("event of index %d in the frame of index %d", ev.Index, frame.Index)
					}
					ev.raw = "event"
					s.lines <- ev
				}
				continue
			}
			var l streamLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l.Error = "undecodable line: " + err.Error()
			}
			l.raw = sc.Text()
			s.lines <- l
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

// next returns the next line, skipping heartbeats unless wanted.
func (s *stream) next(t *testing.T, heartbeats bool) streamLine {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l := <-s.lines:
			if l.raw == "{}" && !heartbeats {
				continue
			}
			return l
		case <-s.ended:
			// The reader queues a stream's last lines before it marks the
			// end, and select picks among ready cases at random: what is
			// queued is read first.
			select {
			case l := <-s.lines:
				if l.raw == "{}" && !heartbeats {
					continue
				}
				return l
			default:
			}
			t.Fatalf("the stream ended")
		case <-timeout:
			t.Fatalf("no line on the stream within 10s")
		}
	}
}

// waitEnd waits for the end of the body.
func (s *stream) waitEnd(t *testing.T) {
	t.Helper()
	select {
	case <-s.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("the stream did not end within 10s")
	}
}

// streamFixture serves the HTTP API over a state store, which a test may
// replace as a snapshot restore does.
type streamFixture struct {
	current  atomic.Pointer[state.StateStore]
	srv      *httptest.Server
	shutdown chan struct{}
}

func (f *streamFixture) store() *state.StateStore { return f.current.Load() }

func newStreamFixture(t *testing.T, heartbeat time.Duration) *streamFixture {
	t.Helper()
	f := &streamFixture{shutdown: make(chan struct{})}
	f.current.Store(state.TestStateStore(t))
	f.srv = httptest.NewServer(httpapi.NewHandler(httpapi.Config{
		Backend:        noBackend{},
		Events:         func() *state.EventBroker { return f.store().Events() },
		EventHeartbeat: heartbeat,
		ShutdownCh:     f.shutdown,
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *streamFixture) registerPluginAndVolume(t *testing.T, index uint64) *structs.CSIVolume {
	t.Helper()
	node := mock.Node("dev")
	must.NoError(t, f.store().UpsertNode(index, node))
	vol := mock.CSIVolume("dev")
	must.NoError(t, f.store().UpsertCSIVolume(index+1, []*structs.CSIVolume{vol}))
	return vol
}

func getText(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	must.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestEventStream_BadRequests(t *testing.T) {
	f := newStreamFixture(t, 0)

	code, body := getText(t, f.srv.URL+"/v1/event/stream?topic=CSIVolume&topic=Job")
	must.Eq(t, http.StatusBadRequest, code)
	must.StrContains(t, body, `unknown event topic "Job"`)

	code, body = getText(t, f.srv.URL+"/v1/event/stream?index=-3")
	must.Eq(t, http.StatusBadRequest, code)
	must.StrContains(t, body, `invalid index "-3"`)

	// History before the store's current index is not buffered.
	f.registerPluginAndVolume(t, 10)
	fresh := state.TestStateStore(t)
	r, err := fresh.Restore()
	must.NoError(t, err)
	must.NoError(t, r.IndexRestore(&state.IndexEntry{Key: state.TableCSIVolumes, Value: 40}))
	must.NoError(t, r.Commit())
	f.current.Store(fresh)
	code, body = getText(t, f.srv.URL+"/v1/event/stream?index=5")
	must.Eq(t, http.StatusBadRequest, code)
	must.StrContains(t, body, "no longer buffered")

	off := httptest.NewServer(httpapi.NewHandler(httpapi.Config{Backend: noBackend{}}))
	defer off.Close()
	code, _ = getText(t, off.URL+"/v1/event/stream")
	must.Eq(t, http.StatusNotFound, code)
	code, _ = getText(t, off.URL+"/v1/metrics")
	must.Eq(t, http.StatusNotFound, code)
}

func TestEventStream_TopicsOrderReplayAndHeartbeat(t *testing.T) {
	f := newStreamFixture(t, 20*time.Millisecond)
	vol := f.registerPluginAndVolume(t, 10)

	// Replay from 10: the volume registered at 11, not the plugin at 10,
	// then what comes next.
	s := openStream(t, f.srv.URL+"/v1/event/stream?topic=CSIVolume&topic=CSIClaim&index=10")
	l := s.next(t, false)
	must.Eq(t, "CSIVolume VolumeRegistered "+vol.ID, l.kind())
	must.Eq(t, uint64(11), l.Index)
	must.Eq(t, structs.DefaultNamespace, l.Namespace)

	// With nothing happening, the stream sends heartbeats.
	must.Eq(t, "{}", s.next(t, true).raw)

	must.NoError(t, f.store().UpsertAllocs(12, []*structs.Allocation{{
		ID: "a1", Namespace: structs.DefaultNamespace, Name: "web.app[0]", JobID: "web", TaskGroup: "app",
		NodeID: "n1", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning,
	}}))
	claim := &structs.CSIVolumeClaim{
		AllocationID: "a1", NodeID: "n1", Mode: structs.CSIVolumeClaimWrite,
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		PublishContext: map[string]string{"device": "/dev/secret-device"},
	}
	must.NoError(t, f.store().CSIVolumeClaim(13, 13000, structs.DefaultNamespace, vol.ID, claim))
	must.Eq(t, "CSIVolume VolumeUpdated "+vol.ID, s.next(t, false).kind())
	l = s.next(t, false)
	must.Eq(t, "CSIClaim ClaimTaken "+vol.ID, l.kind())
	must.Eq(t, uint64(13), l.Index)
	var payload state.CSIClaimEvent
	must.NoError(t, json.Unmarshal(l.Payload, &payload))
	must.Eq(t, state.CSIClaimEvent{VolumeID: vol.ID, Namespace: structs.DefaultNamespace,
		AllocationID: "a1", NodeID: "n1", Mode: "write", State: "taken"}, payload)
}

func TestEventStream_EndsOnRestoreShutdownAndDisconnect(t *testing.T) {
	f := newStreamFixture(t, 0)

	// A snapshot restore: the last line says to subscribe again.
	restored := openStream(t, f.srv.URL+"/v1/event/stream")
	must.NoError(t, f.store().UpsertNode(10, mock.Node("dev")))
	must.Eq(t, "CSIPlugin PluginUpdated dev", restored.next(t, false).kind())
	f.store().Abandon()
	l := restored.next(t, false)
	must.StrContains(t, l.Error, "snapshot restore")
	must.StrContains(t, l.Error, "subscribe again")
	restored.waitEnd(t)

	// A new store; the server shuts down.
	f.current.Store(state.TestStateStore(t))
	down := openStream(t, f.srv.URL+"/v1/event/stream")
	close(f.shutdown)
	l = down.next(t, false)
	must.StrContains(t, l.Error, "shutting down")
	down.waitEnd(t)

	// The client goes away: the handler ends and its subscription with it.
	f2 := newStreamFixture(t, 0)
	gone := openStream(t, f2.srv.URL+"/v1/event/stream")
	must.Eq(t, 1, f2.store().Events().Subscribers())
	gone.resp.Body.Close()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return f2.store().Events().Subscribers() == 0, nil
	})
}

// TestEventStream_RealServer subscribes to a real server's stream, registers
// a node and a volume through RPC, then takes and releases a claim through
// the state store as the FSM would, and sees every event in order, with no
// secret anywhere.
func TestEventStream_RealServer(t *testing.T) {
	srv := server.TestServer(t, nil)
	server.WaitForLeader(t, srv)
	s := openStream(t, "http://"+srv.HTTPAddr()+"/v1/event/stream")

	node := mock.Node("dev")
	var nodeResp structs.NodeUpdateResponse
	must.NoError(t, srv.RPC("Node.Register", &structs.NodeRegisterRequest{Node: node}, &nodeResp))
	vol := mock.CSIVolume("dev")
	var volResp structs.CSIVolumeRegisterResponse
	must.NoError(t, srv.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}}, &volResp))

	store := srv.State()
	next := func() uint64 {
		latest, err := store.LatestIndex()
		must.NoError(t, err)
		return latest + 1
	}
	alloc := &structs.Allocation{
		ID: mock.UniqueID("alloc"), Namespace: structs.DefaultNamespace, Name: "web.app[0]", JobID: "web",
		TaskGroup: "app", NodeID: node.ID,
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning,
	}
	must.NoError(t, store.UpsertAllocs(next(), []*structs.Allocation{alloc}))
	claim := &structs.CSIVolumeClaim{
		AllocationID: alloc.ID, NodeID: node.ID, ExternalNodeID: "ext-" + node.ID,
		Mode:           structs.CSIVolumeClaimWrite,
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		PublishContext: map[string]string{"device": "/dev/secret-device"},
	}
	for _, st := range []structs.CSIVolumeClaimState{
		structs.CSIVolumeClaimStateTaken,
		structs.CSIVolumeClaimStateUnpublishing,
		structs.CSIVolumeClaimStateNodeDetached,
		structs.CSIVolumeClaimStateControllerDetached,
		structs.CSIVolumeClaimStateReadyToFree,
	} {
		c := claim.Copy()
		c.State = st
		must.NoError(t, store.CSIVolumeClaim(next(), structs.NowNano(), structs.DefaultNamespace, vol.ID, c))
	}

	// Plugin events may repeat (the node's fingerprints); the volume and
	// claim events come exactly in this order.
	var first streamLine
	var got []string
	var last uint64
	for len(got) == 0 || got[len(got)-1] != "CSIClaim ClaimFreed "+vol.ID {
		l := s.next(t, false)
		must.Eq(t, "", l.Error)
		must.GreaterEq(t, last, l.Index)
		last = l.Index
		for _, secret := range []string{"s3cr3t-token", "hunter2", "secret-device"} {
			must.StrNotContains(t, l.raw, secret)
		}
		if first.Topic == "" {
			first = l
		}
		if l.Topic != state.TopicCSIPlugin {
			got = append(got, l.kind())
		}
	}
	must.Eq(t, "CSIPlugin PluginUpdated dev", first.kind())
	must.Eq(t, nodeResp.Index, first.Index)
	must.Eq(t, []string{
		"CSIVolume VolumeRegistered " + vol.ID,
		"CSIVolume VolumeUpdated " + vol.ID,
		"CSIClaim ClaimTaken " + vol.ID,
		"CSIVolume VolumeUpdated " + vol.ID,
		"CSIClaim ClaimReleasing " + vol.ID,
		"CSIVolume VolumeUpdated " + vol.ID,
		"CSIClaim ClaimNodeDetached " + vol.ID,
		"CSIVolume VolumeUpdated " + vol.ID,
		"CSIClaim ClaimControllerDetached " + vol.ID,
		"CSIVolume VolumeUpdated " + vol.ID,
		"CSIClaim ClaimFreed " + vol.ID,
	}, got)
}

// TestEventStream_NomadTopicsAndFraming: Nomad's topic syntax (TOPIC:KEY,
// TOPIC:*, *) and namespace filter, and Nomad's framing, one frame per
// write with all of its events.
func TestEventStream_NomadTopicsAndFraming(t *testing.T) {
	f := newStreamFixture(t, 0)
	vol := f.registerPluginAndVolume(t, 10)
	other := mock.CSIVolume("dev")
	other.ID = "other"
	must.NoError(t, f.store().UpsertCSIVolume(12, []*structs.CSIVolume{other}))

	// Every topic: the plugin at 10, the volumes at 11 and 12.
	all := openStream(t, f.srv.URL+"/v1/event/stream?topic=*&index=9")
	for _, want := range []string{"CSIPlugin PluginUpdated dev", "CSIVolume VolumeRegistered " + vol.ID, "CSIVolume VolumeRegistered other"} {
		l := all.next(t, false)
		must.Eq(t, "", l.Error)
		must.Eq(t, want, l.kind())
	}

	// One key of one topic, then TOPIC:* of another.
	keyed := openStream(t, f.srv.URL+"/v1/event/stream?topic=CSIVolume:other&topic=CSIClaim:*&index=9")
	must.Eq(t, "CSIVolume VolumeRegistered other", keyed.next(t, false).kind())

	// A namespace keeps its objects' events and those of objects without
	// one (the plugin).
	ns := openStream(t, f.srv.URL+"/v1/event/stream?topic=*:*&namespace=elsewhere&index=9")
	must.Eq(t, "CSIPlugin PluginUpdated dev", ns.next(t, false).kind())

	// A claim is one write with two events: one frame holds both.
	resp, err := http.Get(f.srv.URL + "/v1/event/stream?topic=CSIVolume:" + vol.ID + "&topic=CSIClaim:" + vol.ID + "&index=12")
	must.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	must.NoError(t, f.store().UpsertAllocs(13, []*structs.Allocation{{
		ID: "a1", Namespace: structs.DefaultNamespace, Name: "web.app[0]", JobID: "web", TaskGroup: "app",
		NodeID: "n1", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning,
	}}))
	must.NoError(t, f.store().CSIVolumeClaim(14, 14000, structs.DefaultNamespace, vol.ID, &structs.CSIVolumeClaim{
		AllocationID: "a1", NodeID: "n1", Mode: structs.CSIVolumeClaimWrite,
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}))
	var frame struct {
		Index  uint64
		Events []streamLine
	}
	must.NoError(t, json.NewDecoder(resp.Body).Decode(&frame))
	must.Eq(t, uint64(14), frame.Index)
	must.Len(t, 2, frame.Events)
	must.Eq(t, "CSIVolume VolumeUpdated "+vol.ID, frame.Events[0].kind())
	must.Eq(t, "CSIClaim ClaimTaken "+vol.ID, frame.Events[1].kind())

	for _, bad := range []string{"topic=Job:*", "topic=:x", "topic=Allocation"} {
		code, body := getText(t, f.srv.URL+"/v1/event/stream?"+bad)
		must.Eq(t, http.StatusBadRequest, code, must.Sprint(bad))
		must.StrContains(t, body, "event topic", must.Sprint(bad))
	}
}
