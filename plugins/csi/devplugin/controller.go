package devplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// defaultCapacity is the size of a volume whose request names none.
const defaultCapacity int64 = 1 << 30

type controllerServer struct {
	csi.UnimplementedControllerServer
	p *Plugin
}

func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range s.p.controllerCapabilities() {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (s *controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, errorf(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, errorf(codes.InvalidArgument, "volume_capabilities are required")
	}
	caps := make([]capability, 0, len(req.GetVolumeCapabilities()))
	for _, c := range req.GetVolumeCapabilities() {
		cp, err := toCapability(c)
		if err != nil {
			return nil, errorf(codes.InvalidArgument, "%v: only mount volumes with an access mode are supported", err)
		}
		caps = append(caps, cp)
	}
	size, sized, err := capacityFor(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	if !validMutableParameters(req.GetMutableParameters()) {
		return nil, errorf(codes.InvalidArgument, "unsupported mutable_parameters (supported: tier=standard|fast)")
	}
	var out *csi.Volume
	err = s.p.store.update(func(st *state) error {
		source, srcDir, srcSize, err := s.contentSource(st, req.GetVolumeContentSource())
		if err != nil {
			return err
		}
		topology, err := s.placeVolume(st, req.GetAccessibilityRequirements())
		if err != nil {
			return err
		}
		for _, v := range st.Volumes {
			if v.Name != req.GetName() {
				continue
			}
			// The spec's idempotency: the same name with compatible
			// arguments is the same volume.
			if why := v.incompatible(req, source); why != "" {
				return errorf(codes.AlreadyExists, "volume %q already exists (%s) but %s", v.Name, v.ID, why)
			}
			out = v.toCSI()
			return nil
		}
		if source != nil {
			if !sized && size < srcSize {
				size = srcSize
			}
			if size < srcSize {
				return errorf(codes.OutOfRange, "capacity %d is smaller than the source's %d bytes", size, srcSize)
			}
		}
		v := &volume{
			ID:                newID("vol"),
			Name:              req.GetName(),
			CapacityBytes:     size,
			Parameters:        cloneMap(req.GetParameters()),
			MutableParameters: cloneMap(req.GetMutableParameters()),
			Capabilities:      caps,
			Topology:          topology,
			Source:            source,
			Created:           time.Now().UTC(),
		}
		if err := s.p.store.makeVolumeDir(v.ID, srcDir); err != nil {
			return err
		}
		st.Volumes[v.ID] = v
		out = v.toCSI()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: out}, nil
}

// capacityFor picks a size in the range; sized reports whether the range
// asked for one.
func capacityFor(r *csi.CapacityRange) (size int64, sized bool, err error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case required < 0 || limit < 0:
		return 0, false, errorf(codes.InvalidArgument, "capacity_range must not be negative")
	case limit > 0 && limit < required:
		return 0, false, errorf(codes.InvalidArgument, "capacity_range: limit_bytes %d is below required_bytes %d", limit, required)
	case required > 0:
		return required, true, nil
	case limit > 0:
		return min(defaultCapacity, limit), true, nil
	}
	return defaultCapacity, false, nil
}

func fits(size int64, r *csi.CapacityRange) bool {
	return size >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || size <= r.GetLimitBytes())
}

// incompatible says why an existing volume does not answer a CreateVolume
// request with its name, or "" when it does.
func (v *volume) incompatible(req *csi.CreateVolumeRequest, source *contentSource) string {
	switch {
	case !fits(v.CapacityBytes, req.GetCapacityRange()):
		return fmt.Sprintf("its capacity is %d bytes", v.CapacityBytes)
	case !sameMap(v.Parameters, req.GetParameters()):
		return "with other parameters"
	case !sameMap(v.MutableParameters, req.GetMutableParameters()):
		return "with other mutable parameters"
	case (v.Source == nil) != (source == nil) || (source != nil && *v.Source != *source):
		return "from another content source"
	}
	if req := req.GetAccessibilityRequirements().GetRequisite(); len(req) > 0 && v.Topology != nil {
		if !slices.ContainsFunc(req, func(t *csi.Topology) bool { return sameMap(t.GetSegments(), v.Topology) }) {
			return "in another topology"
		}
	}
	return ""
}

func (s *controllerServer) contentSource(st *state, src *csi.VolumeContentSource) (*contentSource, string, int64, error) {
	switch {
	case src == nil:
		return nil, "", 0, nil
	case src.GetSnapshot() != nil && !s.p.has(CapabilityCreateDeleteSnapshot):
		return nil, "", 0, errorf(codes.InvalidArgument, "volumes from snapshots are not offered: this instance was started without %s",
			CapabilityCreateDeleteSnapshot)
	case src.GetVolume() != nil && !s.p.has(CapabilityCloneVolume):
		return nil, "", 0, errorf(codes.InvalidArgument, "cloning is not offered: this instance was started without %s",
			CapabilityCloneVolume)
	case src.GetSnapshot() != nil:
		id := src.GetSnapshot().GetSnapshotId()
		snap := st.Snapshots[id]
		if snap == nil {
			return nil, "", 0, errorf(codes.NotFound, "source snapshot %q does not exist", id)
		}
		return &contentSource{SnapshotID: id}, s.p.store.snapshotDir(id), snap.SizeBytes, nil
	case src.GetVolume() != nil:
		id := src.GetVolume().GetVolumeId()
		v := st.Volumes[id]
		if v == nil {
			return nil, "", 0, errorf(codes.NotFound, "source volume %q does not exist", id)
		}
		return &contentSource{VolumeID: id}, s.p.store.volumeDir(id), v.CapacityBytes, nil
	}
	return nil, "", 0, errorf(codes.InvalidArgument, "unsupported volume_content_source")
}

// placeVolume picks the topology of a new volume: the first preferred (then
// requisite) topology some node of the storage system is in. Without
// requirements the volume gets this instance's topology; when no node has a
// topology, requirements are ignored (the plugin did not advertise them).
func (s *controllerServer) placeVolume(st *state, req *csi.TopologyRequirement) (map[string]string, error) {
	candidates := append(slices.Clone(req.GetPreferred()), req.GetRequisite()...)
	if len(candidates) == 0 {
		return cloneMap(s.p.cfg.Topology), nil
	}
	withTopology := false
	for _, t := range candidates {
		if len(req.GetRequisite()) > 0 && !slices.ContainsFunc(req.GetRequisite(), func(r *csi.Topology) bool {
			return sameMap(r.GetSegments(), t.GetSegments())
		}) {
			continue
		}
		for _, n := range st.Nodes {
			withTopology = withTopology || len(n.Topology) > 0
			if len(n.Topology) > 0 && topologyMatches(t.GetSegments(), n.Topology) {
				return cloneMap(t.GetSegments()), nil
			}
		}
	}
	if !withTopology {
		return nil, nil
	}
	return nil, errorf(codes.ResourceExhausted, "no node of this storage system is in the requested topology")
}

func (v *volume) toCSI() *csi.Volume {
	out := &csi.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.CapacityBytes,
		VolumeContext: cloneMap(v.Parameters),
	}
	if v.Topology != nil {
		out.AccessibleTopology = []*csi.Topology{{Segments: maps.Clone(v.Topology)}}
	}
	switch {
	case v.Source == nil:
	case v.Source.SnapshotID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: v.Source.SnapshotID}}}
	default:
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.Source.VolumeID}}}
	}
	return out
}

