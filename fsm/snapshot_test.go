package fsm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	failWrites bool
	cancelled  bool
	closed     bool
}

func (s *memSink) Write(p []byte) (int, error) {
	if s.failWrites {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}
func (s *memSink) ID() string    { return "test" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// persist snapshots the FSM and returns the bytes written.
func persist(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	must.NoError(t, err)
	defer snap.Release()
	sink := &memSink{}
	must.NoError(t, snap.Persist(sink))
	must.True(t, sink.closed)
	must.False(t, sink.cancelled)
	return sink.Bytes()
}

// populate fills an FSM with every kind of row, through Apply.
func populate(t *testing.T, f *FSM) {
	t.Helper()
	ctrlNode := testNode("n1", "p")
	ctrlNode.CSIControllerPlugins = map[string]*structs.CSIInfo{"p": {
		PluginID: "p", Healthy: true, RequiresControllerPlugin: true,
		ControllerInfo: &structs.CSIControllerInfo{SupportsAttachDetach: true},
		UpdateTime:     time.Unix(1700000000, 0).UTC(),
	}}
	ctrlNode.Attributes = map[string]string{"os": "linux"}
	mustApply(t, f, 5, structs.NamespaceUpsertRequestType, &structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{
		{Name: "prod", Description: "production", Meta: map[string]string{"team": "storage"}}}})
	mustApply(t, f, 6, structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{
		{Name: "readers", Description: "read volumes", Rules: `namespace "prod" { policy = "read" }`}}})
	mustApply(t, f, 7, structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{Token: &structs.ACLToken{
		AccessorID: "boot", Name: structs.BootstrapTokenName, Type: structs.ACLManagementToken,
		SecretHash: structs.HashACLSecret("boot-secret"), CreateTime: time.Unix(1700000000, 0).UTC()}})
	expires := time.Unix(1700003600, 0).UTC()
	mustApply(t, f, 8, structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{
		AccessorID: "reader", Name: "reader", Type: structs.ACLClientToken, Policies: []string{"readers"},
		SecretHash: structs.HashACLSecret("reader-secret"), CreateTime: time.Unix(1700000000, 0).UTC(),
		ExpirationTime: &expires, ExpirationTTL: time.Hour}}})
	mustApply(t, f, 9, structs.NodeIntroUpsertRequestType, &structs.NodeIntroCreateRequest{Token: &structs.NodeIntroToken{
		AccessorID: "intro-1", Name: "rack 4", SecretHash: structs.HashIntroSecret("s3cret"), SingleUse: true,
		CreateTime: time.Unix(1700000000, 0).UTC()}})
	mustApply(t, f, 8, structs.RootKeyUpsertRequestType, &structs.RootKeyUpsertRequest{Key: &structs.RootKey{
		KeyID: "key-1", WrappedKey: []byte("wrapped"), KEKID: "kek-1", CreateTime: time.Unix(1700000000, 0).UTC()}, Activate: true})
	mustApply(t, f, 10, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: ctrlNode, IntroAccessorID: "intro-1"})
	mustApply(t, f, 11, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n2", "p", "q")})
	mustApply(t, f, 12, structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
		Volumes:   []*structs.CSIVolume{testVolume(ns, "v1", "p"), testVolume("prod", "v2", "q")},
		Timestamp: 1000,
	})
	next := placeRunning(t, f, 13, volumeJob(ns, "web1", "v1"), "a1", "n1")
	next = placeRunning(t, f, next, volumeJob(ns, "web2", "v1"), "a2", "n2")
	placeRunning(t, f, next, volumeJob("prod", "web3", "v2"), "a3", "n2") // 19 to 21
	mustApply(t, f, 22, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "v1", Claim: claim("a1", "n1", structs.CSIVolumeClaimWrite), Timestamp: 3000,
	})
	mustApply(t, f, 23, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "v1", Claim: claim("a2", "n2", structs.CSIVolumeClaimRead), Timestamp: 3001,
	})
	prod := structs.WriteRequest{Namespace: "prod"}
	mustApply(t, f, 24, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "v2", Claim: claim("a3", "n2", structs.CSIVolumeClaimWrite), Timestamp: 3002, WriteRequest: prod,
	})
	release := claim("a3", "n2", structs.CSIVolumeClaimWrite)
	release.State = structs.CSIVolumeClaimStateUnpublishing
	mustApply(t, f, 25, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "v2", Claim: release, Timestamp: 3003, WriteRequest: prod,
	})
	release.State = structs.CSIVolumeClaimStateNodeDetached
	release.Attempts, release.LastError, release.NextAttempt = 2, "controller timed out", 9000
	mustApply(t, f, 26, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "v2", Claim: release, Timestamp: 3004, WriteRequest: prod,
	})
	job := &structs.Job{ID: "j1", Namespace: ns, Name: "j1", Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Volumes: map[string]*structs.VolumeRequest{
			"data": {Name: "data", Type: "csi", Source: "v1", PerAlloc: true,
				AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
		}, Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/true"}}}}}}
	mustApply(t, f, 27, structs.JobRegisterRequestType, &structs.JobRegisterRequest{Job: job, Timestamp: 4000})
	mustApply(t, f, 28, structs.PlanApplyRequestType, &structs.PlanApplyRequest{Namespace: ns, JobID: "j1", JobModifyIndex: 27,
		Placement: map[string]*structs.GroupPlacement{"g": {Desired: 1, Blocked: []string{`volume "v1[0]" does not exist`}}},
		Timestamp: 4001})
}

// dump lists every row of every table, as stored.
func dump(t *testing.T, st *state.StateStore) map[string][]any {
	t.Helper()
	out := map[string][]any{}
	collect := func(table string, iter memdb.ResultIterator, err error) {
		must.NoError(t, err)
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			out[table] = append(out[table], raw)
		}
	}
	iter, err := st.Nodes(nil)
	collect(state.TableNodes, iter, err)
	iter, err = st.CSIPlugins(nil)
	collect(state.TableCSIPlugins, iter, err)
	iter, err = st.CSIVolumesByNamespace(nil, state.AllNamespaces, "")
	collect(state.TableCSIVolumes, iter, err)
	iter, err = st.Allocs(nil)
	collect(state.TableAllocs, iter, err)
	iter, err = st.Jobs(nil)
	collect(state.TableJobs, iter, err)
	iter, err = st.NodeIntroTokens(nil)
	collect(state.TableNodeIntro, iter, err)
	iter, err = st.RootKeys(nil)
	collect(state.TableRootKeys, iter, err)
	iter, err = st.ACLPolicies(nil, "")
	collect(state.TableACLPolicies, iter, err)
	iter, err = st.ACLTokens(nil, "")
	collect(state.TableACLTokens, iter, err)
	iter, err = st.StoredNamespaces(nil)
	collect(state.TableNamespaces, iter, err)
	iter, err = st.Indexes()
	collect(state.TableIndex, iter, err)
	return out
}

