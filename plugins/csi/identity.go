package csi

import (
	"context"
	"errors"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/structs"
)

// PluginCapabilities are the services and constraints a plugin reports
// (GetPluginCapabilities).
type PluginCapabilities struct {
	// ControllerService: the plugin offers the controller service.
	ControllerService bool
	// VolumeAccessibilityConstraints: volumes are not equally reachable
	// from every node; topologies must be honoured.
	VolumeAccessibilityConstraints bool
	// VolumeExpansion is structs.CSIVolumeExpansionOnline when published
	// volumes can be expanded, structs.CSIVolumeExpansionOffline when only
	// unpublished ones can, "" when the plugin says neither.
	VolumeExpansion string
}

// PluginInfo returns the plugin's name and version (GetPluginInfo). A plugin
// that reports no name is refused: the spec requires one, and it identifies
// the provider.
func (c *Client) PluginInfo(ctx context.Context) (name, version string, err error) {
	resp, err := invoke(ctx, c, call{method: MethodGetPluginInfo, query: true, req: &csipb.GetPluginInfoRequest{}},
		func(ctx context.Context) (*csipb.GetPluginInfoResponse, error) {
			return c.identity.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
		})
	if err != nil {
		return "", "", err
	}
	if resp.GetName() == "" {
		return "", "", localError(MethodGetPluginInfo, "", codes.Internal, errors.New("plugin reported an empty name"))
	}
	return resp.GetName(), resp.GetVendorVersion(), nil
}

// PluginCapabilities returns the plugin's capabilities (GetPluginCapabilities).
func (c *Client) PluginCapabilities(ctx context.Context) (*PluginCapabilities, error) {
	resp, err := invoke(ctx, c, call{method: MethodGetPluginCapabilities, query: true, req: &csipb.GetPluginCapabilitiesRequest{}},
		func(ctx context.Context) (*csipb.GetPluginCapabilitiesResponse, error) {
			return c.identity.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{})
		})
	if err != nil {
		return nil, err
	}
	out := &PluginCapabilities{}
	for _, cap := range resp.GetCapabilities() {
		switch cap.GetService().GetType() {
		case csipb.PluginCapability_Service_CONTROLLER_SERVICE:
			out.ControllerService = true
		case csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS:
			out.VolumeAccessibilityConstraints = true
		}
		switch cap.GetVolumeExpansion().GetType() {
		case csipb.PluginCapability_VolumeExpansion_ONLINE:
			out.VolumeExpansion = structs.CSIVolumeExpansionOnline
		case csipb.PluginCapability_VolumeExpansion_OFFLINE:
			if out.VolumeExpansion == "" {
				out.VolumeExpansion = structs.CSIVolumeExpansionOffline
			}
		}
	}
	return out, nil
}

// Probe asks whether the plugin is ready (Probe). An answer without the
// ready field means ready, as the spec says; ready=false means the plugin
// is up but still initialising. An error means it is not healthy.
func (c *Client) Probe(ctx context.Context) (bool, error) {
	resp, err := invoke(ctx, c, call{method: MethodProbe, query: true, req: &csipb.ProbeRequest{}},
		func(ctx context.Context) (*csipb.ProbeResponse, error) {
			return c.identity.Probe(ctx, &csipb.ProbeRequest{})
		})
	if err != nil {
		return false, err
	}
	if resp.GetReady() == nil {
		return true, nil
	}
	return resp.GetReady().GetValue(), nil
}
