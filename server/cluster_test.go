package server

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// registerNode registers a node with healthy instances of the plugins
// through the given server.
func registerNode(t *testing.T, s *Server, plugins ...string) *structs.Node {
	t.Helper()
	node := mock.Node(plugins...)
	var resp structs.NodeUpdateResponse
	must.NoError(t, s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: node}, &resp))
	must.Positive(t, resp.Index)
	return node
}

func registerVolume(t *testing.T, s *Server, vol *structs.CSIVolume) uint64 {
	t.Helper()
	var resp structs.CSIVolumeRegisterResponse
	must.NoError(t, s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}}, &resp))
	return resp.Index
}

func getVolume(t *testing.T, s *Server, id string, stale bool) *structs.CSIVolume {
	t.Helper()
	var resp structs.CSIVolumeGetResponse
	req := &structs.CSIVolumeGetRequest{ID: id}
	req.AllowStale = stale
	must.NoError(t, s.RPC("CSIVolume.Get", req, &resp))
	return resp.Volume
}

func followers(servers []*Server, leader *Server) []*Server {
	var out []*Server
	for _, s := range servers {
		if s != leader {
			out = append(out, s)
		}
	}
	return out
}

func TestCluster_WriteThroughFollower(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]

	registerNode(t, f, "dev")
	vol := mock.CSIVolume("dev")
	index := registerVolume(t, f, vol)
	must.Positive(t, index)

	// The leader applied it; every server converges on it.
	for _, s := range servers {
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			got, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
			return got != nil, err
		})
	}
	got := getVolume(t, f, vol.ID, false)
	must.NotNil(t, got)
	must.Eq(t, vol.ExternalID, got.ExternalID)
	must.Nil(t, got.Secrets, must.Sprint("secrets must never leave the servers"))
	must.Eq(t, []string{structs.RedactedValue}, got.MountOptions.MountFlags)
	must.True(t, got.Schedulable)
	must.Eq(t, "dev.csi.volplane.io", got.Provider)
}

func TestCluster_LeaderFailover(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	before := mock.CSIVolume("dev")
	registerVolume(t, leader, before)

	must.NoError(t, leader.Shutdown())
	survivors := followers(servers, leader)
	newLeader := WaitForLeaderOf(t, survivors)
	must.NotEq(t, leader.NodeID(), newLeader.NodeID())

	// Writes continue through either survivor.
	for _, s := range survivors {
		vol := mock.CSIVolume("dev")
		registerVolume(t, s, vol)
		must.NotNil(t, getVolume(t, s, vol.ID, false))
	}
	must.NotNil(t, getVolume(t, survivors[0], before.ID, false))
}

// WaitForLeaderOf waits for a leader among servers without requiring that
// the configuration has only them.
func WaitForLeaderOf(t *testing.T, servers []*Server) *Server {
	t.Helper()
	var leader *Server
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		leader = Leader(servers...)
		return leader != nil && leader.isLeaderReady(), nil
	})
	return leader
}

func TestCluster_RestartedFollowerCatchesUpFromSnapshot(t *testing.T) {
	// Installing a snapshot replaces a follower's whole log: on wal that
	// is a reset of its segments, on boltdb a delete of every entry. The
	// wal servers' segments are small so that the leader's truncation
	// deletes the ones the follower lacks: wal still serves entries
	// truncated from its open segment, and the leader would send those.
	for _, backend := range []string{LogStoreWAL, LogStoreBoltDB} {
		t.Run(backend, func(t *testing.T) { testRestartedFollowerCatchesUp(t, backend) })
	}
}

func testRestartedFollowerCatchesUp(t *testing.T, backend string) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		c.RaftLogStore = backend
		c.walSegmentSize = 4 << 10
		c.RaftConfig.SnapshotThreshold = 16
		c.RaftConfig.SnapshotInterval = 50 * time.Millisecond
		c.RaftConfig.TrailingLogs = 4
	})
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")

	stopped := followers(servers, leader)[0]
	cfg := *stopped.config
	rc := *cfg.RaftConfig
	cfg.RaftConfig = &rc
	cfg.RPCAddr = stopped.RPCAddr()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.RetryJoin = []string{leader.RPCAddr()}
	must.NoError(t, stopped.Shutdown())

	// Enough writes that the leader snapshots and truncates its log past
	// what the stopped follower has.
	var ids []string
	for i := 0; i < 60; i++ {
		vol := mock.CSIVolume("dev")
		registerVolume(t, leader, vol)
		ids = append(ids, vol.ID)
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return leader.raft.Stats()["last_snapshot_index"] != "0", nil
	})

	restarted, err := NewServer(&cfg)
	must.NoError(t, err)
	t.Cleanup(func() { restarted.Shutdown() })
	must.Eq(t, stopped.NodeID(), restarted.NodeID(), must.Sprint("the node ID survives a restart"))

	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		for _, id := range ids {
			v, err := restarted.State().CSIVolumeByID(nil, structs.DefaultNamespace, id)
			if err != nil || v == nil {
				return false, err
			}
		}
		return true, nil
	})
	// It caught up through a snapshot the leader sent, not only the log.
	must.NotEq(t, "0", restarted.raft.Stats()["last_snapshot_index"])
	// And it answers stale reads from its own state.
	must.NotNil(t, getVolume(t, restarted, ids[len(ids)-1], true))
}

