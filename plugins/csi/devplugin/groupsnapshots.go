package devplugin

import (
	"context"
	"os"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// groupControllerServer serves group snapshots: one snapshot per volume,
// all cut under one hold of the lock, so no plugin call comes between them.
type groupControllerServer struct {
	csi.UnimplementedGroupControllerServer
	p *Plugin
}

func (s *groupControllerServer) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT}}}}}, nil
}

func (s *groupControllerServer) CreateVolumeGroupSnapshot(_ context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	sources := slices.Clone(req.GetSourceVolumeIds())
	slices.Sort(sources)
	switch {
	case req.GetName() == "":
		return nil, errorf(codes.InvalidArgument, "name is required")
	case len(sources) == 0:
		return nil, errorf(codes.InvalidArgument, "source_volume_ids are required")
	case len(slices.Compact(slices.Clone(sources))) != len(sources):
		return nil, errorf(codes.InvalidArgument, "source_volume_ids name a volume twice")
	}
	var out *csi.VolumeGroupSnapshot
	err := s.p.store.update(func(st *state) error {
		for _, g := range st.GroupSnapshots {
			if g.Name != req.GetName() {
				continue
			}
			if !slices.Equal(g.SourceVolumeIDs, sources) || !sameMap(g.Parameters, req.GetParameters()) {
				return errorf(codes.AlreadyExists, "group snapshot %q already exists (%s) of other volumes or with other parameters", g.Name, g.ID)
			}
			out = g.toCSI(st)
			return nil
		}
		for _, id := range sources {
			if st.Volumes[id] == nil {
				return errorf(codes.NotFound, "source volume %q does not exist", id)
			}
		}
		g := &groupSnapshot{ID: newID("group"), Name: req.GetName(), SourceVolumeIDs: sources,
			Parameters: cloneMap(req.GetParameters()), Created: time.Now().UTC()}
		for _, id := range sources {
			snap, err := s.p.store.cutSnapshot(st, st.Volumes[id], g.ID+"/"+id, g.ID)
			if err != nil {
				// Leave no part of a group behind.
				for _, done := range g.SnapshotIDs {
					os.RemoveAll(s.p.store.snapshotDir(done))
				}
				return err
			}
			g.SnapshotIDs = append(g.SnapshotIDs, snap.ID)
		}
		st.GroupSnapshots[g.ID] = g
		out = g.toCSI(st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: out}, nil
}

func (g *groupSnapshot) toCSI(st *state) *csi.VolumeGroupSnapshot {
	out := &csi.VolumeGroupSnapshot{GroupSnapshotId: g.ID, CreationTime: timestamppb.New(g.Created), ReadyToUse: true}
	for _, id := range g.SnapshotIDs {
		out.Snapshots = append(out.Snapshots, st.Snapshots[id].toCSI())
	}
	return out
}

// sameSnapshots checks the snapshot_ids a caller names for a group: the
// spec asks plugins that can detect a mismatch to report it.
func (g *groupSnapshot) sameSnapshots(ids []string) error {
	given := slices.Clone(ids)
	slices.Sort(given)
	have := slices.Clone(g.SnapshotIDs)
	slices.Sort(have)
	if !slices.Equal(given, have) {
		return errorf(codes.InvalidArgument, "snapshot_ids %v are not the snapshots of group snapshot %s %v", ids, g.ID, g.SnapshotIDs)
	}
	return nil
}

func (s *groupControllerServer) DeleteVolumeGroupSnapshot(_ context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	id := req.GetGroupSnapshotId()
	if id == "" {
		return nil, errorf(codes.InvalidArgument, "group_snapshot_id is required")
	}
	var deleted []string
	err := s.p.store.update(func(st *state) error {
		g := st.GroupSnapshots[id]
		if g == nil {
			return nil
		}
		if err := g.sameSnapshots(req.GetSnapshotIds()); err != nil {
			return err
		}
		for _, snap := range g.SnapshotIDs {
			delete(st.Snapshots, snap)
		}
		delete(st.GroupSnapshots, id)
		deleted = g.SnapshotIDs
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, snap := range deleted {
		if err := os.RemoveAll(s.p.store.snapshotDir(snap)); err != nil {
			s.p.logger.Warn("removing snapshot data failed", "snapshot_id", snap, "error", err)
		}
	}
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

func (s *groupControllerServer) GetVolumeGroupSnapshot(_ context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	id := req.GetGroupSnapshotId()
	if id == "" {
		return nil, errorf(codes.InvalidArgument, "group_snapshot_id is required")
	}
	var out *csi.VolumeGroupSnapshot
	err := s.p.store.view(func(st *state) error {
		g := st.GroupSnapshots[id]
		if g == nil {
			return errorf(codes.NotFound, "group snapshot %q does not exist", id)
		}
		if err := g.sameSnapshots(req.GetSnapshotIds()); err != nil {
			return err
		}
		out = g.toCSI(st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: out}, nil
}
