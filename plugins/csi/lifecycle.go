package csi

import (
	"context"
	"errors"
	"maps"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/structs"
)

// This file holds the calls beyond a claim's publish and release:
// snapshots, listings and expansion.

// Snapshot is a snapshot as the plugin reports it.
type Snapshot struct {
	ID string
	// SourceVolumeID is the provider's ID of the volume it was taken of.
	SourceVolumeID string
	SizeBytes      int64
	// CreateTime is zero when the plugin did not say.
	CreateTime time.Time
	ReadyToUse bool
}

func snapshotFromCSI(s *csipb.Snapshot) *Snapshot {
	out := &Snapshot{
		ID:             s.GetSnapshotId(),
		SourceVolumeID: s.GetSourceVolumeId(),
		SizeBytes:      s.GetSizeBytes(),
		ReadyToUse:     s.GetReadyToUse(),
	}
	if t := s.GetCreationTime(); t != nil {
		out.CreateTime = t.AsTime()
	}
	return out
}

// CreateSnapshotRequest snapshots a volume (CreateSnapshot).
type CreateSnapshotRequest struct {
	// SourceVolumeID is the provider's ID of the volume.
	SourceVolumeID string
	// Name is the idempotency key: a repeat with the same name and source
	// is the same snapshot.
	Name       string
	Secrets    structs.CSISecrets
	Parameters map[string]string
}

// CreateSnapshot snapshots a volume. The plugin may answer before the
// snapshot is ready to use (ReadyToUse false).
func (c *Client) CreateSnapshot(ctx context.Context, r *CreateSnapshotRequest) (*Snapshot, error) {
	var m structs.MultiError
	checkRequired(&m, "source volume id", r.SourceVolumeID)
	checkRequired(&m, "name", r.Name)
	if err := invalidRequest(MethodCreateSnapshot, r.SourceVolumeID, &m); err != nil {
		return nil, err
	}
	req := &csipb.CreateSnapshotRequest{SourceVolumeId: r.SourceVolumeID, Name: r.Name, Secrets: r.Secrets, Parameters: r.Parameters}
	resp, err := invoke(ctx, c, call{method: MethodCreateSnapshot, volume: r.SourceVolumeID, req: req},
		func(ctx context.Context) (*csipb.CreateSnapshotResponse, error) {
			return c.controller.CreateSnapshot(ctx, req)
		})
	if err != nil {
		return nil, err
	}
	if resp.GetSnapshot().GetSnapshotId() == "" {
		return nil, localError(MethodCreateSnapshot, r.SourceVolumeID, codes.Internal,
			errors.New("plugin created a snapshot but returned no snapshot id"))
	}
	return snapshotFromCSI(resp.GetSnapshot()), nil
}

// DeleteSnapshot deletes a snapshot; one already gone (NotFound) is
// deleted as far as the caller is concerned.
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string, secrets structs.CSISecrets) error {
	var m structs.MultiError
	checkRequired(&m, "snapshot id", snapshotID)
	if err := invalidRequest(MethodDeleteSnapshot, "", &m); err != nil {
		return err
	}
	req := &csipb.DeleteSnapshotRequest{SnapshotId: snapshotID, Secrets: secrets}
	_, err := invoke(ctx, c, call{method: MethodDeleteSnapshot, req: req},
		func(ctx context.Context) (*csipb.DeleteSnapshotResponse, error) {
			return c.controller.DeleteSnapshot(ctx, req)
		})
	return c.alreadyDone(MethodDeleteSnapshot, "", err)
}

// ListSnapshotsRequest asks for a page of snapshots (ListSnapshots).
// MaxEntries 0 lets the plugin choose; StartingToken is the NextToken of
// the page before, "" for the first.
type ListSnapshotsRequest struct {
	MaxEntries    int32
	StartingToken string
	Secrets       structs.CSISecrets
}

// ListSnapshots returns one page of snapshots and the token of the next
// page ("" after the last). An ABORTED answer (see IsInvalidToken) means
// the starting token is not the plugin's.
func (c *Client) ListSnapshots(ctx context.Context, r *ListSnapshotsRequest) ([]*Snapshot, string, error) {
	if r.MaxEntries < 0 {
		var m structs.MultiError
		m.Add("max entries must not be negative")
		return nil, "", invalidRequest(MethodListSnapshots, "", &m)
	}
	req := &csipb.ListSnapshotsRequest{MaxEntries: r.MaxEntries, StartingToken: r.StartingToken, Secrets: r.Secrets}
	resp, err := invoke(ctx, c, call{method: MethodListSnapshots, query: true, req: req},
		func(ctx context.Context) (*csipb.ListSnapshotsResponse, error) {
			return c.controller.ListSnapshots(ctx, req)
		})
	if err != nil {
		return nil, "", err
	}
	out := make([]*Snapshot, 0, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		if e.GetSnapshot() != nil {
			out = append(out, snapshotFromCSI(e.GetSnapshot()))
		}
	}
	return out, resp.GetNextToken(), nil
}

// ListedVolume is one volume as ListVolumes reports it.
type ListedVolume struct {
	ExternalID    string
	CapacityBytes int64
	Context       map[string]string
	// SnapshotID or CloneID is the volume's content source, if any.
	SnapshotID string
	CloneID    string
	// PublishedNodeIDs are the provider's IDs of the nodes the volume is
	// controller-published to (LIST_VOLUMES_PUBLISHED_NODES). Spec 1.13
	// reports no volume condition here any more (it has its own health
	// calls), so none is read.
	PublishedNodeIDs []string
}

