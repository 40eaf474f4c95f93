package devplugin

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// This file holds the controller calls beyond the claim lifecycle:
// snapshots, expansion, modification and health.

func (s *controllerServer) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	switch {
	case req.GetName() == "":
		return nil, errorf(codes.InvalidArgument, "name is required")
	case req.GetSourceVolumeId() == "":
		return nil, errorf(codes.InvalidArgument, "source_volume_id is required")
	}
	var out *csi.Snapshot
	err := s.p.store.update(func(st *state) error {
		for _, snap := range st.Snapshots {
			if snap.Name != req.GetName() {
				continue
			}
			if snap.SourceVolumeID != req.GetSourceVolumeId() {
				return errorf(codes.AlreadyExists, "snapshot %q already exists (%s) of volume %s",
					snap.Name, snap.ID, snap.SourceVolumeID)
			}
			out = snap.toCSI()
			return nil
		}
		v := st.Volumes[req.GetSourceVolumeId()]
		if v == nil {
			return errorf(codes.NotFound, "source volume %q does not exist", req.GetSourceVolumeId())
		}
		snap, err := s.p.store.cutSnapshot(st, v, req.GetName(), "")
		if err != nil {
			return err
		}
		out = snap.toCSI()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: out}, nil
}

// cutSnapshot copies a volume's data into a new snapshot. The copy is made
// under the lock, so it is whole when it is listed.
func (s *store) cutSnapshot(st *state, v *volume, name, groupID string) (*snapshot, error) {
	snap := &snapshot{ID: newID("snap"), Name: name, SourceVolumeID: v.ID, SizeBytes: v.CapacityBytes,
		GroupID: groupID, Created: time.Now().UTC()}
	if err := copyTree(s.volumeDir(v.ID), s.snapshotDir(snap.ID)); err != nil {
		os.RemoveAll(s.snapshotDir(snap.ID))
		return nil, errorf(codes.Internal, "copying volume %s: %v", v.ID, err)
	}
	st.Snapshots[snap.ID] = snap
	return snap, nil
}

func (snap *snapshot) toCSI() *csi.Snapshot {
	out := &csi.Snapshot{
		SnapshotId:      snap.ID,
		SourceVolumeId:  snap.SourceVolumeID,
		SizeBytes:       snap.SizeBytes,
		CreationTime:    timestamppb.New(snap.Created),
		ReadyToUse:      true,
		GroupSnapshotId: snap.GroupID,
	}
	return out
}

