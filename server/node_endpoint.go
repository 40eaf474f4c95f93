package server

import (
	"github.com/volplane/volplane/acl"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Node is the endpoint client agents use to register their node and report
// its status and CSI plugin fingerprints.
type Node struct {
	srv *Server
	// conn is the session the caller's requests arrive on, nil for plain
	// connections and in-process calls.
	conn   *sessionConn
	logger hclog.Logger
}

// Register adds a node or updates it after its agent restarted. A node that
// exists already must present the secret it registered with.
func (e *Node) Register(args *structs.NodeRegisterRequest, reply *structs.NodeUpdateResponse) error {
	forwarded := args.IsForwarded()
	if done, err := e.srv.forward("Node.Register", args, args, reply); done {
		if err == nil && args.Node != nil {
			e.recordConn(args.Node.ID, forwarded)
		}
		return err
	}
	if args.Node == nil {
		return structs.ErrInvalid("missing node")
	}
	node := args.Node.Copy()
	// Times the servers derive on read are never the client's to store,
	// and a node proves its secret by sending it, never its hash.
	node.LastHeartbeat, node.GCAfter, node.SecretHash = time.Time{}, time.Time{}, nil
	if node.Status == "" {
		node.Status = structs.NodeStatusReady
	}
	if err := node.Validate(); err != nil {
		return err
	}
	existing, err := e.srv.State().NodeByID(nil, node.ID)
	if err != nil {
		return err
	}
	if existing != nil && !existing.SecretMatches(node.SecretID) {
		return structs.NewError(structs.ErrCodePermissionDenied, "node %q is registered with a different secret", node.ID)
	}
	now := time.Now()
	node.StatusUpdatedAt = now.UnixNano()
	// How the node was let in is the servers' to say, never the client's.
	args.IntroAccessorID, node.IntroducedBy = "", ""
	if existing == nil {
		if args.IntroAccessorID, node.IntroducedBy, err = e.srv.introduce(node.ID, args.IntroToken, now); err != nil {
			e.logger.Warn("refusing the registration of a new node", "node_id", node.ID, "name", node.Name, "error", err)
			return err
		}
	} else {
		node.IntroducedBy = existing.IntroducedBy
		if node.IntroducedBy == "" && e.srv.tls.RPCEnabled() {
			node.IntroducedBy = structs.NodeIntroducedByTLS
		}
	}
	// The secret never enters the Raft log.
	args.IntroToken = ""
	stampFingerprints(node.CSIControllerPlugins, now)
	stampFingerprints(node.CSINodePlugins, now)
	args.Node = node

	// The session is recorded before the write, once the secret is
	// checked: as soon as the node and its plugins are visible in the
	// state, calls to them must find their way to the agent.
	e.recordConn(node.ID, forwarded)
	_, index, err := e.srv.raftApply(e.srv.nodeRegisterEntry(node), args)
	if err != nil {
		return err
	}
	e.srv.heartbeats.reset(node.ID)
	e.logger.Debug("node registered", "node_id", node.ID, "name", node.Name)
	return e.srv.fillNodeReply(reply, index)
}

// UpdateStatus is the client's heartbeat. It writes to Raft only when the
// status or the fingerprints changed, so a steady heartbeat costs no log
// entry.
func (e *Node) UpdateStatus(args *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse) error {
	forwarded := args.IsForwarded()
	if done, err := e.srv.forward("Node.UpdateStatus", args, args, reply); done {
		if err == nil {
			e.recordConn(args.NodeID, forwarded)
		}
		return err
	}
	if err := structs.ValidateID("node id", args.NodeID); err != nil {
		return structs.ErrInvalid("node status update: %v", err)
	}
	if args.Status == "" {
		args.Status = structs.NodeStatusReady
	}
	if !structs.ValidNodeStatus(args.Status) {
		return structs.ErrInvalid("node %q: unknown status %q", args.NodeID, args.Status)
	}
	node, err := e.srv.State().NodeByID(nil, args.NodeID)
	if err != nil {
		return err
	}
	if node == nil {
		return structs.ErrNotFound("node %q is not registered", args.NodeID)
	}
	if !node.SecretMatches(args.SecretID) {
		return structs.NewError(structs.ErrCodePermissionDenied, "node %q: wrong node secret", args.NodeID)
	}
	// The FSM does not read the secret: it stays out of the Raft log.
	args.SecretID = ""
	check := &structs.Node{ID: node.ID, SecretHash: node.SecretHash, Name: node.Name,
		CSIControllerPlugins: args.CSIControllerPlugins, CSINodePlugins: args.CSINodePlugins}
	if err := check.Validate(); err != nil {
		return err
	}

	changed := node.Status != args.Status ||
		(args.CSIControllerPlugins != nil && !structs.PluginsEqual(node.CSIControllerPlugins, args.CSIControllerPlugins)) ||
		(args.CSINodePlugins != nil && !structs.PluginsEqual(node.CSINodePlugins, args.CSINodePlugins))
	e.srv.heartbeats.reset(node.ID)
	e.recordConn(node.ID, forwarded)
	index := node.ModifyIndex
	if changed {
		now := time.Now()
		args.UpdatedAt = now.UnixNano()
		stampFingerprints(args.CSIControllerPlugins, now)
		stampFingerprints(args.CSINodePlugins, now)
		_, index, err = e.srv.raftApply(structs.NodeUpdateStatusRequestType, args)
		if err != nil {
			return err
		}
	}
	return e.srv.fillNodeReply(reply, index)
}

// GetNode returns one node; Node is nil when it is unknown.
func (e *Node) GetNode(args *structs.NodeSpecificRequest, reply *structs.SingleNodeResponse) error {
	if done, err := e.srv.forward("Node.GetNode", args, args, reply); done {
		return err
	}
	if args.NodeID == "" {
		return structs.ErrInvalid("missing node id")
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		n, err := st.NodeByID(ws, args.NodeID)
		if err != nil {
			return 0, err
		}
		if n != nil {
			n = n.Copy()
			// A reader is never handed what authenticates the node.
			n.SecretHash = nil
			if last, ok := e.srv.heartbeats.lastHeartbeat(n.ID); ok {
				n.LastHeartbeat = last
			}
			n.GCAfter = e.srv.gcAfter(n)
			reply.Node = n
			return n.ModifyIndex, nil
		}
		reply.Node = nil
		return st.Index(state.TableNodes)
	})
}