// publishedNodes are the nodes a volume is controller-published to, sorted.
func (v *volume) publishedNodes() []string {
	return slices.Sorted(maps.Keys(v.Publications))
}

func (s *controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	}
	deleted := false
	err := s.p.store.update(func(st *state) error {
		v := st.Volumes[id]
		if v == nil {
			// Already gone: the spec makes deletion idempotent.
			return nil
		}
		if len(v.Publications) > 0 {
			return errorf(codes.FailedPrecondition, "volume %s is still controller-published to node(s) %s",
				id, strings.Join(v.publishedNodes(), ", "))
		}
		delete(st.Volumes, id)
		deleted = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Nothing refers to the directory once the state is saved, and IDs are
	// never reused, so it can go without the lock.
	if deleted {
		if err := os.RemoveAll(s.p.store.volumeDir(id)); err != nil {
			s.p.logger.Warn("removing volume data failed", "volume_id", id, "error", err)
		}
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (s *controllerServer) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	volID, nodeID := req.GetVolumeId(), req.GetNodeId()
	switch {
	case volID == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case nodeID == "":
		return nil, errorf(codes.InvalidArgument, "node_id is required")
	case req.GetVolumeCapability() == nil:
		return nil, errorf(codes.InvalidArgument, "volume_capability is required")
	}
	cp, err := toCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, errorf(codes.InvalidArgument, "%v: only mount volumes with an access mode are supported", err)
	}
	var pubCtx map[string]string
	err = s.p.store.update(func(st *state) error {
		v, err := s.volumeOrCreate(st, volID, cp)
		if err != nil {
			return err
		}
		n := st.Nodes[nodeID]
		if n == nil {
			return errorf(codes.NotFound, "node %q is not a node of this storage system (no instance with that node ID has started on its state directory)", nodeID)
		}
		if old := v.Publications[nodeID]; old != nil {
			if old.Capability == cp && old.ReadOnly == req.GetReadonly() {
				pubCtx = old.Context
				return nil
			}
			return errorf(codes.AlreadyExists, "volume %s is already published to node %s with access mode %s, readonly=%t",
				volID, nodeID, old.Capability.AccessMode, old.ReadOnly)
		}
		for _, other := range v.publishedNodes() {
			if err := publishConflict(volID, cp, req.GetReadonly(), other, v.Publications[other]); err != nil {
				return err
			}
		}
		if len(v.Topology) > 0 && len(n.Topology) > 0 && !topologyMatches(v.Topology, n.Topology) {
			return errorf(codes.FailedPrecondition, "volume %s is not accessible from node %s: its topology is %v, the node's %v",
				volID, nodeID, v.Topology, n.Topology)
		}
		if n.MaxVolumes > 0 {
			count := 0
			for _, other := range st.Volumes {
				if other.Publications[nodeID] != nil {
					count++
				}
			}
			if int64(count) >= n.MaxVolumes {
				return errorf(codes.ResourceExhausted, "node %s already has %d volumes published, its maximum", nodeID, count)
			}
		}
		pubCtx = map[string]string{"devicePath": s.p.store.volumeDir(volID)}
		if v.Publications == nil {
			v.Publications = map[string]*controllerPublication{}
		}
		v.Publications[nodeID] = &controllerPublication{Capability: cp, ReadOnly: req.GetReadonly(), Context: pubCtx}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: maps.Clone(pubCtx)}, nil
}

// publishConflict says whether a publication to another node forbids this
// one: single-node modes allow one node, MULTI_NODE_SINGLE_WRITER one
// writable publication.
func publishConflict(volID string, cp capability, readOnly bool, other string, pub *controllerPublication) error {
	if singleNode(cp.mode()) || singleNode(pub.Capability.mode()) {
		return errorf(codes.FailedPrecondition, "volume %s is published to node %s with access mode %s; access mode %s allows one node",
			volID, other, pub.Capability.AccessMode, cp.AccessMode)
	}
	mnsw := csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
	if !readOnly && !pub.ReadOnly && (cp.mode() == mnsw || pub.Capability.mode() == mnsw) {
		return errorf(codes.FailedPrecondition, "volume %s is published writable to node %s; %s allows one writer",
			volID, other, mnsw)
	}
	return nil
}

// volumeOrCreate finds a volume, or creates it when the plugin creates
// volumes on demand.
func (s *controllerServer) volumeOrCreate(st *state, id string, cp capability) (*volume, error) {
	if v := st.Volumes[id]; v != nil {
		return v, nil
	}
	if !s.p.cfg.CreateOnDemand {
		return nil, errorf(codes.NotFound, "volume %q does not exist", id)
	}
	// The ID becomes a directory name.
	if id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return nil, errorf(codes.NotFound, "volume %q does not exist and cannot be created with that ID", id)
	}
	v := &volume{ID: id, Name: id, CapacityBytes: defaultCapacity, Capabilities: []capability{cp},
		Topology: cloneMap(s.p.cfg.Topology), Created: time.Now().UTC()}
	if err := s.p.store.makeVolumeDir(id, ""); err != nil {
		return nil, err
	}
	st.Volumes[id] = v
	s.p.logger.Info("created volume on demand", "volume_id", id)
	return v, nil
}

func (s *controllerServer) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	volID, nodeID := req.GetVolumeId(), req.GetNodeId()
	if volID == "" {
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	}
	err := s.p.store.update(func(st *state) error {
		v := st.Volumes[volID]
		if v == nil {
			// A volume that does not exist is published nowhere.
			return nil
		}
		for _, n := range v.publishedNodes() {
			if nodeID != "" && n != nodeID {
				continue
			}
			// The CO should have unpublished and unstaged on the node
			// first; a storage system detaches anyway, but say so.
			if rec := st.Nodes[n]; rec != nil && (rec.Staged[volID] != nil || len(rec.targetsOf(volID)) > 0) {
				s.p.logger.Warn("controller-unpublishing a volume still staged or published on its node",
					"volume_id", volID, "node", n)
			}
			delete(v.Publications, n)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (s *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	case len(req.GetVolumeCapabilities()) == 0:
		return nil, errorf(codes.InvalidArgument, "volume_capabilities are required")
	}
	var v *volume
	if err := s.p.store.view(func(st *state) error {
		v = st.Volumes[req.GetVolumeId()]
		return nil
	}); err != nil {
		return nil, err
	}
	if v == nil && s.p.cfg.CreateOnDemand {
		// A volume registered by hand is taken to exist, as ControllerPublish
		// takes it: create it now, with the parameters it was registered with.
		cp, err := toCapability(req.GetVolumeCapabilities()[0])
		if err == nil {
			err = s.p.store.update(func(st *state) error {
				created, err := s.volumeOrCreate(st, req.GetVolumeId(), cp)
				if err == nil && created.Parameters == nil {
					created.Parameters = cloneMap(req.GetParameters())
				}
				v = created
				return err
			})
		}
		if err != nil && !errors.Is(err, errCapabilityInvalid) {
			return nil, err
		}
	}
	if v == nil {
		return nil, errorf(codes.NotFound, "volume %q does not exist", req.GetVolumeId())
	}
	for _, c := range req.GetVolumeCapabilities() {
		_, err := toCapability(c)
		if errors.Is(err, errCapabilityInvalid) {
			return nil, errorf(codes.InvalidArgument, "%v", err)
		}
		if err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: "only mount volumes are supported"}, nil
		}
	}
	switch {
	case req.GetParameters() != nil && !sameMap(req.GetParameters(), v.Parameters):
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "the volume was created with other parameters"}, nil
	case req.GetMutableParameters() != nil && !sameMap(req.GetMutableParameters(), v.MutableParameters):
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "the volume has other mutable parameters"}, nil
	case len(req.GetVolumeContext()) > 0 && !sameMap(req.GetVolumeContext(), v.Parameters):
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "the volume context is not the volume's"}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

