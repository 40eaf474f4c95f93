package httpapi

import (
	"maps"
	"net/http"
	"slices"

	"github.com/volplane/volplane/structs"
)

// pluginList serves GET /v1/plugins?type=csi: a bare array of stubs.
func (h *handler) pluginList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSIPluginListRequest
	v, err := parseQueryOptions(r, &args.QueryOptions)
	if err != nil {
		return nil, err
	}
	if err := checkType("plugin", v.Get("type")); err != nil {
		return nil, err
	}
	var reply structs.CSIPluginListResponse
	if err := h.backend.RPC("CSIPlugin.List", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return orEmpty(reply.Plugins), nil
}

// pluginGet serves GET /v1/plugin/csi/:id.
func (h *handler) pluginGet(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.CSIPluginGetRequest{ID: r.PathValue("id")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.CSIPluginGetResponse
	if err := h.backend.RPC("CSIPlugin.Get", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Plugin == nil {
		return nil, structs.ErrNotFound("plugin %q not found", args.ID)
	}
	return h.pluginView(args.QueryOptions, reply.Plugin), nil
}

// PluginView is a plugin as GET /v1/plugin/csi/:id answers it: every
// field of structs.CSIPlugin (its controllers and nodes by node ID, each
// with Nomad's CSIInfo fields), with Nomad's Allocations: stubs of the
// allocations that run the plugin's instances, those the caller may read.
type PluginView struct {
	*structs.CSIPlugin
	Allocations []*AllocListStub
}

func (h *handler) pluginView(q structs.QueryOptions, p *structs.CSIPlugin) *PluginView {
	out := &PluginView{CSIPlugin: p, Allocations: []*AllocListStub{}}
	seen := map[string]bool{}
	for _, m := range []map[string]*structs.CSIInfo{p.Controllers, p.Nodes} {
		for _, node := range slices.Sorted(maps.Keys(m)) {
			info := m[node]
			if info == nil || info.AllocID == "" || seen[info.AllocID] {
				continue
			}
			seen[info.AllocID] = true
			if stub := h.allocStubByID(q, info.AllocID); stub != nil {
				out.Allocations = append(out.Allocations, stub)
			}
		}
	}
	return out
}

// nodeList serves GET /v1/nodes: a bare array of stubs.
func (h *handler) nodeList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.NodeListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.NodeListResponse
	if err := h.backend.RPC("Node.List", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return orEmpty(reply.Nodes), nil
}

// nodeGet serves GET /v1/node/:id.
func (h *handler) nodeGet(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.NodeSpecificRequest{NodeID: r.PathValue("id")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SingleNodeResponse
	if err := h.backend.RPC("Node.GetNode", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Node == nil {
		return nil, structs.ErrNotFound("node %q not found", args.NodeID)
	}
	// The secret and its hash are json:"-" already; clearing them too
	// means a change of tags cannot leak them.
	node := reply.Node.Copy()
	node.SecretID, node.SecretHash = "", nil
	return &NodeView{Node: node}, nil
}

// NodeView is a node as GET /v1/node/:id answers it: volplane's fields,
// and Nomad's NodeResources and ReservedResources, which Nomad's CLI reads.
// volplane places volumes, not compute, so the node offers none: zeros.
type NodeView struct {
	*structs.Node
	NodeResources     nodeResources
	ReservedResources nodeResources
}

// nodeResources is Nomad's NodeResources (and NodeReservedResources) in
// the fields both share.
type nodeResources struct {
	Cpu    struct{ CpuShares int64 }
	Memory struct{ MemoryMB int64 }
	Disk   struct{ DiskMB int64 }
}

// statusLeader serves GET /v1/status/leader: a JSON string, "" when there
// is no leader, as Nomad's.
func (h *handler) statusLeader(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.GenericRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var leader string
	if err := h.backend.RPC("Status.Leader", &args, &leader); err != nil {
		return nil, err
	}
	return leader, nil
}

// statusPeers serves GET /v1/status/peers: a JSON array of addresses.
func (h *handler) statusPeers(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.GenericRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var peers []string
	if err := h.backend.RPC("Status.Peers", &args, &peers); err != nil {
		return nil, err
	}
	return orEmpty(peers), nil
}

// raftConfiguration serves GET /v1/operator/raft/configuration.
func (h *handler) raftConfiguration(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.GenericRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.RaftConfigurationResponse
	if err := h.backend.RPC("Operator.RaftListPeers", &args, &reply); err != nil {
		return nil, err
	}
	reply.Servers = orEmpty(reply.Servers)
	return &reply, nil
}

// raftRemovePeer serves DELETE /v1/operator/raft/peer?id=|address=, with
// exactly one of the two.
func (h *handler) raftRemovePeer(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.RaftPeerRequest
	v, err := parseWriteRequest(r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	args.ID, args.Address = v.Get("id"), v.Get("address")
	if (args.ID == "") == (args.Address == "") {
		return nil, structs.ErrInvalid("give exactly one of the id and address parameters")
	}
	var reply structs.GenericResponse
	if err := h.backend.RPC("Operator.RaftRemovePeer", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}
