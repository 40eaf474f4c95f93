package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/volplane/volplane/clientrpc"
	"github.com/volplane/volplane/structs"
)

// ClientCSI is the wire side of the calls servers make to client agents'
// CSI plugins: another server, which does not hold the agent's session,
// forwards its call here, for this server to make over its own session.
// Calls made on this server go through the typed client (s.clientRPC)
// directly; these methods only hand the forwarded ones to it, within the
// time the request says its caller still waits.
type ClientCSI struct {
	srv *Server
}

// callContext is the context of a forwarded call: it ends when the time
// the caller said it waits is up (the client's own limit otherwise), when
// the connection it came on ends (the caller gave up or died), or on
// shutdown.
func (e *ClientCSI) callContext(args any) (context.Context, context.CancelFunc) {
	return e.srv.calls.Context(args)
}

// ControllerAttachVolume publishes a volume to a node through a controller.
func (e *ClientCSI) ControllerAttachVolume(args *structs.ClientCSIControllerAttachVolumeRequest, reply *structs.ClientCSIControllerAttachVolumeResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerAttachVolume(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}

// ControllerDetachVolume unpublishes a volume from a node through a controller.
func (e *ClientCSI) ControllerDetachVolume(args *structs.ClientCSIControllerDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	return e.srv.clientRPC.ControllerDetachVolume(ctx, args)
}

// ControllerValidateVolume asks a controller whether a volume supports its
// capabilities.
func (e *ClientCSI) ControllerValidateVolume(args *structs.ClientCSIControllerValidateVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	return e.srv.clientRPC.ControllerValidateVolume(ctx, args)
}

// ControllerCreateVolume creates a volume through a controller.
func (e *ClientCSI) ControllerCreateVolume(args *structs.ClientCSIControllerCreateVolumeRequest, reply *structs.ClientCSIControllerCreateVolumeResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerCreateVolume(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}

// ControllerDeleteVolume deletes a volume through a controller.
func (e *ClientCSI) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	return e.srv.clientRPC.ControllerDeleteVolume(ctx, args)
}

// NodeDetachVolume unpublishes (and unstages) an allocation's volume on the
// node it ran on.
func (e *ClientCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	return e.srv.clientRPC.NodeDetachVolume(ctx, args)
}

// ControllerNodes implements clientrpc.Controllers: the nodes running a
// healthy controller of the plugin whose node is ready, sorted by node ID.
func (s *Server) ControllerNodes(pluginID string) ([]string, error) {
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
	if strings.HasPrefix(method, "ClientCSI.") || method == clientrpc.MethodFSLogs {
		return s.clientFwdPool.RPC(addr, method, args, reply)
	}
	return s.pool.RPC(addr, method, args, reply)
}
