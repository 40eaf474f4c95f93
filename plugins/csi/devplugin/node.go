package devplugin

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

type nodeServer struct {
	csi.UnimplementedNodeServer
	p *Plugin
}

func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range s.p.nodeCapabilities() {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	out := &csi.NodeGetInfoResponse{NodeId: s.p.cfg.NodeID, MaxVolumesPerNode: s.p.cfg.MaxVolumesPerNode}
	if len(s.p.cfg.Topology) > 0 {
		out.AccessibleTopology = &csi.Topology{Segments: maps.Clone(s.p.cfg.Topology)}
	}
	return out, nil
}

// nodeCapability checks the capability of a node call: a missing one is an
// invalid argument, one the volume cannot have "exceeds capabilities".
func nodeCapability(c *csi.VolumeCapability) (capability, error) {
	if c == nil {
		return capability{}, errorf(codes.InvalidArgument, "volume_capability is required")
	}
	cp, err := toCapability(c)
	switch {
	case errors.Is(err, errCapabilityUnsupported):
		return cp, errorf(codes.FailedPrecondition, "%v: only mount volumes are supported", err)
	case err != nil:
		return cp, errorf(codes.InvalidArgument, "%v", err)
	}
	return cp, nil
}

// controllerPublished returns the volume and its controller publication to
// this node, which every node call that uses a volume needs first. An
// instance without PUBLISH_UNPUBLISH_VOLUME publishes nothing: the
// publication is then the call's own capability cp, writable.
func (s *nodeServer) controllerPublished(st *state, volID string, cp capability, given map[string]string) (*volume, *controllerPublication, error) {
	v := st.Volumes[volID]
	if v == nil {
		return nil, nil, errorf(codes.NotFound, "volume %q does not exist", volID)
	}
	if !s.p.has(rpcCapability["ControllerPublishVolume"]) {
		return v, &controllerPublication{Capability: cp}, nil
	}
	pub := v.Publications[s.p.cfg.NodeID]
	if pub == nil {
		return nil, nil, errorf(codes.FailedPrecondition,
			"volume %s is not controller-published to node %s: ControllerPublishVolume must succeed first", volID, s.p.cfg.NodeID)
	}
	// The CO must hand on what ControllerPublishVolume returned.
	if !sameMap(given, pub.Context) {
		return nil, nil, errorf(codes.InvalidArgument,
			"publish_context is not the one ControllerPublishVolume returned for volume %s on node %s", volID, s.p.cfg.NodeID)
	}
	return v, pub, nil
}

