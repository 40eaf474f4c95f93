package server

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/volplane/volplane/structs"
)

// ClientCSI is the server side of the calls servers make to client agents'
// CSI plugins. A controller call goes to a healthy controller instance of
// the plugin, tried in a stable order (the same controller keeps getting the
// calls, which plugins that elect a leader need), moving on when an instance
// says it cannot serve (retryable) or its node cannot be reached. A node call
// goes to the named node. Either is made over the session this server holds
// with the node, or forwarded once to the server that holds it.
type ClientCSI struct {
	srv *Server
}

// ControllerAttachVolume publishes a volume to a node through a controller.
func (e *ClientCSI) ControllerAttachVolume(args *structs.ClientCSIControllerAttachVolumeRequest, reply *structs.ClientCSIControllerAttachVolumeResponse) error {
	if args.VolumeID == "" || args.ClientCSINodeID == "" {
		return structs.ErrInvalid("controller attach volume: missing volume ID or provider node ID")
	}
	return e.srv.controllerRPC("ClientCSI.ControllerAttachVolume", args.PluginID, &args.ClientCSITarget, &args.WriteRequest, args, reply)
}

// ControllerDetachVolume unpublishes a volume from a node through a controller.
func (e *ClientCSI) ControllerDetachVolume(args *structs.ClientCSIControllerDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	if args.VolumeID == "" || args.ClientCSINodeID == "" {
		return structs.ErrInvalid("controller detach volume: missing volume ID or provider node ID")
	}
	return e.srv.controllerRPC("ClientCSI.ControllerDetachVolume", args.PluginID, &args.ClientCSITarget, &args.WriteRequest, args, reply)
}

// ControllerValidateVolume asks a controller whether a volume supports its
// capabilities.
func (e *ClientCSI) ControllerValidateVolume(args *structs.ClientCSIControllerValidateVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	if args.VolumeID == "" {
		return structs.ErrInvalid("controller validate volume: missing volume ID")
	}
	return e.srv.controllerRPC("ClientCSI.ControllerValidateVolume", args.PluginID, &args.ClientCSITarget, &args.WriteRequest, args, reply)
}

// ControllerCreateVolume creates a volume through a controller.
func (e *ClientCSI) ControllerCreateVolume(args *structs.ClientCSIControllerCreateVolumeRequest, reply *structs.ClientCSIControllerCreateVolumeResponse) error {
	if args.Name == "" {
		return structs.ErrInvalid("controller create volume: missing name")
	}
	return e.srv.controllerRPC("ClientCSI.ControllerCreateVolume", args.PluginID, &args.ClientCSITarget, &args.WriteRequest, args, reply)
}

// ControllerDeleteVolume deletes a volume through a controller.
func (e *ClientCSI) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	if args.VolumeID == "" {
		return structs.ErrInvalid("controller delete volume: missing volume ID")
	}
	return e.srv.controllerRPC("ClientCSI.ControllerDeleteVolume", args.PluginID, &args.ClientCSITarget, &args.WriteRequest, args, reply)
}

// NodeDetachVolume unpublishes (and unstages) an allocation's volume on the
// node it ran on.
func (e *ClientCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	if args.NodeID == "" || args.AllocID == "" || args.VolumeID == "" {
		return structs.ErrInvalid("node detach volume: missing node ID, allocation ID or volume ID")
	}
	forwarded := args.IsForwarded()
	err := e.srv.clientRPC.CallNode(args.NodeID, "ClientCSI.NodeDetachVolume", args, reply, forwarded)
	return structs.Wrap(err, "node detach volume %q on node %q", args.VolumeID, args.NodeID)
}

