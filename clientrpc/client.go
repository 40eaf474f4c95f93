package clientrpc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/structs"
)

// The ClientCSI methods as the wire names them. Client agents serve them;
// servers serve them too, to make a call forwarded by another server over
// their own session with the agent.
const (
	MethodControllerAttachVolume   = "ClientCSI.ControllerAttachVolume"
	MethodControllerDetachVolume   = "ClientCSI.ControllerDetachVolume"
	MethodControllerValidateVolume = "ClientCSI.ControllerValidateVolume"
	MethodControllerCreateVolume   = "ClientCSI.ControllerCreateVolume"
	MethodControllerDeleteVolume   = "ClientCSI.ControllerDeleteVolume"
	MethodNodeDetachVolume         = "ClientCSI.NodeDetachVolume"
	MethodControllerCreateSnapshot = "ClientCSI.ControllerCreateSnapshot"
	MethodControllerDeleteSnapshot = "ClientCSI.ControllerDeleteSnapshot"
	MethodControllerListSnapshots  = "ClientCSI.ControllerListSnapshots"
	MethodControllerListVolumes    = "ClientCSI.ControllerListVolumes"
	MethodControllerExpandVolume   = "ClientCSI.ControllerExpandVolume"
	MethodNodeExpandVolume         = "ClientCSI.NodeExpandVolume"
)

// Controllers is what the Client needs to pick a controller instance.
type Controllers interface {
	// ControllerNodes returns the nodes running a healthy controller of
	// the plugin on a ready node, in the order to try them; an error says
	// why there is none.
	ControllerNodes(pluginID string) ([]string, error)
}

// Client is the servers' typed client for the ClientCSI calls. A node call
// goes to the named node. A controller call goes to a healthy controller
// instance of the plugin, tried in a stable order (the same controller
// keeps getting the calls, which plugins that elect a leader need), moving
// on when an instance says it cannot serve (retryable) or its node cannot
// be reached, while ctx has time left. Every call ends with ctx: its
// deadline travels with the request to the agent, which ends the plugin
// call then, or as soon as the caller goes away.
//
// A request whose WriteRequest is marked forwarded, with its node chosen,
// came from another server that picked the node: it is only tried there,
// over this server's own session.
type Client struct {
	fwd    *Forwarder
	ctrls  Controllers
	logger hclog.Logger
}

// NewClient returns a Client over fwd.
func NewClient(fwd *Forwarder, ctrls Controllers, logger hclog.Logger) *Client {
	return &Client{fwd: fwd, ctrls: ctrls, logger: logger}
}

