package server

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestForward_PausedLeader: the leader freezes (its connections held, as
// SIGSTOP holds a process). A volume registration sent to a follower, which
// forwards it to the frozen leader, is sent again to the new leader as soon
// as one is elected, well before the forwarded call's own timeout, and is
// applied once. A job registration, which may not be applied twice, is
// answered at once with an error that says its outcome is unknown. Thawed,
// the old leader catches up and the volume is still the one write.
func TestForward_PausedLeader(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) { c.pausable = true })
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)
	registerNode(t, f[0], "dev")
	// A first write through the follower opens its session to the leader.
	registerVolume(t, f[0], namedVolume("warm"))

	leader.pause()
	defer leader.resume()
	type result struct {
		err  error
		at   time.Time
		resp structs.CSIVolumeRegisterResponse
	}
	volDone := make(chan result, 1)
	jobDone := make(chan result, 1)
	start := time.Now()
	go func() {
		var r result
		r.err = f[0].RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{
			Volumes: []*structs.CSIVolume{namedVolume("frozen")}}, &r.resp)
		r.at = time.Now()
		volDone <- r
	}()
	go func() {
		err := registerJob(t, f[1], volumeJob("frozen-job", 1, &structs.VolumeRequest{Source: "warm",
			AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}))
		jobDone <- result{err: err, at: time.Now()}
	}()

	next := WaitForLeader(t, f...)
	elected := time.Now()
	t.Logf("new leader %s known %v after the pause", next.config.NodeName, elected.Sub(start).Round(time.Millisecond))

	vr := <-volDone
	must.NoError(t, vr.err)
	t.Logf("the register answered %v after the pause", vr.at.Sub(start).Round(time.Millisecond))
	// Without giving up the call it would have waited out the forwarded
	// call's timeout (ServerRPCTimeout, 10 s).
	must.Less(t, 3*time.Second, vr.at.Sub(elected), must.Sprint("the register must be answered soon after the new leader is known"))

	jr := <-jobDone
	t.Logf("the job register answered %v after the pause: %v", jr.at.Sub(start).Round(time.Millisecond), jr.err)
	if jr.err != nil {
		// Sent to the frozen leader: its outcome is unknown, and said so.
		must.Eq(t, structs.ErrCodeInternal, structs.CodeOf(jr.err), must.Sprint(jr.err))
		must.StrContains(t, jr.err.Error(), "may or may not have been applied")
		must.Less(t, 3*time.Second, jr.at.Sub(elected))
	}

	vol, err := next.State().CSIVolumeByID(nil, structs.DefaultNamespace, "frozen")
	must.NoError(t, err)
	must.NotNil(t, vol)
	applied := vol.ModifyIndex

	// Thawed, the old leader reads the request it was sent while frozen,
	// for a term it no longer leads, and refuses it: the volume is still
	// the one write.
	leader.resume()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		v, err := leader.State().CSIVolumeByID(nil, structs.DefaultNamespace, "frozen")
		if err != nil || v == nil {
			return false, err
		}
		return leader.raft.AppliedIndex() >= next.raft.AppliedIndex(), nil
	})
	WaitForLeader(t, servers...)
	registerVolume(t, next, mock.CSIVolume("dev")) // a write after the thaw, so every entry before it is applied
	for _, s := range servers {
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			v, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, "frozen")
			if err != nil || v == nil {
				return false, err
			}
			return v.ModifyIndex == applied && v.CreateIndex == vr.resp.Index, nil
		})
	}
}

// TestForward_ShutdownDuringForwardedWrite: a server that shuts down while
// a write it forwarded is in flight to the leader gives the call up. The
// leader still applies it, so the answer must say the outcome is unknown,
// never "no leader", which says nothing was applied (and which a client
// may take as leave to write something else in its place).
func TestForward_ShutdownDuringForwardedWrite(t *testing.T) {
	machines := make([]*blockingFSM, 3)
	servers := TestCluster(t, 3, func(i int, c *Config) {
		machines[i] = newBlockingFSM()
		c.wrapFSM = func(f raft.BatchingFSM) raft.BatchingFSM {
			machines[i].BatchingFSM = f
			return machines[i]
		}
	})
	for _, m := range machines {
		// Before the servers' shutdown (cleanups run last first).
		t.Cleanup(m.unblock)
	}
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	registerNode(t, f, "dev")

	// The leader's state machine holds the register's entry: by then the
	// request reached the leader, which committed it and will apply it.
	machine := machines[slices.Index(servers, leader)]
	machine.only = func(l *raft.Log) bool {
		t := structs.MessageType(l.Data[0])
		return t == structs.CSIVolumeRegisterRequestType || t == structs.CSIVolumeRegisterBatchRequestType
	}
	machine.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		done <- f.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{
			Volumes: []*structs.CSIVolume{namedVolume("in-flight")}}, &structs.CSIVolumeRegisterResponse{})
	}()
	select {
	case <-machine.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the register never reached the leader's state machine")
	}
	must.NoError(t, f.Shutdown())

	select {
	case err := <-done:
		must.Error(t, err)
		must.False(t, errors.Is(err, structs.ErrNoLeader), must.Sprintf("answered %q", err))
		must.StrContains(t, err.Error(), "may or may not have been applied")
	case <-time.After(30 * time.Second):
		t.Fatal("the forwarded write never returned")
	}
	// And it was applied.
	machine.unblock()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if v := getVolume(t, leader, "in-flight", false); v == nil {
			return false, fmt.Errorf("volume in-flight not registered")
		}
		return true, nil
	})
}

// TestForward_ShuttingDownSendsNothing: once a server has begun shutting
// down, a write that reaches it is not sent to the leader; nothing was
// applied, and the answer says so ("no leader", which may be sent again).
func TestForward_ShuttingDownSendsNothing(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	registerNode(t, f, "dev")

	// The first step of Shutdown; Raft still knows the leader.
	f.shutdownCancel()
	err := f.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{
		Volumes: []*structs.CSIVolume{namedVolume("never-sent")}}, &structs.CSIVolumeRegisterResponse{})
	must.ErrorIs(t, err, structs.ErrNoLeader)
	must.Nil(t, getVolume(t, leader, "never-sent", false))
}