func TestSnapshot_RoundTrip(t *testing.T) {
	src := testFSM(t)
	populate(t, src)
	data := persist(t, src)
	// Nodes are registered with their secrets (entries of older leaders):
	// the snapshot holds the secrets' hashes only.
	for _, id := range []string{"n1", "n2"} {
		must.False(t, bytes.Contains(data, []byte(testNode(id).SecretID)), must.Sprintf("the snapshot holds node %s's secret", id))
	}

	dst := testFSM(t)
	must.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(data))))

	want, got := dump(t, src.State()), dump(t, dst.State())
	must.Len(t, 2, want[state.TableNodes])
	must.Len(t, 2, want[state.TableCSIPlugins])
	must.Len(t, 2, want[state.TableCSIVolumes])
	must.Len(t, 3, want[state.TableAllocs])
	must.Len(t, 4, want[state.TableJobs])
	must.Len(t, 1, want[state.TableNodeIntro])
	must.Len(t, 1, want[state.TableRootKeys])
	must.Len(t, 11, want[state.TableIndex]) // the ACL bootstrap's row too
	// The single-use token that introduced n1 is marked used.
	must.Eq(t, "n1", want[state.TableNodeIntro][0].(*structs.NodeIntroToken).UsedBy)
	// Every table of the store is filled and listed here, so a table added
	// to the schema without a snapshot record fails the comparison below.
	for _, table := range append(state.Tables(), state.TableIndex) {
		must.SliceNotEmpty(t, want[table], must.Sprintf("no %s rows: populate and dump must cover every table", table))
	}
	must.Eq(t, want, got)
	boot, err := dst.State().ACLBootstrapIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(7), boot)
	tok, err := dst.State().ACLTokenBySecret("reader-secret")
	must.NoError(t, err)
	must.Eq(t, "reader", tok.AccessorID)
	must.True(t, tok.ExpirationTime.Equal(time.Unix(1700003600, 0)))

	// Reads that derive fields agree too, and claims came through whole.
	for _, k := range [][2]string{{ns, "v1"}, {"prod", "v2"}} {
		wv, err := src.State().CSIVolumeByID(nil, k[0], k[1])
		must.NoError(t, err)
		gv, err := dst.State().CSIVolumeByID(nil, k[0], k[1])
		must.NoError(t, err)
		must.Eq(t, wv, gv)
	}
	v2, err := dst.State().CSIVolumeByID(nil, "prod", "v2")
	must.NoError(t, err)
	must.Eq(t, "controller timed out", v2.PastClaims["a3"].LastError)
	must.Eq(t, structs.CSIVolumeClaimStateNodeDetached, v2.PastClaims["a3"].State)
	must.Eq(t, structs.CSISecrets{"token": "s3cret"}, v2.Secrets)
	latest, err := dst.State().LatestIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(28), latest)
	j, err := dst.State().JobByID(nil, ns, "j1")
	must.NoError(t, err)
	must.Eq(t, []string{`volume "v1[0]" does not exist`}, j.Placement["g"].Blocked)
	must.True(t, j.TaskGroups[0].Volumes["data"].PerAlloc)

	// The restored FSM keeps applying where the source left off.
	mustApply(t, dst, 29, structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
}

