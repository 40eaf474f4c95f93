package devplugin

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type identityServer struct {
	csi.UnimplementedIdentityServer
	p *Plugin
}

func (s *identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: PluginName, VendorVersion: PluginVersion}, nil
}

func (s *identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: t}}}
	}
	var caps []*csi.PluginCapability
	if s.p.has(CapabilityControllerService) {
		caps = append(caps, service(csi.PluginCapability_Service_CONTROLLER_SERVICE),
			service(csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE))
	}
	if s.p.has(CapabilityControllerExpand) || s.p.has(CapabilityNodeExpand) {
		// Expanding a directory needs nothing that would stop a task
		// using it, so published volumes can be expanded, unless the
		// instance was told otherwise.
		expansion := csi.PluginCapability_VolumeExpansion_ONLINE
		if !s.p.has(CapabilityOnlineExpansion) {
			expansion = csi.PluginCapability_VolumeExpansion_OFFLINE
		}
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: expansion}}})
	}
	if len(s.p.cfg.Topology) > 0 {
		// Not SNAPSHOT_ACCESSIBILITY_CONSTRAINTS: a snapshot is a copy in
		// the shared state directory, usable from every topology.
		caps = append(caps, service(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready unless a fault says otherwise (see applyFault); reading the
// state is what "ready" depends on.
func (s *identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if err := s.p.store.view(func(*state) error { return nil }); err != nil {
		// The spec's code for a plugin that is not healthy.
		return nil, errorf(codes.FailedPrecondition, "%v", err)
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
