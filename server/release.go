package server

import (
	"context"
	"time"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/volumewatcher"
)

// watcherBackend is the release watcher's view of the server.
type watcherBackend struct{ s *Server }

func (b watcherBackend) State() volumewatcher.State { return b.s.State() }

func (b watcherBackend) NodeDetach(req *structs.ClientCSINodeDetachVolumeRequest) error {
	return b.s.RPC("ClientCSI.NodeDetachVolume", req, &structs.ClientCSIEmptyResponse{})
}

func (b watcherBackend) ControllerDetach(req *structs.ClientCSIControllerDetachVolumeRequest) error {
	return b.s.RPC("ClientCSI.ControllerDetachVolume", req, &structs.ClientCSIEmptyResponse{})
}

// Checkpoint writes a claim's release state; the time is the leader's.
func (b watcherBackend) Checkpoint(namespace, volumeID string, claim *structs.CSIVolumeClaim, now time.Time) error {
	_, _, err := b.s.raftApply(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: volumeID, Claim: claim, Timestamp: now.UnixNano(),
		WriteRequest: structs.WriteRequest{Namespace: namespace},
	})
	return err
}

// runVolumeWatcher releases claims while this server leads.
func (s *Server) runVolumeWatcher(done <-chan struct{}) {
	ctx, cancel := s.leaderContext(done)
	defer cancel()
	s.volumeWatcher.Run(ctx)
}

// Detach releases now the claims a volume has on a node, as an operator
// asks, and reports each step. A claim whose allocation still runs on a
// ready node is refused: releasing it would unmount a running workload.
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
	nodeUp := node != nil && node.Status != structs.NodeStatusDown
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
		return structs.ErrNotFound("volume %q has no claim on node %q", vol.ID, args.NodeID)
	}
	steps, err := e.srv.volumeWatcher.Detach(context.Background(), ns, vol.ID, args.NodeID)
	reply.Steps = steps
	if err != nil {
		return structs.Wrap(err, "detaching volume %q from node %q (steps: %v)", vol.ID, args.NodeID, steps)
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}