func (s *controllerServer) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	out := &csi.ListVolumesResponse{}
	err := s.p.store.view(func(st *state) error {
		page, next, err := paginate(slices.Sorted(maps.Keys(st.Volumes)), req.GetStartingToken(), req.GetMaxEntries())
		if err != nil {
			return err
		}
		out.NextToken = next
		for _, id := range page {
			v := st.Volumes[id]
			e := &csi.ListVolumesResponse_Entry{Volume: v.toCSI()}
			if s.p.has("controller:LIST_VOLUMES_PUBLISHED_NODES") {
				e.Status = &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: v.publishedNodes()}
			}
			out.Entries = append(out.Entries, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *controllerServer) ControllerGetVolume(_ context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errorf(codes.InvalidArgument, "volume_id is required")
	}
	var out *csi.ControllerGetVolumeResponse
	err := s.p.store.view(func(st *state) error {
		v := st.Volumes[req.GetVolumeId()]
		if v == nil {
			return errorf(codes.NotFound, "volume %q does not exist", req.GetVolumeId())
		}
		out = &csi.ControllerGetVolumeResponse{Volume: v.toCSI(),
			Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: v.publishedNodes()}}
		return nil
	})
	return out, err
}

// tokenPrefix marks the tokens this plugin hands out: a token is the last
// ID of the previous page, so deleting that entry does not spoil it.
const tokenPrefix = "after:"