// ListVolumes returns one page of the provider's volumes and the token of
// the next page ("" after the last). An ABORTED answer (see
// IsInvalidToken) means the starting token is not the plugin's.
func (c *Client) ListVolumes(ctx context.Context, maxEntries int32, startingToken string) ([]*ListedVolume, string, error) {
	if maxEntries < 0 {
		var m structs.MultiError
		m.Add("max entries must not be negative")
		return nil, "", invalidRequest(MethodListVolumes, "", &m)
	}
	req := &csipb.ListVolumesRequest{MaxEntries: maxEntries, StartingToken: startingToken}
	resp, err := invoke(ctx, c, call{method: MethodListVolumes, query: true, req: req},
		func(ctx context.Context) (*csipb.ListVolumesResponse, error) {
			return c.controller.ListVolumes(ctx, req)
		})
	if err != nil {
		return nil, "", err
	}
	out := make([]*ListedVolume, 0, len(resp.GetEntries()))
	for _, e := range resp.GetEntries() {
		v := e.GetVolume()
		if v == nil {
			continue
		}
		out = append(out, &ListedVolume{
			ExternalID:       v.GetVolumeId(),
			CapacityBytes:    v.GetCapacityBytes(),
			Context:          maps.Clone(v.GetVolumeContext()),
			SnapshotID:       v.GetContentSource().GetSnapshot().GetSnapshotId(),
			CloneID:          v.GetContentSource().GetVolume().GetVolumeId(),
			PublishedNodeIDs: append([]string(nil), e.GetStatus().GetPublishedNodeIds()...),
		})
	}
	return out, resp.GetNextToken(), nil
}

// ControllerExpandRequest grows a volume (ControllerExpandVolume).
type ControllerExpandRequest struct {
	ExternalID string
	// CapacityMin is the size to reach at least; CapacityMax, when not 0,
	// the most the volume may have.
	CapacityMin int64
	CapacityMax int64
	// Capability is how the volume is used, when it is published; nil
	// otherwise.
	Capability *VolumeCapability
	Secrets    structs.CSISecrets
}

func checkCapacity(m *structs.MultiError, minBytes, maxBytes int64) {
	switch {
	case minBytes <= 0 && maxBytes <= 0:
		m.Add("missing capacity")
	case minBytes < 0 || maxBytes < 0:
		m.Add("capacity must not be negative")
	case maxBytes > 0 && maxBytes < minBytes:
		m.Add("capacity max (%d) is less than capacity min (%d)", maxBytes, minBytes)
	}
}

// ControllerExpandVolume grows the volume and returns its new size and
// whether every node it is published on must grow it too
// (NodeExpandVolume).
func (c *Client) ControllerExpandVolume(ctx context.Context, r *ControllerExpandRequest) (capacity int64, nodeExpansionRequired bool, err error) {
	var m structs.MultiError
	checkRequired(&m, "external volume id", r.ExternalID)
	checkCapacity(&m, r.CapacityMin, r.CapacityMax)
	if r.Capability != nil {
		checkCapability(&m, "capability", r.Capability)
	}
	if err := invalidRequest(MethodControllerExpandVolume, r.ExternalID, &m); err != nil {
		return 0, false, err
	}
	req := &csipb.ControllerExpandVolumeRequest{
		VolumeId:      r.ExternalID,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: r.CapacityMin, LimitBytes: r.CapacityMax},
		Secrets:       r.Secrets,
	}
	if r.Capability != nil {
		req.VolumeCapability = r.Capability.toCSI()
	}
	resp, err := invoke(ctx, c, call{method: MethodControllerExpandVolume, volume: r.ExternalID, req: req},
		func(ctx context.Context) (*csipb.ControllerExpandVolumeResponse, error) {
			return c.controller.ControllerExpandVolume(ctx, req)
		})
	if err != nil {
		return 0, false, err
	}
	return resp.GetCapacityBytes(), resp.GetNodeExpansionRequired(), nil
}

// NodeExpandRequest grows a volume on the node (NodeExpandVolume).
type NodeExpandRequest struct {
	ExternalID string
	// VolumePath is where the volume is published (a target path);
	// StagingPath where it is staged, when the node plugin stages.
	VolumePath  string
	StagingPath string
	CapacityMin int64
	CapacityMax int64
	Capability  *VolumeCapability
	Secrets     structs.CSISecrets
}

// NodeExpandVolume grows the volume on this node and returns the size the
// node now sees (0 when the plugin does not say).
func (c *Client) NodeExpandVolume(ctx context.Context, r *NodeExpandRequest) (int64, error) {
	var m structs.MultiError
	checkRequired(&m, "external volume id", r.ExternalID)
	checkPath(&m, "volume path", r.VolumePath, false)
	checkPath(&m, "staging path", r.StagingPath, true)
	checkCapacity(&m, r.CapacityMin, r.CapacityMax)
	if r.Capability != nil {
		checkCapability(&m, "capability", r.Capability)
	}
	if err := invalidRequest(MethodNodeExpandVolume, r.ExternalID, &m); err != nil {
		return 0, err
	}
	req := &csipb.NodeExpandVolumeRequest{
		VolumeId:          r.ExternalID,
		VolumePath:        r.VolumePath,
		StagingTargetPath: r.StagingPath,
		CapacityRange:     &csipb.CapacityRange{RequiredBytes: r.CapacityMin, LimitBytes: r.CapacityMax},
		Secrets:           r.Secrets,
	}
	if r.Capability != nil {
		req.VolumeCapability = r.Capability.toCSI()
	}
	resp, err := invoke(ctx, c, call{method: MethodNodeExpandVolume, volume: r.ExternalID, req: req},
		func(ctx context.Context) (*csipb.NodeExpandVolumeResponse, error) {
			return c.node.NodeExpandVolume(ctx, req)
		})
	if err != nil {
		return 0, err
	}
	return resp.GetCapacityBytes(), nil
}
