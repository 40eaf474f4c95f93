package csi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volplane/volplane/structs"
)

// Health descriptions of a fingerprint.
const (
	HealthyDescription  = "healthy"
	NotReadyDescription = "plugin is not ready: Probe returned ready=false"
)

// fingerprintError is a Fingerprint failure whose text is the reason alone,
// fit for a plugin's health description ("plugin socket /x/csi.sock: no
// such file", "not a CSI plugin: unknown service csi.v1.Identity"). The
// *Error beneath stays reachable, with its gRPC code.
type fingerprintError struct {
	reason string
	err    error
}

func (e *fingerprintError) Error() string { return e.reason }
func (e *fingerprintError) Unwrap() error { return e.err }

// Fingerprint describes the plugin's controller and/or node service as the
// client reports them to the servers; a side the plugin does not run is
// nil. typ is how the plugin is run; "" means decide from the plugin's own
// capabilities: a monolith if it offers the controller service, else a node
// plugin.
//
// Health comes from Probe: ready=false gives an unhealthy fingerprint with a
// description, still filled in as far as the plugin answers. An error
// (socket missing, not a CSI plugin, Probe or a capability call failing on
// a ready plugin) gives no fingerprint and an error whose text says why.
func (c *Client) Fingerprint(ctx context.Context, pluginID string, typ structs.CSIPluginType) (controller, node *structs.CSIInfo, err error) {
	if typ != "" && !typ.Valid() {
		return nil, nil, fmt.Errorf("plugin %q: unknown plugin type %q", pluginID, typ)
	}
	if err := c.checkSocket(); err != nil {
		return nil, nil, &fingerprintError{
			reason: err.Error(),
			err:    wrapError(MethodGetPluginInfo, "", status.Error(codes.Unavailable, err.Error()), nil),
		}
	}
	name, version, err := c.PluginInfo(ctx)
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			// A gRPC server without the Identity service: some other
			// program owns the socket.
			return nil, nil, &fingerprintError{reason: "not a CSI plugin: " + statusMessage(err), err: err}
		}
		return nil, nil, err
	}
	caps, err := c.PluginCapabilities(ctx)
	if err != nil {
		return nil, nil, err
	}
	if typ == "" {
		typ = structs.CSIPluginTypeNode
		if caps.ControllerService {
			typ = structs.CSIPluginTypeMonolith
		}
	}
	runsController := typ == structs.CSIPluginTypeController || typ == structs.CSIPluginTypeMonolith
	runsNode := typ == structs.CSIPluginTypeNode || typ == structs.CSIPluginTypeMonolith
	if runsController && !caps.ControllerService {
		return nil, nil, fmt.Errorf("plugin %q is run as a %s plugin but does not offer the controller service", pluginID, typ)
	}
	ready, err := c.Probe(ctx)
	if err != nil {
		return nil, nil, err
	}

	base := structs.CSIInfo{
		PluginID:                 pluginID,
		Healthy:                  ready,
		HealthDescription:        HealthyDescription,
		UpdateTime:               time.Now(),
		Provider:                 name,
		ProviderVersion:          version,
		RequiresControllerPlugin: caps.ControllerService,
		RequiresTopologies:       caps.VolumeAccessibilityConstraints,
	}
	// A plugin that is not ready may not answer the rest yet: what it
	// cannot answer goes into the description instead of failing the
	// fingerprint, so the servers see it as present but unhealthy.
	var problems []string
	tolerate := func(err error) error {
		if err == nil || ready {
			return err
		}
		problems = append(problems, err.Error())
		return nil
	}

	if runsController {
		info, err := c.ControllerCapabilities(ctx)
		if err := tolerate(err); err != nil {
			return nil, nil, err
		}
		if info == nil {
			info = &structs.CSIControllerInfo{}
		}
		info.VolumeExpansion = caps.VolumeExpansion
		controller = base.Copy()
		controller.ControllerInfo = info
	}
	if runsNode {
		info, err := c.nodeFingerprint(ctx)
		if err := tolerate(err); err != nil {
			return nil, nil, err
		}
		if info == nil {
			info = &structs.CSINodeInfo{}
		}
		node = base.Copy()
		node.NodeInfo = info
	}

	if !ready {
		desc := strings.Join(append([]string{NotReadyDescription}, problems...), "; ")
		for _, i := range []*structs.CSIInfo{controller, node} {
			if i != nil {
				i.HealthDescription = desc
			}
		}
	}
	return controller, node, nil
}

// nodeFingerprint combines NodeGetCapabilities and NodeGetInfo.
func (c *Client) nodeFingerprint(ctx context.Context) (*structs.CSINodeInfo, error) {
	caps, err := c.NodeCapabilities(ctx)
	if err != nil {
		return nil, err
	}
	info, err := c.NodeGetInfo(ctx)
	if err != nil {
		return nil, err
	}
	if info.ID == "" {
		// Controller publish needs the node's provider ID; a node without
		// one cannot take a volume.
		return nil, localError(MethodNodeGetInfo, "", codes.Internal, errors.New("plugin reported an empty node id"))
	}
	return &structs.CSINodeInfo{
		ID:                      info.ID,
		MaxVolumes:              info.MaxVolumes,
		AccessibleTopology:      info.AccessibleTopology,
		RequiresNodeStageVolume: caps.StageUnstage,
		SupportsStats:           caps.Stats,
		SupportsExpand:          caps.Expand,
		SupportsCondition:       caps.Condition,
	}, nil
}

// statusMessage is the plugin's own message in err, without our prefixes.
func statusMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		if s, ok := status.FromError(e.err); ok {
			return s.Message()
		}
	}
	return err.Error()
}