func (s *controllerServer) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, errorf(codes.InvalidArgument, "snapshot_id is required")
	}
	deleted := false
	err := s.p.store.update(func(st *state) error {
		snap := st.Snapshots[id]
		if snap == nil {
			return nil
		}
		if snap.GroupID != "" {
			return errorf(codes.InvalidArgument, "snapshot %s is part of group snapshot %s; delete the group", id, snap.GroupID)
		}
		// Volumes made from a snapshot are copies, so nothing keeps one
		// in use.
		delete(st.Snapshots, id)
		deleted = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if deleted {
		if err := os.RemoveAll(s.p.store.snapshotDir(id)); err != nil {
			s.p.logger.Warn("removing snapshot data failed", "snapshot_id", id, "error", err)
		}
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

func (s *controllerServer) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	out := &csi.ListSnapshotsResponse{}
	err := s.p.store.view(func(st *state) error {
		var ids []string
		for _, id := range slices.Sorted(maps.Keys(st.Snapshots)) {
			snap := st.Snapshots[id]
			if (req.GetSnapshotId() == "" || id == req.GetSnapshotId()) &&
				(req.GetSourceVolumeId() == "" || snap.SourceVolumeID == req.GetSourceVolumeId()) {
				ids = append(ids, id)
			}
		}
		page, next, err := paginate(ids, req.GetStartingToken(), req.GetMaxEntries())
		if err != nil {
			return err
		}
		out.NextToken = next
		for _, id := range page {
			out.Entries = append(out.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: st.Snapshots[id].toCSI()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *controllerServer) GetSnapshot(_ context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, errorf(codes.InvalidArgument, "snapshot_id is required")
	}
	var out *csi.Snapshot
	err := s.p.store.view(func(st *state) error {
		snap := st.Snapshots[req.GetSnapshotId()]
		if snap == nil {
			return errorf(codes.NotFound, "snapshot %q does not exist", req.GetSnapshotId())
		}
		out = snap.toCSI()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.GetSnapshotResponse{Snapshot: out}, nil
}

func (s *controllerServer) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case req.GetCapacityRange() == nil:
		return nil, errorf(codes.InvalidArgument, "capacity_range is required")
	}
	if req.GetVolumeCapability() != nil {
		if _, err := toCapability(req.GetVolumeCapability()); err != nil {
			return nil, errorf(codes.InvalidArgument, "%v: only mount volumes are supported", err)
		}
	}
	size, _, err := capacityFor(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	var capacity int64
	err = s.p.store.update(func(st *state) error {
		v := st.Volumes[req.GetVolumeId()]
		if v == nil {
			return errorf(codes.NotFound, "volume %q does not exist", req.GetVolumeId())
		}
		if limit := req.GetCapacityRange().GetLimitBytes(); limit > 0 && limit < v.CapacityBytes {
			return errorf(codes.OutOfRange, "volume %s has %d bytes; volumes do not shrink", v.ID, v.CapacityBytes)
		}
		if size > v.CapacityBytes && len(v.Publications) > 0 && !s.p.has(CapabilityOnlineExpansion) {
			return errorf(codes.FailedPrecondition, "volume %s is controller-published to node(s) %s and this instance expands volumes offline only",
				v.ID, strings.Join(v.publishedNodes(), ", "))
		}
		// Asking for less than the volume has is asking for what is done.
		v.CapacityBytes = max(v.CapacityBytes, size)
		capacity = v.CapacityBytes
		return nil
	})
	if err != nil {
		return nil, err
	}
	// With node expansion, a node sees the new size once NodeExpandVolume
	// grew it there (see nodeServer.sizeOn); without, at once.
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: capacity, NodeExpansionRequired: s.p.has(CapabilityNodeExpand)}, nil
}

func (s *controllerServer) ControllerModifyVolume(_ context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case len(req.GetMutableParameters()) == 0:
		return nil, errorf(codes.InvalidArgument, "mutable_parameters are required")
	}
	// Checked before the volume is looked at: an invalid request changes
	// nothing.
	if !validMutableParameters(req.GetMutableParameters()) {
		return nil, errorf(codes.InvalidArgument, "unsupported mutable_parameters (supported: tier=standard|fast)")
	}
	err := s.p.store.update(func(st *state) error {
		v := st.Volumes[req.GetVolumeId()]
		if v == nil {
			return errorf(codes.NotFound, "volume %q does not exist", req.GetVolumeId())
		}
		if v.MutableParameters == nil {
			v.MutableParameters = map[string]string{}
		}
		maps.Copy(v.MutableParameters, req.GetMutableParameters())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// volumeHealth reports what can go wrong with a directory: it can vanish.
func (s *store) volumeHealth(id string) *csi.VolumeHealth {
	h := &csi.VolumeHealth{VolumeId: id}
	if fi, err := os.Stat(s.volumeDir(id)); err != nil || !fi.IsDir() {
		h.HealthStatuses = append(h.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
			Status: csi.VolumeHealthErrorType_DATA_LOSS, Reason: "DataDirectoryMissing",
			Message: "the volume's data directory is gone"})
	}
	return h
}

func (s *controllerServer) ControllerGetVolumeHealth(_ context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	}
	err := s.p.store.view(func(st *state) error {
		if st.Volumes[req.GetVolumeId()] == nil {
			return errorf(codes.NotFound, "volume %q does not exist", req.GetVolumeId())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: s.p.store.volumeHealth(req.GetVolumeId())}, nil
}

// ControllerListVolumeHealth lists the volumes with a health problem only,
// as the spec asks.
func (s *controllerServer) ControllerListVolumeHealth(_ context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	var ids []string
	if err := s.p.store.view(func(st *state) error {
		ids = slices.Sorted(maps.Keys(st.Volumes))
		return nil
	}); err != nil {
		return nil, err
	}
	var sick []string
	health := map[string]*csi.VolumeHealth{}
	for _, id := range ids {
		if h := s.p.store.volumeHealth(id); len(h.HealthStatuses) > 0 {
			sick = append(sick, id)
			health[id] = h
		}
	}
	page, next, err := paginate(sick, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	out := &csi.ControllerListVolumeHealthResponse{NextToken: next}
	for _, id := range page {
		out.Entries = append(out.Entries, health[id])
	}
	return out, nil
}