// paginate returns the page of sorted ids that starts after token.
func paginate(ids []string, token string, maxEntries int32) (page []string, next string, err error) {
	if maxEntries < 0 {
		return nil, "", errorf(codes.InvalidArgument, "max_entries must not be negative")
	}
	start := 0
	if token != "" {
		after, ok := strings.CutPrefix(token, tokenPrefix)
		if !ok {
			return nil, "", errorf(codes.Aborted, "invalid starting_token %q", token)
		}
		start, _ = slices.BinarySearch(ids, after)
		if start < len(ids) && ids[start] == after {
			start++
		}
	}
	page = ids[start:]
	if maxEntries > 0 && len(page) > int(maxEntries) {
		page = page[:maxEntries]
		next = tokenPrefix + page[len(page)-1]
	}
	return page, next, nil
}

func (s *controllerServer) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	for _, c := range req.GetVolumeCapabilities() {
		if _, err := toCapability(c); err != nil {
			// No volume with these capabilities can be made.
			return &csi.GetCapacityResponse{}, nil
		}
	}
	if seg := req.GetAccessibleTopology().GetSegments(); len(seg) > 0 {
		reachable := false
		if err := s.p.store.view(func(st *state) error {
			for _, n := range st.Nodes {
				reachable = reachable || (len(n.Topology) > 0 && topologyMatches(seg, n.Topology))
			}
			return nil
		}); err != nil {
			return nil, err
		}
		if !reachable {
			return &csi.GetCapacityResponse{}, nil
		}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(s.p.store.path(volumesDir), &fs); err != nil {
		return nil, errorf(codes.Internal, "reading free space: %v", err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: int64(fs.Bavail) * int64(fs.Bsize)}, nil
}
