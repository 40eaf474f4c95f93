package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/clientrpc"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// volumeCalls is what the agents of a test saw of the plugin calls on
// volumes, in order, and whether two ever ran at once on one volume.
type volumeCalls struct {
	mu       sync.Mutex
	events   []string
	inFlight map[string]int
	overlaps []string
}

func (v *volumeCalls) begin(volume, what string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.inFlight[volume]++
	if v.inFlight[volume] > 1 {
		v.overlaps = append(v.overlaps, what)
	}
	v.events = append(v.events, what+" begins")
}

func (v *volumeCalls) end(volume, what string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.inFlight[volume]--
	v.events = append(v.events, what+" ends")
}

func (v *volumeCalls) snapshot() ([]string, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.events...), append([]string(nil), v.overlaps...)
}

// lockingAgent is a client agent's ClientCSI endpoint whose calls run in
// the context the servers' request gives them (clientrpc.Calls), as a real
// agent's plugin calls do. Its first controller detach hangs, as a plugin
// that does not answer, until that context ends.
type lockingAgent struct {
	calls *clientrpc.Calls
	seen  *volumeCalls
	// hangOnce is shared by the agents of a test: one call hangs.
	hangOnce  *sync.Once
	hangStart chan struct{}
}

func (a *lockingAgent) ControllerAttachVolume(args *structs.ClientCSIControllerAttachVolumeRequest, reply *structs.ClientCSIControllerAttachVolumeResponse) error {
	what := "publish to " + args.ClientCSINodeID
	a.seen.begin(args.VolumeID, what)
	defer a.seen.end(args.VolumeID, what)
	reply.PublishContext = map[string]string{"served-by": args.NodeID}
	return nil
}

func (a *lockingAgent) ControllerDetachVolume(args *structs.ClientCSIControllerDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	ctx, cancel := a.calls.Context(args)
	defer cancel()
	what := "unpublish from " + args.ClientCSINodeID
	a.seen.begin(args.VolumeID, what)
	defer a.seen.end(args.VolumeID, what)
	hang := false
	a.hangOnce.Do(func() { hang = true })
	if hang {
		close(a.hangStart)
		<-ctx.Done()
		return structs.NewError(structs.ErrCodeRetryable, "ControllerUnpublishVolume: %v", ctx.Err())
	}
	return nil
}

func (a *lockingAgent) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	return nil
}

func (a *lockingAgent) ControllerValidateVolume(args *structs.ClientCSIControllerValidateVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	return nil
}

// A claim's controller publish is one operation on the volume: it waits
// for the release step in flight on the same volume (a controller
// unpublish that hangs) instead of running alongside it, and runs once that
// step has ended, here at its deadline.
func TestClaim_PublishWaitsForTheVolumesUnpublish(t *testing.T) {
	const callTimeout = time.Second
	s := TestServer(t, func(c *Config) {
		c.CSICallTimeout = callTimeout
		// The failed unpublish is retried soon after, and goes through.
		c.ReleaseBaseDelay, c.ReleaseMaxDelay = 50*time.Millisecond, 100*time.Millisecond
	})
	WaitForLeader(t, s)
	seen := &volumeCalls{inFlight: map[string]int{}}
	nodes := map[string]*structs.Node{}
	var agents []*lockingAgent
	var hangOnce sync.Once
	for range 2 {
		n := mock.NodeWithController("dev")
		ep := &lockingAgent{calls: clientrpc.NewCalls(context.Background()), seen: seen, hangOnce: &hangOnce, hangStart: make(chan struct{})}
		nodes[n.ID] = n
		agents = append(agents, ep)
		connectAgentServing(t, s, n, ep, ep.calls)
	}
	registerVolume(t, s, namedVolume("shared"))
	req := &structs.VolumeRequest{Source: "shared", ReadOnly: true, AccessMode: structs.CSIVolumeAccessModeMultiNodeReader}
	must.NoError(t, registerJob(t, s, volumeJob("readers", 2, req)))
	var first, second *structs.Allocation
	for _, a := range waitPlaced(t, s, "readers", 2) {
		if first == nil {
			first = a
		} else {
			second = a
		}
	}
	must.NotEq(t, first.NodeID, second.NodeID, must.Sprint("placement spreads over both nodes"))
	_, err := claimFor(t, s, nodes[first.NodeID], first, "shared", req)
	must.NoError(t, err)

	// The first allocation ends: its release unpublishes the volume from
	// its node, and that call hangs.
	must.NoError(t, s.RPC("Node.UpdateAlloc", &structs.NodeUpdateAllocRequest{
		NodeID: first.NodeID, SecretID: nodes[first.NodeID].SecretID,
		Allocs: []*structs.AllocClientUpdate{{ID: first.ID, ClientStatus: structs.AllocClientStatusComplete}},
	}, &structs.GenericResponse{}))
	hanging := make(chan struct{})
	go func() {
		// Whichever agent serves the controller calls.
		select {
		case <-agents[0].hangStart:
		case <-agents[1].hangStart:
		}
		close(hanging)
	}()
	select {
	case <-hanging:
	case <-time.After(20 * time.Second):
		t.Fatal("the release's controller unpublish never came")
	}

	// The second allocation claims the volume on the other node while the
	// unpublish hangs: its publish waits until the unpublish has ended.
	_, err = claimFor(t, s, nodes[second.NodeID], second, "shared", req)
	must.NoError(t, err)
	events, overlaps := seen.snapshot()
	must.SliceEmpty(t, overlaps, must.Sprintf("two calls ran at once on the volume: %q", events))
	ext := "ext-shared"
	unpublished := fmt.Sprintf("unpublish from ext-%s ends", first.NodeID)
	published := fmt.Sprintf("publish to ext-%s begins", second.NodeID)
	iu, ip := -1, -1
	for i, e := range events {
		switch e {
		case unpublished:
			if iu < 0 {
				iu = i
			}
		case published:
			ip = i
		}
	}
	must.Positive(t, iu+1, must.Sprintf("no unpublish ended: %q", events))
	must.Greater(t, iu, ip, must.Sprintf("the publish began before the hung unpublish of %s ended: %q", ext, events))

	// The release is retried and goes through; the second claim stays.
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		v := getVolume(t, s, "shared", false)
		_, stillFirst := v.ReadClaims[first.ID]
		_, second := v.ReadClaims[second.ID]
		return !stillFirst && second && len(v.PastClaims) == 0, fmt.Errorf("read claims %d, past %d", len(v.ReadClaims), len(v.PastClaims))
	})
	_, overlaps = seen.snapshot()
	must.SliceEmpty(t, overlaps)
}
