package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// fakeFingerprinter answers what a test sets.
type fakeFingerprinter struct {
	mu   sync.Mutex
	node *structs.CSIInfo
	err  error
}

func (f *fakeFingerprinter) Fingerprint(context.Context, string, structs.CSIPluginType) (*structs.CSIInfo, *structs.CSIInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return nil, f.node.Copy(), f.err
}

func (f *fakeFingerprinter) set(node *structs.CSIInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node = node
}

func (f *fakeFingerprinter) Close() error { return nil }

func withFakePlugin(fp *fakeFingerprinter) func(*Config) {
	return func(cfg *Config) {
		cfg.Plugins = []PluginConfig{{ID: "fake", Endpoint: "unix:///nonexistent/fake.sock"}}
		cfg.newFingerprinter = func(PluginConfig, hclog.Logger) (csimanager.Fingerprinter, error) { return fp, nil }
	}
}

// waitRequest waits for a request after the first `after` that passes
// match, and returns its position.
func waitRequest(t *testing.T, f *fakeServer, after int, match func(any) bool) int {
	t.Helper()
	found := -1
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		reqs := f.recorded()
		for i := after; i < len(reqs); i++ {
			if match(reqs[i]) {
				found = i
				return true, nil
			}
		}
		return false, fmt.Errorf("no matching request among %d", len(reqs))
	})
	return found
}

func isRegister(r any) bool { _, ok := r.(*structs.NodeRegisterRequest); return ok }
func isHeartbeat(r any) bool {
	_, ok := r.(*structs.NodeUpdateStatusRequest)
	return ok
}

// Heartbeats carry fingerprints only when they changed, and a change is
// reported at once rather than at the next heartbeat.
func TestHeartbeat_FingerprintsOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	fake := newFakeServer(t)
	fp := &fakeFingerprinter{node: mock.NodeInfo("fake", "n1", true)}
	c := testClient(t, []string{fake.addr}, withFakePlugin(fp))
	waitRegistered(t, c)

	reqs := fake.recorded()
	reg := reqs[0].(*structs.NodeRegisterRequest)
	must.Eq(t, c.NodeID(), reg.Node.ID)
	must.NotEq(t, "", reg.Node.SecretID)
	must.NotNil(t, reg.Node.CSINodePlugins["fake"], must.Sprint("the first fingerprint goes with the registration"))
	must.NotNil(t, reg.Node.CSIControllerPlugins, must.Sprint("registration sends both maps"))

	// Steady heartbeats: no fingerprints.
	i := waitRequest(t, fake, 1, isHeartbeat)
	hb := fake.recorded()[i].(*structs.NodeUpdateStatusRequest)
	must.Eq(t, c.NodeID(), hb.NodeID)
	must.Eq(t, reg.Node.SecretID, hb.SecretID)
	must.Eq(t, structs.NodeStatusReady, hb.Status)
	must.Nil(t, hb.CSINodePlugins)
	must.Nil(t, hb.CSIControllerPlugins)

	// A change goes out at once (well before the next ~200 ms heartbeat)
	// with the side that changed only.
	changed := mock.NodeInfo("fake", "n1", true)
	changed.NodeInfo.MaxVolumes = 7
	before := len(fake.recorded())
	fp.set(changed)
	i = waitRequest(t, fake, before, func(r any) bool {
		hb, ok := r.(*structs.NodeUpdateStatusRequest)
		return ok && hb.CSINodePlugins != nil
	})
	hb = fake.recorded()[i].(*structs.NodeUpdateStatusRequest)
	must.Eq(t, int64(7), hb.CSINodePlugins["fake"].NodeInfo.MaxVolumes)
	must.Nil(t, hb.CSIControllerPlugins)

	// And then nothing again.
	i = waitRequest(t, fake, i+1, isHeartbeat)
	must.Nil(t, fake.recorded()[i].(*structs.NodeUpdateStatusRequest).CSINodePlugins)
}

// A heartbeat answered "not found" makes the client register again; a
// heartbeat refused for its secret is retried, never fatal.
func TestHeartbeat_ReRegistersWhenLost(t *testing.T) {
	t.Parallel()
	fake := newFakeServer(t)
	fp := &fakeFingerprinter{node: mock.NodeInfo("fake", "n1", true)}
	c := testClient(t, []string{fake.addr}, withFakePlugin(fp))
	waitRegistered(t, c)
	waitRequest(t, fake, 1, isHeartbeat)

	before := len(fake.recorded())
	fake.fail(structs.ErrNotFound("node %q is not registered", c.NodeID()))
	i := waitRequest(t, fake, before, isRegister)
	reg := fake.recorded()[i].(*structs.NodeRegisterRequest)
	must.NotNil(t, reg.Node.CSINodePlugins["fake"], must.Sprint("registering again sends every fingerprint"))

	before = len(fake.recorded())
	fake.fail(structs.NewError(structs.ErrCodePermissionDenied, "wrong node secret"),
		structs.NewError(structs.ErrCodePermissionDenied, "wrong node secret"))
	waitRequest(t, fake, before+2, isHeartbeat)
}

// A server that has no leader, or is gone, is left for the next one.
func TestHeartbeat_MovesToNextServer(t *testing.T) {
	t.Parallel()
	a, b := newFakeServer(t), newFakeServer(t)
	c := testClient(t, []string{a.addr, b.addr}, nil)
	waitRegistered(t, c)
	_, cur := c.Servers()
	first, second := a, b
	if cur == b.addr {
		first, second = b, a
	}
	waitRequest(t, first, 1, isHeartbeat)

	first.fail(structs.ErrNoLeader)
	waitRequest(t, second, 0, isHeartbeat)
	_, cur = c.Servers()
	must.Eq(t, second.addr, cur)

	// The one session moved too: the first server's closed.
	sess := first.session(t)
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		return sess.IsClosed(), fmt.Errorf("the session with the server left is still open")
	})

	second.mux.Close()
	before := len(first.recorded())
	waitRequest(t, first, before, isHeartbeat)
}
