package server

import (
	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/tlsutil"
)

// roleSet is the certificate roles allowed to call a method.
type roleSet uint8

const (
	// serverOnly: Raft-adjacent and cluster calls, operator calls (which
	// reach the network only when a follower forwards them), and every
	// call on behalf of the HTTP API, which runs inside a server.
	serverOnly roleSet = 1 << tlsutil.RoleServer
	// nodeFacing: the calls a client agent makes for its own node; the
	// endpoint then checks the node's secret.
	nodeFacing roleSet = serverOnly | 1<<tlsutil.RoleClient
)

func (r roleSet) allows(role tlsutil.Role) bool { return r&(1<<role) != 0 }

// rpcAccess is which certificate roles may call each RPC method over the
// network when tls.rpc is on. A method missing from it is refused to every
// caller (TestRPCAccess_EveryEndpoint fails when an endpoint has no row).
// In-process calls (the HTTP API) do not pass through it.
var rpcAccess = map[string]roleSet{
	"Status.Ping":        nodeFacing,
	"Status.Leader":      serverOnly,
	"Status.Peers":       serverOnly,
	"Status.Join":        serverOnly,
	"Status.HasNodeConn": serverOnly,
	"Status.ReadIndex":   serverOnly,

	"Operator.RaftListPeers":   serverOnly,
	"Operator.RaftRemovePeer":  serverOnly,
	"Operator.Security":        serverOnly,
	"Operator.NodeIntroCreate": serverOnly,
	"Operator.NodeIntroList":   serverOnly,
	"Operator.NodeIntroDelete": serverOnly,
	"Keyring.Rotate":           serverOnly,
	"Keyring.List":             serverOnly,
	"Keyring.ExportKEK":        serverOnly,
	"Keyring.ImportKEK":        serverOnly,

	"Node.Register":                      nodeFacing,
	"Node.UpdateStatus":                  nodeFacing,
	"Node.GetClientAllocs":               nodeFacing,
	"Node.UpdateAlloc":                   nodeFacing,
	"Node.GetNode":                       serverOnly,
	"Node.GetAllocs":                     serverOnly,
	"Node.List":                          serverOnly,
	"Node.UpdateDrain":                   serverOnly,
	"Node.UpdateEligibility":             serverOnly,
	"CSIVolume.Claim":                    nodeFacing,
	"CSIVolume.Get":                      nodeFacing,
	"CSIVolume.List":                     serverOnly,
	"CSIVolume.Register":                 serverOnly,
	"CSIVolume.Deregister":               serverOnly,
	"CSIVolume.Create":                   serverOnly,
	"CSIVolume.Delete":                   serverOnly,
	"CSIVolume.Detach":                   serverOnly,
	"CSIVolume.CreateSnapshot":           serverOnly,
	"CSIVolume.DeleteSnapshot":           serverOnly,
	"CSIVolume.ListSnapshots":            serverOnly,
	"CSIVolume.ListExternal":             serverOnly,
	"System.GarbageCollect":              serverOnly,
	"CSIPlugin.List":                     serverOnly,
	"CSIPlugin.Get":                      serverOnly,
	"Job.Register":                       serverOnly,
	"Job.Plan":                           serverOnly,
	"Job.Deregister":                     serverOnly,
	"Job.GetJob":                         serverOnly,
	"Job.List":                           serverOnly,
	"Job.Allocations":                    serverOnly,
	"Alloc.GetAlloc":                     serverOnly,
	"Alloc.List":                         serverOnly,
	"ClientCSI.NodeDetachVolume":         serverOnly,
	"ClientCSI.ControllerAttachVolume":   serverOnly,
	"ClientCSI.ControllerDetachVolume":   serverOnly,
	"ClientCSI.ControllerValidateVolume": serverOnly,
	"ClientCSI.ControllerCreateVolume":   serverOnly,
	"ClientCSI.ControllerDeleteVolume":   serverOnly,

	"ACL.Bootstrap":              serverOnly,
	"ACL.UpsertPolicies":         serverOnly,
	"ACL.DeletePolicies":         serverOnly,
	"ACL.ListPolicies":           serverOnly,
	"ACL.GetPolicy":              serverOnly,
	"ACL.UpsertTokens":           serverOnly,
	"ACL.DeleteTokens":           serverOnly,
	"ACL.ListTokens":             serverOnly,
	"ACL.GetToken":               serverOnly,
	"ACL.ResolveToken":           serverOnly,
	"Namespace.ListNamespaces":   serverOnly,
	"Namespace.GetNamespace":     serverOnly,
	"Namespace.UpsertNamespaces": serverOnly,
	"Namespace.DeleteNamespaces": serverOnly,

	"ClientCSI.ControllerCreateSnapshot": serverOnly,
	"ClientCSI.ControllerDeleteSnapshot": serverOnly,
	"ClientCSI.ControllerListSnapshots":  serverOnly,
	"ClientCSI.ControllerListVolumes":    serverOnly,
	"ClientCSI.ControllerExpandVolume":   serverOnly,
	"ClientCSI.NodeExpandVolume":         serverOnly,

	"FileSystem.Logs": serverOnly,
}

// callerRole is the role of a network peer: RoleNone for a plaintext
// connection, which only an open cluster (tls.rpc off) accepts.
func callerRole(peer rpc.Peer, region string) tlsutil.Role {
	if peer.TLS == nil {
		return tlsutil.RoleNone
	}
	return tlsutil.PeerRole(*peer.TLS, region)
}

// authorizeRPC is the guard of every request that arrives over the network
// (see rpc.NewGuardedServerCodec). With tls.rpc off the cluster is open and
// everything passes, as in Nomad without TLS.
func (s *Server) authorizeRPC(peer rpc.Peer) func(method string, args any) error {
	if !s.tls.RPCEnabled() {
		return func(string, any) error { return nil }
	}
	role := callerRole(peer, s.tls.Region())
	return func(method string, args any) error {
		if !rpcAccess[method].allows(role) {
			metrics.RPCRefused(method, role.String())
			s.logger.Warn("refusing an RPC call the caller's certificate does not allow",
				"method", method, "remote", peer.Addr, "role", role)
			return structs.NewError(structs.ErrCodePermissionDenied,
				"Permission denied: %s may not be called with a %s certificate", method, role)
		}
		// Only servers forward: a forwarded request skips what a server
		// does for requests from its own clients.
		if f, ok := args.(interface{ IsForwarded() bool }); ok && f.IsForwarded() && role != tlsutil.RoleServer {
			metrics.RPCRefused(method, role.String())
			return structs.NewError(structs.ErrCodePermissionDenied,
				"Permission denied: only servers forward requests (%s)", method)
		}
		return nil
	}
}