func TestSnapshot_PointInTime(t *testing.T) {
	f := testFSM(t)
	populate(t, f)
	snap, err := f.Snapshot()
	must.NoError(t, err)
	want := dump(t, f.State())

	// Applies after the snapshot was taken are not in it.
	mustApply(t, f, 29, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n9")})

	sink := &memSink{}
	must.NoError(t, snap.Persist(sink))
	dst := testFSM(t)
	must.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	must.Eq(t, want, dump(t, dst.State()))
}

func TestSnapshot_PersistErrorCancels(t *testing.T) {
	f := testFSM(t)
	populate(t, f)
	snap, err := f.Snapshot()
	must.NoError(t, err)
	sink := &memSink{failWrites: true}
	must.Error(t, snap.Persist(sink))
	must.True(t, sink.cancelled)
	must.False(t, sink.closed)
}

func TestRestore_Errors(t *testing.T) {
	f := testFSM(t)
	mustApply(t, f, 1, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("keep")})
	before := f.State()

	err := f.Restore(io.NopCloser(bytes.NewReader([]byte{200, 0x80})))
	must.ErrorContains(t, err, "SnapshotType(200)")

	// A record cut short.
	good := persist(t, f)
	err = f.Restore(io.NopCloser(bytes.NewReader(good[:len(good)-3])))
	must.Error(t, err)

	// A failed restore leaves the current state in place.
	must.True(t, before == f.State())
	must.False(t, closedCh(before.AbandonCh()))
	n, err := f.State().NodeByID(nil, "keep")
	must.NoError(t, err)
	must.NotNil(t, n)
}

func TestRestore_WakesBlockedReader(t *testing.T) {
	src := testFSM(t)
	populate(t, src)
	data := persist(t, src)

	f := testFSM(t)
	mustApply(t, f, 1, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("old")})

	// A blocking query on the old store, waiting as the server's do: on the
	// rows it read and on the store's abandon channel.
	old := f.State()
	ws := memdb.NewWatchSet()
	_, err := old.IndexWatch(ws, state.TableNodes)
	must.NoError(t, err)
	_, err = old.NodeByID(ws, "old")
	must.NoError(t, err)
	ws.Add(old.AbandonCh())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	woke := make(chan error, 1)
	go func() { woke <- ws.WatchCtx(ctx) }()

	must.NoError(t, f.Restore(io.NopCloser(bytes.NewReader(data))))
	must.NoError(t, <-woke) // nil: a channel fired, not the deadline

	// Re-reading finds the restored store.
	cur := f.State()
	must.True(t, old != cur)
	n, err := cur.NodeByID(nil, "old")
	must.NoError(t, err)
	must.Nil(t, n)
	n, err = cur.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.NotNil(t, n)
}

// TestState_ConcurrentWithRestore runs State against Restore, for the race
// detector.
func TestState_ConcurrentWithRestore(t *testing.T) {
	src := testFSM(t)
	populate(t, src)
	data := persist(t, src)

	f := testFSM(t)
	done := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 3 && err == nil; i++ {
			err = f.Restore(io.NopCloser(bytes.NewReader(data)))
		}
		done <- err
	}()
	for {
		select {
		case err := <-done:
			must.NoError(t, err)
			return
		default:
			_, err := f.State().NodeByID(nil, "n1")
			must.NoError(t, err)
		}
	}
}

func closedCh(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestSnapshot_NodeSecrets: this build writes nodes as NodeHashed records,
// which an older build refuses rather than restore nodes without their
// secrets, and restores an older build's Node records, secrets hashed.
func TestSnapshot_NodeSecrets(t *testing.T) {
	src := testFSM(t)
	populate(t, src)
	types := map[structs.SnapshotType]int{}
	br := bufio.NewReader(bytes.NewReader(persist(t, src)))
	dec := codec.NewDecoder(br, structs.MsgpackHandle)
	for {
		b, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			break
		}
		must.NoError(t, err)
		var skip codec.Raw
		must.NoError(t, dec.Decode(&skip))
		types[structs.SnapshotType(b)]++
	}
	must.Eq(t, 2, types[structs.NodeHashedSnapshot])
	must.Zero(t, types[structs.NodeSnapshot])

	// An older build's snapshot: one node, its secret in clear.
	var old bytes.Buffer
	w := &recordWriter{w: &old, enc: codec.NewEncoder(&old, structs.MsgpackHandle)}
	node := testNode("n1", "p")
	must.NoError(t, w.write(structs.NodeSnapshot, node))
	dst := testFSM(t)
	must.NoError(t, dst.Restore(io.NopCloser(&old)))
	got, err := dst.State().NodeBySecret(node.SecretID)
	must.NoError(t, err)
	must.NotNil(t, got)
	must.Eq(t, "", got.SecretID)
	must.Eq(t, structs.HashACLSecret(node.SecretID), got.SecretHash)
}
