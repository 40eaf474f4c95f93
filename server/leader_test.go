package server

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

var errInjected = errors.New("injected leadership setup failure")

// A leader whose setup fails tries again with backoff, serving no
// consistent read meanwhile, and once the setup succeeds it does the
// leader's work. A single server has nobody to hand leadership to: past the
// bound its transfer fails and it goes on trying.
func TestLeader_SetupRetriedUntilItSucceeds(t *testing.T) {
	var attempts atomic.Int32
	blocked, release := make(chan struct{}), make(chan struct{})
	s := TestServer(t, func(c *Config) {
		c.leaderSetupRetryMin, c.leaderSetupRetryMax = 10*time.Millisecond, 20*time.Millisecond
		c.leaderSetupMaxAttempts = 2
		c.leaderSetupHook = func(attempt int) error {
			attempts.Store(int32(attempt))
			switch {
			case attempt == 3:
				close(blocked)
				<-release
				return errInjected
			case attempt < 3:
				return errInjected
			}
			return nil
		}
	})
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatalf("the setup was not tried a third time (attempts: %d)", attempts.Load())
	}
	// Two failures, past the bound of two: a transfer was tried and failed.
	must.Eq(t, raft.Leader, s.raft.State(), must.Sprint("raft still counts the server leader"))
	must.False(t, s.isLeaderReady(), must.Sprint("no consistent read before the setup succeeds"))
	close(release)

	WaitForLeader(t, s)
	must.Eq(t, int32(4), attempts.Load())
	// The leader's work runs: a consistent read is served, and the
	// heartbeat timers track a registered node.
	var list structs.CSIVolumeListResponse
	must.NoError(t, s.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{}, &list))
	node := registerNode(t, s, "dev")
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		_, ok := s.heartbeats.lastHeartbeat(node.ID)
		return ok, fmt.Errorf("the leader does not track node %s's heartbeats", node.ID)
	})
}

// A leader whose setup keeps failing hands leadership to another server,
// which sets it up and leads. Without the hand-over the failing server
// would lead for as long as Raft lets it, and no server would be ready.
func TestLeader_SetupFailingTransfersLeadership(t *testing.T) {
	var (
		failing atomic.Value // the name of the server whose setup fails
		tries   atomic.Int32
		logs    testutil.Buffer
	)
	failing.Store("")
	servers := TestCluster(t, 3, func(i int, c *Config) {
		name := fmt.Sprintf("srv%d", i)
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: io.MultiWriter(testWriter{t}, &logs)})
		c.leaderSetupRetryMin, c.leaderSetupRetryMax = 10*time.Millisecond, 20*time.Millisecond
		c.leaderSetupMaxAttempts = 3
		c.leaderSetupHook = func(attempt int) error {
			if failing.Load() != name {
				return nil
			}
			tries.Add(1)
			return errInjected
		}
	})
	leader := WaitForLeader(t, servers...)
	bad := followers(servers, leader)[0]
	failing.Store(bad.config.NodeName)
	// Leadership is handed to the failing server until it hands it on
	// itself: under load, an election may take it away first.
	handedOn := bad.config.NodeName + ".server: leadership transferred after the setup failed"
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if strings.Contains(logs.String(), handedOn) {
			return true, nil
		}
		if l := Leader(servers...); l != nil && l != bad {
			f := l.raft.LeadershipTransferToServer(raft.ServerID(bad.nodeID), raft.ServerAddress(bad.rpcAddr))
			if err := f.Error(); err != nil {
				return false, err
			}
		}
		return false, fmt.Errorf("%s has not handed its leadership on (%d setups failed)", bad.config.NodeName, tries.Load())
	})
	must.GreaterEq(t, 3, tries.Load())
	leader = WaitForLeader(t, servers...)
	must.NotEq(t, bad, leader, must.Sprint("the server whose setup fails does not lead"))
	must.False(t, bad.isLeaderReady(), must.Sprint("the failing server never finished a setup"))
}