func TestServer_BlockingQuery(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	registerNode(t, s, "dev")

	var list structs.CSIVolumeListResponse
	must.NoError(t, s.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{}, &list))
	must.Len(t, 0, list.Volumes)

	done := make(chan structs.CSIVolumeListResponse, 1)
	errc := make(chan error, 1)
	go func() {
		var resp structs.CSIVolumeListResponse
		req := &structs.CSIVolumeListRequest{}
		req.MinQueryIndex = list.Index
		req.MaxQueryTime = 30 * time.Second
		if err := s.RPC("CSIVolume.List", req, &resp); err != nil {
			errc <- err
			return
		}
		done <- resp
	}()

	vol := mock.CSIVolume("dev")
	index := registerVolume(t, s, vol)
	select {
	case resp := <-done:
		must.Len(t, 1, resp.Volumes)
		must.Eq(t, index, resp.Index)
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("blocking query did not return after the index moved")
	}

	// A blocking query whose index does not move returns when it times out.
	var resp structs.CSIVolumeListResponse
	req := &structs.CSIVolumeListRequest{}
	req.MinQueryIndex = index
	req.MaxQueryTime = 50 * time.Millisecond
	must.NoError(t, s.RPC("CSIVolume.List", req, &resp))
	must.Eq(t, index, resp.Index)
}

func TestServer_SingleBootstrapExpectOne(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	var leader string
	must.NoError(t, s.RPC("Status.Leader", &structs.GenericRequest{}, &leader))
	must.Eq(t, s.RPCAddr(), leader)
	var peers []string
	must.NoError(t, s.RPC("Status.Peers", &structs.GenericRequest{}, &peers))
	must.Eq(t, []string{s.RPCAddr()}, peers)
}

// A follower forwarding a blocking query to the leader does not hold up its
// own shutdown.
func TestServer_ShutdownDoesNotWaitForForwardedBlockingQuery(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	// Node.List is forwarded (it shows the leader's heartbeats); volume
	// lists are answered by the follower itself after a read index.
	var list structs.NodeListResponse
	must.NoError(t, f.RPC("Node.List", &structs.NodeListRequest{}, &list))

	// Over the network, as a client's query arrives: the follower's
	// handler waits on its forward to the leader.
	client := rpc.NewPool(rpc.PoolConfig{Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { client.Close() })
	go func() {
		req := &structs.NodeListRequest{}
		req.MinQueryIndex, req.MaxQueryTime = list.Index, 5*time.Minute
		_ = client.RPC(f.RPCAddr(), "Node.List", req, &structs.NodeListResponse{})
	}()
	// Shut down once the query is parked on the leader.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return f.pool.ActiveCalls() > 0, nil
	})
	done := make(chan struct{})
	go func() {
		f.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("shutdown waited for the forwarded blocking query")
	}
}

// A blocking query for an index beyond the current one blocks for its wait,
// on the leader, through a follower that forwards it, and on a follower
// that answers stale; an index far beyond (the largest there is) included.
func TestServer_BlockingQueryIndexBeyondCurrent(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	var list structs.CSIVolumeListResponse
	must.NoError(t, leader.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{}, &list))

	client := rpc.NewPool(rpc.PoolConfig{Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { client.Close() })
	const wait = 300 * time.Millisecond // as the URLs below say
	type query struct {
		name  string
		s     *Server
		index uint64
		stale bool
	}
	var queries []query
	for _, index := range []uint64{list.Index + 1, list.Index + 1000, math.MaxUint64} {
		queries = append(queries,
			query{"leader", leader, index, false},
			query{"forwarded by a follower", f, index, false},
			query{"stale on a follower", f, index, true})
	}
	errs := make(chan error, len(queries)+4)
	for _, q := range queries {
		go func() {
			req := &structs.CSIVolumeListRequest{}
			req.MinQueryIndex, req.MaxQueryTime, req.AllowStale = q.index, wait, q.stale
			var resp structs.CSIVolumeListResponse
			start := time.Now()
			err := client.RPC(q.s.RPCAddr(), "CSIVolume.List", req, &resp)
			took := time.Since(start)
			switch {
			case err != nil:
				errs <- fmt.Errorf("%s, index %d: %v", q.name, q.index, err)
			case took < wait:
				errs <- fmt.Errorf("%s, index %d: answered after %s, before the %s wait", q.name, q.index, took, wait)
			case resp.Index != list.Index:
				errs <- fmt.Errorf("%s, index %d: answered index %d, want the current %d", q.name, q.index, resp.Index, list.Index)
			default:
				errs <- nil
			}
		}()
	}
	// And through the HTTP API, as `curl ...?index=...&wait=` asks.
	urls := []string{
		"http://" + leader.HTTPAddr() + "/v1/volumes?index=18446744073709551615&wait=300ms",
		"http://" + f.HTTPAddr() + "/v1/volumes?index=18446744073709551615&wait=300ms",
		"http://" + f.HTTPAddr() + "/v1/volumes?index=18446744073709551615&wait=300ms&stale",
		"http://" + f.HTTPAddr() + "/v1/volume/csi/missing?index=18446744073709551615&wait=300ms",
	}
	for _, u := range urls {
		go func() {
			start := time.Now()
			resp, err := http.Get(u)
			took := time.Since(start)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			switch index := resp.Header.Get("X-Nomad-Index"); {
			case took < wait:
				errs <- fmt.Errorf("%s: answered %s after %s, before the %s wait", u, resp.Status, took, wait)
			case index != strconv.FormatUint(list.Index, 10):
				errs <- fmt.Errorf("%s: X-Nomad-Index %q, want the current %d", u, index, list.Index)
			default:
				errs <- nil
			}
		}()
	}
	for range len(queries) + len(urls) {
		must.NoError(t, <-errs)
	}
}
