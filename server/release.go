package server

import (
	"context"
	"fmt"
	"time"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/volumewatcher"
)

// watcherBackend is the release watcher's view of the server.
type watcherBackend struct{ s *Server }

func (b watcherBackend) State() volumewatcher.State { return b.s.State() }

// NodeConnected checks, before node calls, that some server holds a
// session with the node's agent.
func (b watcherBackend) NodeConnected(ctx context.Context, nodeID string) error {
	return b.s.clientRPC.NodeReachable(ctx, nodeID)
}

func (b watcherBackend) NodeDetach(ctx context.Context, req *structs.ClientCSINodeDetachVolumeRequest) error {
	return b.s.clientRPC.NodeDetachVolume(ctx, req)
}

func (b watcherBackend) ControllerDetach(ctx context.Context, req *structs.ClientCSIControllerDetachVolumeRequest) error {
	return b.s.clientRPC.ControllerDetachVolume(ctx, req)
}

// VolumeSecrets opens the volume's secrets for a controller detach.
func (b watcherBackend) VolumeSecrets(vol *structs.CSIVolume) (structs.CSISecrets, error) {
	opened, err := b.s.openVolume(vol)
	if err != nil {
		return nil, err
	}
	return opened.Secrets, nil
}

// Checkpoint writes a claim's release state; the time is the leader's.
// Checkpoints of many claims made at once share Raft entries (see
// checkpointBatcher).
func (b watcherBackend) Checkpoint(namespace, volumeID string, claim *structs.CSIVolumeClaim, now time.Time) error {
	return b.s.checkpoints.Checkpoint(namespace, volumeID, claim, now)
}

// lockVolume takes the volume's lock for an operation that calls its
// plugin (see volumewatcher.Watcher.Lock). The wait is bounded by twice the
// deadline of one call: the holder is a release step or another claim,
// whose calls end by then; a caller told to retry (ErrCodeRetryable) does
// so later, as clients do with their claims.
func (s *Server) lockVolume(namespace, volumeID string) (func(), error) {
	ctx, cancel := context.WithTimeout(s.shutdownCtx, 2*s.config.CSICallTimeout)
	defer cancel()
	return s.volumeWatcher.Lock(ctx, namespace, volumeID)
}

// runVolumeWatcher releases claims while this server leads.
func (s *Server) runVolumeWatcher(done <-chan struct{}) {
	ctx, cancel := s.leaderContext(done)
	defer cancel()
	s.volumeWatcher.Run(ctx)
}

// detachWaitForClient bounds how long an operator's detach waits for a
// client to report the tasks of a stopped allocation stopped. It stays
// well under the deadline of a request forwarded to the leader
// (ServerRPCTimeout), so the operator hears that it waits, not a timeout.
const detachWaitForClient = 5 * time.Second

// Detach releases now the claims a volume has on a node, as an operator
// asks, and reports each step. A claim whose allocation still runs on a
// node that is up is refused: releasing it would unmount a running
// workload. A stopped allocation whose client has not reported its tasks
// stopped yet is waited for a few seconds; if the client is still at it,
// the answer is a conflict that says so (its release goes on by itself
// once the client reports).
func (e *CSIVolume) Detach(args *structs.CSIVolumeDetachRequest, reply *structs.CSIVolumeDetachResponse) error {
	if done, err := e.srv.forward("CSIVolume.Detach", args, args, reply); done {
		return err
	}
	if args.VolumeID == "" || args.NodeID == "" {
		return structs.ErrInvalid("detach needs a volume ID and a node ID")
	}
	ns := args.RequestNamespace()
	st := e.srv.State()
	vol, err := st.CSIVolumeByID(nil, ns, args.VolumeID)
	if err != nil {
		return err
	}
	if vol == nil {
		return structs.ErrNotFound("volume %q not found", args.VolumeID)
	}
	node, err := st.NodeByID(nil, args.NodeID)
	if err != nil {
		return err
	}
	nodeUp := !structs.NodeDownOrGone(node)
	found := false
	for _, m := range []map[string]*structs.CSIVolumeClaim{vol.ReadClaims, vol.WriteClaims} {
		for allocID, c := range m {
			if c.NodeID != args.NodeID {
				continue
			}
			found = true
			if vol.PastClaims[allocID] != nil {
				continue
			}
			a, err := st.AllocByID(nil, allocID)
			if err != nil {
				return err
			}
			if a != nil && !a.Terminal() && nodeUp {
				return structs.ErrConflict("volume %q: allocation %q still runs on node %q; stop it before detaching",
					vol.ID, allocID, args.NodeID)
			}
			past := c.Copy()
			past.State = structs.CSIVolumeClaimStateUnpublishing
			if err := (watcherBackend{e.srv}).Checkpoint(ns, vol.ID, past, time.Now()); err != nil {
				return err
			}
		}
	}
	for _, c := range vol.PastClaims {
		if c.NodeID == args.NodeID {
			found = true
		}
	}
	if !found {
		// Nothing is claimed there, so nothing is left to detach: a
		// repeated detach succeeds, as Nomad's does, and says so.
		reply.Steps = []string{fmt.Sprintf("volume %q has no claim on node %q: nothing to detach", vol.ID, args.NodeID)}
		e.srv.setQueryMeta(&reply.QueryMeta)
		return nil
	}
	steps, err := e.srv.volumeWatcher.Detach(e.srv.shutdownCtx, ns, vol.ID, args.NodeID, detachWaitForClient)
	reply.Steps = steps
	switch {
	case structs.CodeOf(err) == structs.ErrCodeConflict:
		// Waiting for the client: the error says all there is to say.
		return err
	case err != nil:
		return structs.Wrap(err, "detaching volume %q from node %q (steps: %v)", vol.ID, args.NodeID, steps)
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}