// controllerRPC runs a controller call on the plugin's controllers in order.
func (s *Server) controllerRPC(method, pluginID string, target *structs.ClientCSITarget, w *structs.WriteRequest, args, reply any) error {
	what := controllerWhat(method)
	if pluginID == "" {
		return structs.ErrInvalid("%s: missing plugin ID", what)
	}
	// A server that received a forwarded call with its node chosen only
	// tries that node, over its own session.
	// The server that forwarded it names the call in its error.
	if w.IsForwarded() && target.NodeID != "" {
		return s.clientRPC.CallNode(target.NodeID, method, args, reply, true)
	}
	candidates, err := s.controllerCandidates(pluginID)
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
	for _, nodeID := range candidates {
		target.NodeID = nodeID
		// Each attempt is a first-hop call from this server.
		w.Forwarded = false
		err := s.clientRPC.CallNode(nodeID, method, args, reply, false)
		if err == nil {
			return nil
		}
		switch structs.CodeOf(err) {
		case structs.ErrCodeRetryable, structs.ErrCodeNoNodeConn:
			s.logger.Debug("controller could not serve the call; trying the next", "method", method,
				"plugin_id", pluginID, "node_id", nodeID, "error", err)
			errs = append(errs, fmt.Sprintf("node %s: %s", nodeID, structs.MessageOf(err)))
			continue
		}
		return structs.Wrap(err, "%s", what)
	}
	// Every controller was unreachable or asked us to retry: the caller may
	// try again later.
	return structs.NewError(structs.ErrCodeRetryable, "%s: no controller of plugin %q could serve it: %s",
		what, pluginID, strings.Join(errs, "; "))
}

// controllerCandidates lists the nodes running a healthy controller of the
// plugin whose node is ready, sorted by node ID.
func (s *Server) controllerCandidates(pluginID string) ([]string, error) {
	st := s.State()
	plugin, err := st.CSIPluginByID(nil, pluginID)
	if err != nil {
		return nil, err
	}
	if plugin == nil {
		return nil, structs.ErrNotFound("no CSI plugin named %q", pluginID)
	}
	if len(plugin.Controllers) == 0 {
		return nil, structs.NewError(structs.ErrCodeUnschedulable, "plugin %q has no controller instances", pluginID)
	}
	var out, reasons []string
	for _, nodeID := range slices.Sorted(maps.Keys(plugin.Controllers)) {
		info := plugin.Controllers[nodeID]
		node, err := st.NodeByID(nil, nodeID)
		switch {
		case err != nil:
			return nil, err
		case !info.Healthy:
			reasons = append(reasons, fmt.Sprintf("node %s: controller unhealthy (%s)", nodeID, info.HealthDescription))
		case node == nil:
			reasons = append(reasons, fmt.Sprintf("node %s: node unknown", nodeID))
		case node.Status != structs.NodeStatusReady:
			reasons = append(reasons, fmt.Sprintf("node %s: node is %s", nodeID, node.Status))
		case node.IntroducedBy == "" && s.secured():
			// Registered while the cluster was open: in a secured cluster
			// it is not trusted with volume secrets.
			reasons = append(reasons, fmt.Sprintf("node %s: node was never introduced (registered before TLS or node introduction was required)", nodeID))
		default:
			out = append(out, nodeID)
		}
	}
	if len(out) == 0 {
		return nil, structs.NewError(structs.ErrCodeUnschedulable, "plugin %q has no healthy controllers on ready nodes: %s",
			pluginID, strings.Join(reasons, "; "))
	}
	return out, nil
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

// LocalNodeSession implements clientrpc.Servers.
func (s *Server) LocalNodeSession(nodeID string) (*yamux.Session, bool) {
	c, ok := s.nodeConns.get(nodeID)
	if !ok {
		return nil, false
	}
	return c.session, true
}

// OtherServers implements clientrpc.Servers: the other voters' addresses.
func (s *Server) OtherServers() []string {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		// The call then finds no path to the node: say why.
		s.logger.Warn("reading the raft configuration to find other servers", "error", err)
		return nil
	}
	var out []string
	for _, srv := range f.Configuration().Servers {
		if srv.ID != raft.ServerID(s.nodeID) {
			out = append(out, string(srv.Address))
		}
	}
	return out
}

// ServerRPC implements clientrpc.Servers. Calls for a client agent get the
// longer deadline of a CSI call; the lookups before them the usual one.
func (s *Server) ServerRPC(addr, method string, args, reply any) error {
	if strings.HasPrefix(method, "ClientCSI.") {
		return s.clientFwdPool.RPC(addr, method, args, reply)
	}
	return s.pool.RPC(addr, method, args, reply)
}