func (s *nodeServer) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	volID, path := req.GetVolumeId(), req.GetStagingTargetPath()
	switch {
	case volID == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case path == "":
		return nil, errorf(codes.InvalidArgument, "staging_target_path is required")
	case !filepath.IsAbs(path):
		return nil, errorf(codes.InvalidArgument, "staging_target_path %q is not absolute", path)
	}
	cp, err := nodeCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return nil, errorf(codes.FailedPrecondition, "staging_target_path %s is not a directory (the CO creates it)", path)
	}
	err = s.p.store.update(func(st *state) error {
		v, pub, err := s.controllerPublished(st, volID, cp, req.GetPublishContext())
		if err != nil {
			return err
		}
		if pub.Capability.AccessMode != cp.AccessMode {
			return errorf(codes.FailedPrecondition, "volume %s was controller-published with access mode %s, not %s",
				volID, pub.Capability.AccessMode, cp.AccessMode)
		}
		n := st.node(s.p.cfg.NodeID)
		if old := n.Staged[volID]; old != nil {
			if old.Path != path {
				return errorf(codes.FailedPrecondition, "volume %s is already staged on node %s at %s", volID, n.ID, old.Path)
			}
			if old.Capability != cp {
				return errorf(codes.AlreadyExists, "volume %s is already staged at %s with another capability", volID, path)
			}
			return nil
		}
		n.Staged[volID] = &staging{Path: path, Capability: cp}
		n.noteSize(v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (s *nodeServer) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	volID, path := req.GetVolumeId(), req.GetStagingTargetPath()
	switch {
	case volID == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case path == "":
		return nil, errorf(codes.InvalidArgument, "staging_target_path is required")
	}
	err := s.p.store.update(func(st *state) error {
		n := st.node(s.p.cfg.NodeID)
		stg := n.Staged[volID]
		if stg == nil || stg.Path != path {
			if st.Volumes[volID] == nil {
				return errorf(codes.NotFound, "volume %q does not exist", volID)
			}
			// Not staged there: nothing to undo.
			return nil
		}
		// Reference counting: every publication from this staging must be
		// gone before it is.
		if targets := n.targetsOf(volID); len(targets) > 0 {
			return errorf(codes.FailedPrecondition, "volume %s is still published on node %s at %v: NodeUnpublishVolume must succeed first",
				volID, n.ID, targets)
		}
		delete(n.Staged, volID)
		delete(n.Sizes, volID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// targetsOf are the target paths a volume is published at on the node,
// sorted.
func (n *node) targetsOf(volID string) []string {
	var out []string
	for target, pub := range n.Published {
		if pub.VolumeID == volID {
			out = append(out, target)
		}
	}
	slices.Sort(out)
	return out
}

func (s *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	volID, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	switch {
	case volID == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case target == "":
		return nil, errorf(codes.InvalidArgument, "target_path is required")
	case !filepath.IsAbs(target):
		return nil, errorf(codes.InvalidArgument, "target_path %q is not absolute", target)
	}
	cp, err := nodeCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	stages := s.p.has(CapabilityStageUnstage)
	switch {
	case stages && staging == "":
		return nil, errorf(codes.FailedPrecondition, "staging_target_path is required: the plugin has STAGE_UNSTAGE_VOLUME")
	case !stages && staging != "":
		return nil, errorf(codes.InvalidArgument, "staging_target_path %s given, but this instance has no STAGE_UNSTAGE_VOLUME: nothing was staged", staging)
	}
	err = s.p.store.update(func(st *state) error {
		v, pub, err := s.controllerPublished(st, volID, cp, req.GetPublishContext())
		if err != nil {
			return err
		}
		n := st.node(s.p.cfg.NodeID)
		stg := n.Staged[volID]
		switch {
		case stages && stg == nil:
			return errorf(codes.FailedPrecondition, "volume %s is not staged on node %s: NodeStageVolume must succeed first", volID, n.ID)
		case stages && stg.Path != staging:
			return errorf(codes.FailedPrecondition, "volume %s is staged on node %s at %s, not %s", volID, n.ID, stg.Path, staging)
		case !stages && pub.Capability.AccessMode != cp.AccessMode:
			return errorf(codes.FailedPrecondition, "volume %s was controller-published with access mode %s, not %s",
				volID, pub.Capability.AccessMode, cp.AccessMode)
		case pub.ReadOnly && !req.GetReadonly():
			return errorf(codes.FailedPrecondition, "volume %s was controller-published read-only", volID)
		}
		if old := n.Published[target]; old != nil {
			if old.VolumeID != volID {
				return errorf(codes.FailedPrecondition, "target_path %s is in use by volume %s", target, old.VolumeID)
			}
			if old.Capability != cp || old.ReadOnly != req.GetReadonly() || old.StagingPath != staging {
				return errorf(codes.AlreadyExists, "volume %s is already published at %s with other arguments", volID, target)
			}
			// The same call again: make sure the link is still there.
			return s.link(target, v.ID)
		}
		for _, other := range n.targetsOf(volID) {
			prev := n.Published[other]
			if prev.Capability.AccessMode != cp.AccessMode {
				return errorf(codes.FailedPrecondition, "volume %s is published at %s with access mode %s, not %s",
					volID, other, prev.Capability.AccessMode, cp.AccessMode)
			}
			if !multiTarget(cp.mode()) {
				return errorf(codes.FailedPrecondition, "volume %s is already published on node %s at %s; access mode %s allows one target",
					volID, n.ID, other, cp.AccessMode)
			}
		}
		if err := s.link(target, v.ID); err != nil {
			return err
		}
		n.Published[target] = &publication{VolumeID: volID, StagingPath: staging, Capability: cp, ReadOnly: req.GetReadonly()}
		n.noteSize(v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// link makes target a symbolic link to the volume's data directory. The CO
// creates the parent; an empty directory at target (some COs create it)
// is replaced.
func (s *nodeServer) link(target, volID string) error {
	dir := s.p.store.volumeDir(volID)
	if fi, err := os.Stat(filepath.Dir(target)); err != nil || !fi.IsDir() {
		return errorf(codes.FailedPrecondition, "the parent of target_path %s is not a directory (the CO creates it)", target)
	}
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return errorf(codes.Internal, "examining target_path: %v", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		if dest, _ := os.Readlink(target); dest == dir {
			return nil
		}
		return errorf(codes.FailedPrecondition, "target_path %s is a link to something else", target)
	case fi.IsDir():
		if err := os.Remove(target); err != nil {
			return errorf(codes.FailedPrecondition, "target_path %s is a directory that is not empty", target)
		}
	default:
		return errorf(codes.FailedPrecondition, "target_path %s exists and is not a directory", target)
	}
	if err := os.Symlink(dir, target); err != nil {
		return errorf(codes.Internal, "creating target_path: %v", err)
	}
	return nil
}

func (s *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volID, target := req.GetVolumeId(), req.GetTargetPath()
	switch {
	case volID == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case target == "":
		return nil, errorf(codes.InvalidArgument, "target_path is required")
	}
	err := s.p.store.update(func(st *state) error {
		n := st.node(s.p.cfg.NodeID)
		pub := n.Published[target]
		if pub == nil || pub.VolumeID != volID {
			if st.Volumes[volID] == nil {
				return errorf(codes.NotFound, "volume %q does not exist", volID)
			}
			// Not published there: nothing to undo.
			return nil
		}
		fi, err := os.Lstat(target)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return errorf(codes.Internal, "examining target_path: %v", err)
		case fi.Mode()&fs.ModeSymlink != 0:
			if err := os.Remove(target); err != nil {
				return errorf(codes.Internal, "removing target_path: %v", err)
			}
		default:
			// Something replaced the link; it is not ours to delete.
			s.p.logger.Warn("target path is no longer the plugin's link; leaving it", "target_path", target)
		}
		delete(n.Published, target)
		if n.Staged[volID] == nil && len(n.targetsOf(volID)) == 0 {
			delete(n.Sizes, volID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// onNode finds a volume staged or published at path on this node; the
// node calls that take a volume path need one.
func (s *nodeServer) onNode(st *state, volID, path string) (*volume, error) {
	v := st.Volumes[volID]
	if v == nil {
		return nil, errorf(codes.NotFound, "volume %q does not exist", volID)
	}
	n := st.Nodes[s.p.cfg.NodeID]
	if n != nil {
		if stg := n.Staged[volID]; stg != nil && (path == "" || stg.Path == path) {
			return v, nil
		}
		if pub := n.Published[path]; pub != nil && pub.VolumeID == volID {
			return v, nil
		}
		if path == "" && len(n.targetsOf(volID)) > 0 {
			return v, nil
		}
	}
	return nil, errorf(codes.NotFound, "volume %s is not staged or published at %q on node %s", volID, path, s.p.cfg.NodeID)
}

// noteSize records, when the volume is first staged or published on the
// node, the size the node sees: with node expansion, it grows only through
// NodeExpandVolume.
func (n *node) noteSize(v *volume) {
	if _, ok := n.Sizes[v.ID]; !ok {
		n.Sizes[v.ID] = v.CapacityBytes
	}
}

// sizeOn is the size of v as this node sees it: what it was when the node
// took it, grown by NodeExpandVolume, for an instance with node expansion;
// the controller's size otherwise.
func (s *nodeServer) sizeOn(st *state, v *volume) int64 {
	if n := st.Nodes[s.p.cfg.NodeID]; n != nil && s.p.has(CapabilityNodeExpand) {
		if size, ok := n.Sizes[v.ID]; ok {
			return size
		}
	}
	return v.CapacityBytes
}

func (s *nodeServer) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case req.GetVolumePath() == "":
		return nil, errorf(codes.InvalidArgument, "volume_path is required")
	}
	var (
		v    *volume
		size int64
	)
	if err := s.p.store.view(func(st *state) (err error) {
		if v, err = s.onNode(st, req.GetVolumeId(), req.GetVolumePath()); err == nil {
			size = s.sizeOn(st, v)
		}
		return err
	}); err != nil {
		return nil, err
	}
	used, inodes, err := diskUsage(s.p.store.volumeDir(v.ID))
	if err != nil {
		return nil, errorf(codes.Internal, "measuring volume %s: %v", v.ID, err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: size, Used: used, Available: max(0, size-used)},
		{Unit: csi.VolumeUsage_INODES, Used: inodes},
	}}, nil
}

func (s *nodeServer) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case req.GetVolumePath() == "":
		return nil, errorf(codes.InvalidArgument, "volume_path is required")
	}
	if req.GetVolumeCapability() != nil {
		if _, err := nodeCapability(req.GetVolumeCapability()); err != nil {
			return nil, err
		}
	}
	var v *volume
	err := s.p.store.update(func(st *state) (err error) {
		if v, err = s.onNode(st, req.GetVolumeId(), req.GetVolumePath()); err != nil {
			return err
		}
		// The node's view of the size catches up with the controller's,
		// as a file system grown into a larger device would.
		if req.GetCapacityRange().GetRequiredBytes() > v.CapacityBytes {
			return errorf(codes.OutOfRange, "volume %s has %d bytes: ControllerExpandVolume must grow it first", v.ID, v.CapacityBytes)
		}
		st.node(s.p.cfg.NodeID).Sizes[v.ID] = v.CapacityBytes
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: v.CapacityBytes}, nil
}

func (s *nodeServer) NodeGetVolumeHealth(_ context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	}
	var (
		v       *volume
		targets []string
	)
	if err := s.p.store.view(func(st *state) (err error) {
		if v, err = s.onNode(st, req.GetVolumeId(), req.GetVolumePublishPath()); err == nil {
			targets = st.Nodes[s.p.cfg.NodeID].targetsOf(v.ID)
		}
		return err
	}); err != nil {
		return nil, err
	}
	health := s.p.store.volumeHealth(v.ID)
	for _, t := range targets {
		if dest, _ := os.Readlink(t); dest != s.p.store.volumeDir(v.ID) {
			health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
				Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: "PublicationBroken",
				Message: "the target path " + t + " no longer leads to the volume"})
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: health}, nil
}

func (s *nodeServer) NodeGetStorageHealth(context.Context, *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	out := &csi.NodeGetStorageHealthResponse{}
	if fi, err := os.Stat(s.p.store.path(volumesDir)); err != nil || !fi.IsDir() {
		out.BackendHealth = append(out.BackendHealth, &csi.NodeGetStorageHealthResponse_StorageBackendHealth{
			Status: csi.StorageHealthErrorType_STORAGE_UNREACHABLE, Reason: "StateDirectoryUnreachable",
			Message: "the volumes directory of the state directory cannot be read"})
	}
	return out, nil
}
