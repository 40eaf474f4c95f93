package server

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// A forwarded write may be sent again only when it cannot have been
// applied: a call the pool gave up before writing any of the request
// (closed pool, refused dial, context cancelled first) is retried even for
// a write that must not run twice, and a leader change that cancels such a
// call sends it to the new leader; a call whose request was written and
// then timed out is retried only for reads and idempotent writes. The
// errors come from a real pool.
func TestCanRetryForward_OnlyWhatCannotHaveRun(t *testing.T) {
	srv := TestServer(t, func(c *Config) { c.pausable = true })
	WaitForLeader(t, srv)
	s := &Server{}
	job := &structs.JobRegisterRequest{}    // must not be applied twice
	node := &structs.NodeRegisterRequest{}  // idempotent
	read := &structs.CSIVolumeListRequest{} // a read
	var reply struct{}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	refused := ln.Addr().String()
	ln.Close()

	closedPool := rpc.NewPool(rpc.PoolConfig{})
	closedPool.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	pool := rpc.NewPool(rpc.PoolConfig{DialTimeout: 2 * time.Second, CallTimeout: 2 * time.Second})
	defer pool.Close()

	unsent := map[string]error{
		"closed pool":      closedPool.RPC(srv.RPCAddr(), "Status.Ping", &structs.GenericRequest{}, &reply),
		"refused dial":     pool.RPC(refused, "Status.Ping", &structs.GenericRequest{}, &reply),
		"cancelled before": pool.RPCContext(cancelled, srv.RPCAddr(), "Status.Ping", &structs.GenericRequest{}, &reply),
	}
	for name, err := range unsent {
		must.Error(t, err, must.Sprint(name))
		must.True(t, rpc.NotSent(err), must.Sprintf("%s: %v", name, err))
		must.True(t, s.canRetryForward("Job.Register", job, err), must.Sprintf("%s: %v", name, err))
		must.NoError(t, leaderMovedAnswer("Job.Register", job, errors.Join(errLeaderMoved, err)), must.Sprint(name))
	}

	// Written, then no answer: the server may have run it.
	must.NoError(t, pool.RPC(srv.RPCAddr(), "Status.Ping", &structs.GenericRequest{}, &reply))
	srv.pause()
	sent := pool.RPC(srv.RPCAddr(), "Status.Ping", &structs.GenericRequest{}, &reply)
	srv.resume()
	must.True(t, rpc.IsConnError(sent), must.Sprintf("%v", sent))
	must.False(t, rpc.NotSent(sent), must.Sprintf("%v", sent))
	must.False(t, s.canRetryForward("Job.Register", job, sent))
	must.True(t, s.canRetryForward("Node.Register", node, sent))
	must.True(t, s.canRetryForward("CSIVolume.List", read, sent))
	err = leaderMovedAnswer("Job.Register", job, errors.Join(errLeaderMoved, sent))
	must.StrContains(t, err.Error(), "may or may not have been applied")
}

// A write forwarded for the leader of a Raft term is run only by that
// leader in that term: one that arrives late (at a leader thawed after
// another was elected, or at a server that lost its leadership meanwhile)
// is refused as retryable and changes nothing, not run, or forwarded on,
// after its forwarder has answered its caller from elsewhere: a claim
// refused to its caller must not be granted by its own late copy.
func TestForward_LateForwardForAnOldTermIsNotApplied(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	follower := followers(servers, leader)[0]
	term := leader.raft.CurrentTerm()

	upsert := func(s *Server, name string, term uint64) error {
		req := &structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{{Name: name}}}
		req.SetForwarded()
		req.SetLeaderTerm(term)
		return s.RPC("Namespace.UpsertNamespaces", req, &structs.GenericResponse{})
	}
	for _, c := range []struct {
		name string
		to   *Server
		term uint64
	}{
		{"old-term", leader, term - 1},
		{"not-the-leader", follower, term},
	} {
		err := upsert(c.to, c.name, c.term)
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err), must.Sprintf("%s: %v", c.name, err))
		must.StrContains(t, err.Error(), "not applied")
		// Nothing was written: a write through the leader after it is
		// applied everywhere, and the late one is not.
		must.NoError(t, upsert(leader, c.name+"-after", term))
		for _, s := range servers {
			waitFor(t, 10*time.Second, func() (bool, error) {
				ns, err := s.State().NamespaceByName(nil, c.name+"-after")
				return ns != nil, err
			})
			ns, err := s.State().NamespaceByName(nil, c.name)
			must.NoError(t, err)
			must.Nil(t, ns, must.Sprintf("%s applied on %s", c.name, s.config.NodeName))
		}
	}
}