// GetAllocs returns the allocations placed on a node (Nomad's
// /v1/node/:id/allocations), those of namespaces the token may read jobs
// in. An unknown node has none.
func (e *Node) GetAllocs(args *structs.NodeSpecificRequest, reply *structs.AllocListResponse) error {
	if done, err := e.srv.forward("Node.GetAllocs", args, args, reply); done {
		return err
	}
	if args.NodeID == "" {
		return structs.ErrInvalid("missing node id")
	}
	allow, err := e.srv.namespacesShown(args, acl.AllNamespaces, acl.NamespaceCapabilityReadJob)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		allocs, err := st.AllocsByNode(ws, args.NodeID)
		if err != nil {
			return 0, err
		}
		reply.Allocations = []*structs.Allocation{}
		for _, a := range allocs {
			if allow == nil || allow(a.Namespace) {
				reply.Allocations = append(reply.Allocations, a)
			}
		}
		return st.Index(state.TableAllocs)
	})
}

// List returns the nodes, optionally by ID prefix.
func (e *Node) List(args *structs.NodeListRequest, reply *structs.NodeListResponse) error {
	if done, err := e.srv.forward("Node.List", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		iter, err := st.NodesByIDPrefix(ws, args.Prefix)
		if err != nil {
			return 0, err
		}
		reply.Nodes = []*structs.NodeListStub{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			n := raw.(*structs.Node)
			stub := n.Stub()
			if last, ok := e.srv.heartbeats.lastHeartbeat(stub.ID); ok {
				stub.LastHeartbeat = last
			}
			stub.GCAfter = e.srv.gcAfter(n)
			reply.Nodes = append(reply.Nodes, stub)
		}
		return st.Index(state.TableNodes)
	})
}

func (s *Server) fillNodeReply(reply *structs.NodeUpdateResponse, index uint64) error {
	reply.HeartbeatTTL = s.config.HeartbeatTTL
	reply.Index = index
	if f := s.raft.GetConfiguration(); f.Error() != nil {
		s.logger.Warn("reading the raft configuration for a node reply; it lists no servers", "error", f.Error())
	} else {
		reply.Servers = reply.Servers[:0]
		for _, srv := range f.Configuration().Servers {
			reply.Servers = append(reply.Servers, string(srv.Address))
		}
	}
	s.setQueryMeta(&reply.QueryMeta)
	return nil
}

// stampFingerprints sets the time the leader received each fingerprint.
func stampFingerprints(infos map[string]*structs.CSIInfo, now time.Time) {
	for _, info := range infos {
		if info != nil {
			info.UpdateTime = now
		}
	}
}

// nodeRegisterEntry readies node, a registration the endpoint accepted,
// for the Raft log and returns the entry type that carries it: the hash
// of the node's secret in place of the secret once every server applies
// such entries, else the secret itself, which an older server's FSM
// needs (every server stores the hash).
func (s *Server) nodeRegisterEntry(node *structs.Node) structs.MessageType {
	if !s.entryTypeApplied(structs.NodeRegisterHashedRequestType) {
		return structs.NodeRegisterRequestType
	}
	node.HashSecret()
	return structs.NodeRegisterHashedRequestType
}

// recordConn notes that this server reaches the node over the session the
// request came in on, once the request was authenticated. A request another server
// forwarded says nothing about this server's sessions.
func (e *Node) recordConn(nodeID string, forwarded bool) {
	if e.conn == nil || forwarded {
		return
	}
	e.srv.nodeConns.add(nodeID, e.conn)
}