// ControllerAttachVolume publishes a volume to a node through a controller
// (ControllerPublishVolume) and returns the publish context.
func (c *Client) ControllerAttachVolume(ctx context.Context, req *structs.ClientCSIControllerAttachVolumeRequest) (*structs.ClientCSIControllerAttachVolumeResponse, error) {
	if req.VolumeID == "" || req.ClientCSINodeID == "" {
		return nil, structs.ErrInvalid("controller attach volume: missing volume ID or provider node ID")
	}
	var resp structs.ClientCSIControllerAttachVolumeResponse
	if err := c.controller(ctx, MethodControllerAttachVolume, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// ControllerDetachVolume unpublishes a volume from a node through a
// controller (ControllerUnpublishVolume).
func (c *Client) ControllerDetachVolume(ctx context.Context, req *structs.ClientCSIControllerDetachVolumeRequest) error {
	if req.VolumeID == "" || req.ClientCSINodeID == "" {
		return structs.ErrInvalid("controller detach volume: missing volume ID or provider node ID")
	}
	return c.controller(ctx, MethodControllerDetachVolume, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &structs.ClientCSIEmptyResponse{})
}

// ControllerValidateVolume asks a controller whether a volume supports its
// capabilities (ValidateVolumeCapabilities).
func (c *Client) ControllerValidateVolume(ctx context.Context, req *structs.ClientCSIControllerValidateVolumeRequest) error {
	if req.VolumeID == "" {
		return structs.ErrInvalid("controller validate volume: missing volume ID")
	}
	return c.controller(ctx, MethodControllerValidateVolume, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &structs.ClientCSIEmptyResponse{})
}

// ControllerCreateVolume creates a volume through a controller
// (CreateVolume).
func (c *Client) ControllerCreateVolume(ctx context.Context, req *structs.ClientCSIControllerCreateVolumeRequest) (*structs.ClientCSIControllerCreateVolumeResponse, error) {
	if req.Name == "" {
		return nil, structs.ErrInvalid("controller create volume: missing name")
	}
	var resp structs.ClientCSIControllerCreateVolumeResponse
	if err := c.controller(ctx, MethodControllerCreateVolume, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// ControllerDeleteVolume deletes a volume through a controller
// (DeleteVolume); a volume already gone is deleted.
func (c *Client) ControllerDeleteVolume(ctx context.Context, req *structs.ClientCSIControllerDeleteVolumeRequest) error {
	if req.VolumeID == "" {
		return structs.ErrInvalid("controller delete volume: missing volume ID")
	}
	return c.controller(ctx, MethodControllerDeleteVolume, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &structs.ClientCSIEmptyResponse{})
}

// NodeDetachVolume unpublishes (and unstages) an allocation's volume on the
// node it ran on.
func (c *Client) NodeDetachVolume(ctx context.Context, req *structs.ClientCSINodeDetachVolumeRequest) error {
	if req.NodeID == "" || req.AllocID == "" || req.VolumeID == "" {
		return structs.ErrInvalid("node detach volume: missing node ID, allocation ID or volume ID")
	}
	return c.fwd.CallNode(ctx, req.NodeID, MethodNodeDetachVolume, req, &structs.ClientCSIEmptyResponse{}, req.IsForwarded())
}

// NodeReachable says whether some server holds a session with the node's
// agent (see Forwarder.Reachable).
func (c *Client) NodeReachable(ctx context.Context, nodeID string) error {
	return c.fwd.Reachable(ctx, nodeID)
}

// controller runs a controller call on the plugin's controllers in order.
func (c *Client) controller(ctx context.Context, method, pluginID string, target *structs.ClientCSITarget, w *structs.WriteRequest, args, reply any) error {
	what := controllerWhat(method)
	if pluginID == "" {
		return structs.ErrInvalid("%s: missing plugin ID", what)
	}
	// A server that received a forwarded call with its node chosen only
	// tries that node, over its own session. The server that forwarded it
	// names the call in its error.
	if w.IsForwarded() && target.NodeID != "" {
		return c.fwd.CallNode(ctx, target.NodeID, method, args, reply, true)
	}
	candidates, err := c.ctrls.ControllerNodes(pluginID)
	if err != nil {
		return structs.Wrap(err, "%s", what)
	}
	if target.NodeID != "" {
		if !slices.Contains(candidates, target.NodeID) {
			return structs.NewError(structs.ErrCodeUnschedulable, "%s: node %q does not run a healthy controller of plugin %q", what, target.NodeID, pluginID)
		}
		candidates = []string{target.NodeID}
	}
	var errs []string
	var last error
	for _, nodeID := range candidates {
		if ctx.Err() != nil {
			// The time is up: another controller would be cut short too.
			break
		}
		target.NodeID = nodeID
		// Each attempt is a first-hop call from this server.
		w.Forwarded = false
		err := c.fwd.CallNode(ctx, nodeID, method, args, reply, false)
		if err == nil {
			return nil
		}
		switch structs.CodeOf(err) {
		case structs.ErrCodeRetryable, structs.ErrCodeNoNodeConn:
			c.logger.Debug("controller could not serve the call; trying the next", "method", method,
				"plugin_id", pluginID, "node_id", nodeID, "error", err)
			errs = append(errs, fmt.Sprintf("node %s: %s", nodeID, structs.MessageOf(err)))
			last = err
			continue
		}
		return structs.Wrap(err, "%s", what)
	}
	if len(errs) == 0 {
		return &structs.Error{Code: structs.ErrCodeRetryable, Cause: ctx.Err(),
			Message: fmt.Sprintf("%s: the call's time ran out before a controller of plugin %q was tried", what, pluginID)}
	}
	// Every controller tried was unreachable or asked us to retry: the
	// caller may try again later.
	return &structs.Error{Code: structs.ErrCodeRetryable, Cause: last, Message: fmt.Sprintf(
		"%s: no controller of plugin %q could serve it: %s", what, pluginID, strings.Join(errs, "; "))}
}

// controllerWhat turns "ClientCSI.ControllerAttachVolume" into "controller
// attach volume" for error messages.
func controllerWhat(method string) string {
	name := strings.TrimPrefix(method, "ClientCSI.")
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}
