package server

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

// TestForward_RefusedClaimIsNotGrantedByItsLateCopy: a claim forwarded by
// a follower to a leader that freezes is given up when a new leader is
// elected and sent again to it (CSIVolume.Claim is an idempotent write),
// which refuses it: the volume is held. The first copy is still in the
// frozen leader's socket. Thawed, that leader read it and forwarded it to
// the new leader which, the conflicting claim freed meanwhile, granted it:
// a claim its caller was told was refused (found by the fault suite, seed
// 11092789914371261528). The copy was forwarded for the old leader's term,
// so it is now refused and nothing is applied.
func TestForward_RefusedClaimIsNotGrantedByItsLateCopy(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) { c.pausable = true; fastRelease(i, c) })
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)

	node := mock.NodeWithController("dev")
	ep := &agentEndpoint{}
	connectAgent(t, f[1], node, ep)
	registerVolume(t, leader, namedVolume("rel"))
	snw := structs.CSIVolumeAccessModeSingleNodeWriter
	req := &structs.VolumeRequest{Source: "rel", AccessMode: snw, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}

	must.NoError(t, registerJob(t, leader, volumeJob("holder", 1, &structs.VolumeRequest{Source: "rel", AccessMode: snw})))
	var a *structs.Allocation
	for _, x := range waitPlaced(t, leader, "holder", 1) {
		a = x
	}
	// Placed before any claim is taken, as the fault suite's jobs are.
	must.NoError(t, registerJob(t, leader, volumeJob("next", 1, &structs.VolumeRequest{Source: "rel", AccessMode: snw})))
	var b *structs.Allocation
	for _, x := range waitPlaced(t, leader, "next", 1) {
		b = x
	}
	_, err := claimFor(t, leader, node, a, "rel", req)
	must.NoError(t, err)

	// Hold holder's release: its node detach fails (retryable).
	ep.setFail(structs.ErrCodeRetryable, "node-detach")
	stopJob(t, leader, node, "holder")
	// next's claim is refused while holder's past claim is held; this
	// also opens f[0]'s session to the leader.
	_, err = claimFor(t, f[0], node, b, "rel", req)
	must.Eq(t, structs.ErrCodeMaxClaims, structs.CodeOf(err), must.Sprint(err))

	leader.pause()
	defer leader.resume()
	done := make(chan error, 1)
	go func() {
		_, err := claimFor(t, f[0], node, b, "rel", req)
		done <- err
	}()
	next := WaitForLeader(t, f...)
	claimErr := <-done
	t.Logf("claim of next through %s answered: %v", f[0].config.NodeName, claimErr)
	must.Eq(t, structs.ErrCodeMaxClaims, structs.CodeOf(claimErr), must.Sprint(claimErr))

	// The release of holder's claim completes on the new leader.
	ep.setFail("", "")
	waitFreed(t, next, "rel")
	t.Logf("holder's claim freed on the new leader %s", next.config.NodeName)

	// Unfixed, the late copy was granted within half a second of the
	// thaw; nothing can make this check fail spuriously.
	leader.resume()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		vol, err := next.State().CSIVolumeByID(nil, structs.DefaultNamespace, "rel")
		must.NoError(t, err)
		if c := vol.WriteClaims[b.ID]; c != nil {
			t.Fatalf("allocation %s holds a write claim (index %d) although its only claim after the pause was answered %q",
				b.ID, vol.ModifyIndex, claimErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("no claim for the refused allocation within 3s of the thaw")
}
