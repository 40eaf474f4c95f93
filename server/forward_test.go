package server

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// A write that reaches the leader before its barrier is done waits, as a
// consistent read does: its endpoint checks it against this server's state,
// which may still lack what earlier leaders committed, and would refuse it
// wrongly ("job not found") as a definite answer. Found by the e2e fault
// suite: after a failover, stops of existing jobs came back "not found".
func TestForward_WriteWaitsForBarrier(t *testing.T) {
	s := TestServer(t, func(c *Config) { c.RPCHoldTimeout = 300 * time.Millisecond })
	WaitForLeader(t, s)
	setReady := func(ready bool) {
		s.leaderMu.Lock()
		defer s.leaderMu.Unlock()
		s.leaderReady = ready
	}
	job := volumeJob("held", 1, &structs.VolumeRequest{Source: "v", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})
	job.TaskGroups[0].Volumes = nil
	job.TaskGroups[0].Tasks[0].VolumeMounts = nil

	// Leader, barrier not done: held until the hold time runs out, and
	// nothing is written.
	setReady(false)
	err := registerJob(t, s, job)
	must.Eq(t, structs.ErrCodeNoLeader, structs.CodeOf(err), must.Sprint(err))
	got, err := s.State().JobByID(nil, structs.DefaultNamespace, job.ID)
	must.NoError(t, err)
	must.Nil(t, got)

	setReady(true)
	must.NoError(t, registerJob(t, s, job))
}

// A job with null elements is refused as invalid, not a panic: the
// endpoint copies the job before validating it, and a panic in an RPC
// goroutine ends the server. Found by FuzzParseJob.
func TestJob_RegisterNullTaskIsInvalid(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	job := volumeJob("nulls", 1, &structs.VolumeRequest{Source: "v", AccessMode: structs.CSIVolumeAccessModeMultiNodeMultiWriter})
	job.TaskGroups[0].Tasks = append(job.TaskGroups[0].Tasks, nil)
	job.TaskGroups = append(job.TaskGroups, nil)
	err := registerJob(t, s, job)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))
}
