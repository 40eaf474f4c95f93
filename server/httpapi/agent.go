package httpapi

import (
	"net"
	"net/http"
	"runtime"
	"strconv"

	"github.com/volplane/volplane/gctune"
	"github.com/volplane/volplane/structs"
)

// AgentInfo is what the answering server says about itself and the
// servers it knows, for /v1/agent/self and /v1/agent/members.
type AgentInfo struct {
	// Name is the server's node name, Region its region, Datacenter its
	// datacenter ("dc1" when it has none).
	Name       string
	Region     string
	Datacenter string
	// NodeID is the server's Raft ID; RPCAddr its advertised RPC address
	// (host:port) and HTTPAddr where its API listens.
	NodeID   string
	RPCAddr  string
	HTTPAddr string
	// Servers are the servers of the Raft configuration as this server
	// sees it, itself included.
	Servers []*structs.RaftServer
	// KnownLeader is false while the server knows of no leader.
	KnownLeader bool
	// RaftStats is Raft's own view of this server (hashicorp/raft's
	// Stats: state, term, last_log_index, commit_index, applied_index,
	// fsm_pending, last_contact, ...), which Nomad's agent-info shows
	// under "raft".
	RaftStats map[string]string
}

// agentBuild is the build every member reports (Nomad's "build" tag).
const agentBuild = "volplane"

// region is the answering server's region, "global" when unknown.
func (h *handler) region() string {
	if h.agent != nil {
		if r := h.agent().Region; r != "" {
			return r
		}
	}
	return nomadDefaultRegion
}

// authorizeRoute checks the caller's token against the ACL row of a route
// that makes no RPC call (through Config.Authorize); ACLs off, it allows.
func (h *handler) authorizeRoute(r *http.Request, endpoint string) error {
	if h.authorize == nil {
		return nil
	}
	v, err := params(r)
	if err != nil {
		return err
	}
	return h.authorize(endpoint, r.Header.Get(headerToken), v.Get("namespace"))
}

// agentInfo returns the server's AgentInfo, or a 404 when the agent does
// not say (a handler without Config.Agent).
func (h *handler) agentInfo() (AgentInfo, error) {
	if h.agent == nil {
		return AgentInfo{}, structs.ErrNotFound("agent information is not available on this agent")
	}
	return h.agent(), nil
}

// members turns the Raft configuration into Nomad's members: every server
// of the configuration is "alive" (a voter that is down still counts in
// the quorum, which is what an operator reading this wants to see; the
// Raft configuration route says who leads).
func members(info AgentInfo) []*structs.AgentMember {
	out := []*structs.AgentMember{}
	for _, s := range info.Servers {
		host, portStr, err := net.SplitHostPort(s.Address)
		if err != nil {
			host, portStr = s.Address, ""
		}
		port, _ := strconv.ParseUint(portStr, 10, 16)
		name := s.Node
		if name == "" {
			name = s.ID
		}
		role := "voter"
		if !s.Voter {
			role = "nonvoter"
		}
		out = append(out, &structs.AgentMember{
			Name: name + "." + info.Region, Addr: host, Port: uint16(port), Status: "alive",
			Tags: map[string]string{
				"role": "nomad", "region": info.Region, "dc": info.Datacenter, "build": agentBuild,
				"port": portStr, "rpc_addr": host, "id": s.ID, "raft_vsn": s.RaftProtocol,
				"vsn": "1", "leader": strconv.FormatBool(s.Leader), "raft_role": role,
			},
			ProtocolMin: 1, ProtocolMax: 5, ProtocolCur: 2, DelegateMin: 2, DelegateMax: 5, DelegateCur: 4,
		})
	}
	return out
}

// agentMembers serves GET /v1/agent/members: Nomad's ServerMembers, built
// from the Raft configuration. Nomad's takes node read.
func (h *handler) agentMembers(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := h.authorizeRoute(r, "Agent.Members"); err != nil {
		return nil, err
	}
	info, err := h.agentInfo()
	if err != nil {
		return nil, err
	}
	setLocalMeta(w, info.KnownLeader)
	return &structs.ServerMembers{ServerName: info.Name, ServerRegion: info.Region, ServerDC: info.Datacenter,
		Members: members(info)}, nil
}

// agentSelf serves GET /v1/agent/self. Nomad's takes agent read.
func (h *handler) agentSelf(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := h.authorizeRoute(r, "Agent.Self"); err != nil {
		return nil, err
	}
	info, err := h.agentInfo()
	if err != nil {
		return nil, err
	}
	setLocalMeta(w, info.KnownLeader)
	self := &structs.AgentMember{Name: info.Name + "." + info.Region, Status: "alive", Tags: map[string]string{}}
	leader := "false"
	for _, m := range members(info) {
		if m.Tags["id"] == info.NodeID {
			self = m
			leader = m.Tags["leader"]
		}
	}
	return &structs.AgentSelf{
		Config: map[string]any{
			"Region": info.Region, "Datacenter": info.Datacenter, "NodeName": info.Name,
			"Version":   map[string]any{"Version": agentBuild},
			"Server":    map[string]any{"Enabled": true},
			"Addresses": map[string]any{"HTTP": info.HTTPAddr, "RPC": info.RPCAddr},
		},
		Member: self,
		Stats: map[string]map[string]string{
			"nomad": {
				"server": "true", "leader": leader, "known_regions": "1",
				"bootstrap": "false", "leader_addr": leaderAddr(info),
			},
			"raft": raftStats(info),
			"runtime": {"arch": runtime.GOARCH, "os": runtime.GOOS, "version": runtime.Version(),
				"goroutines": strconv.Itoa(runtime.NumGoroutine()), "max_procs": strconv.Itoa(runtime.GOMAXPROCS(0)),
				"cpu_count": strconv.Itoa(runtime.NumCPU()), "gc_percent": strconv.Itoa(gctune.GCPercent())},
		},
	}, nil
}

// raftStats is the "raft" section of the agent's stats: Raft's own, with
// the peers counted from the configuration this server sees and whether it
// knows a leader.
func raftStats(info AgentInfo) map[string]string {
	stats := make(map[string]string, len(info.RaftStats)+2)
	for k, v := range info.RaftStats {
		stats[k] = v
	}
	stats["num_peers"] = strconv.Itoa(max(0, len(info.Servers)-1))
	stats["known_leader"] = strconv.FormatBool(info.KnownLeader)
	return stats
}

func leaderAddr(info AgentInfo) string {
	for _, s := range info.Servers {
		if s.Leader {
			return s.Address
		}
	}
	return ""
}

// agentHealth serves GET /v1/agent/health: Nomad's AgentHealthResponse for
// a server, healthy while it knows a leader (its writes can then commit);
// without one, a 503 saying so.
func (h *handler) agentHealth(w http.ResponseWriter, r *http.Request) (any, error) {
	info, err := h.agentInfo()
	if err != nil {
		return nil, err
	}
	if !info.KnownLeader {
		return nil, structs.NewError(structs.ErrCodeNoLeader, "server: no known leader")
	}
	type health struct {
		Ok      bool
		Message string
	}
	setLocalMeta(w, info.KnownLeader)
	return &struct {
		Server *health `json:"server"`
	}{Server: &health{Ok: true, Message: "ok"}}, nil
}

// setLocalMeta sets the query headers of an answer made by this server
// from what it knows itself, not from the replicated state: Nomad's client
// refuses a read answer without them.
func setLocalMeta(w http.ResponseWriter, knownLeader bool) {
	w.Header().Set(headerIndex, "0")
	w.Header().Set(headerLastContact, "0")
	w.Header().Set(headerKnownLeader, strconv.FormatBool(knownLeader))
}

// regions serves GET /v1/regions: the regions this cluster knows, its own.
func (h *handler) regions(w http.ResponseWriter, r *http.Request) (any, error) {
	setLocalMeta(w, true)
	return []string{h.region()}, nil
}

// SchedulerConfiguration is Nomad's scheduler configuration, as volplane's
// placer works: it spreads a job's allocations (fewest allocations of the
// job first), never preempts, does not oversubscribe memory, and has no
// evaluation broker to pause. It cannot be changed.
type SchedulerConfiguration struct {
	SchedulerAlgorithm            string
	PreemptionConfig              PreemptionConfig
	MemoryOversubscriptionEnabled bool
	RejectJobRegistration         bool
	PauseEvalBroker               bool
	CreateIndex                   uint64
	ModifyIndex                   uint64
}

// PreemptionConfig is Nomad's: volplane preempts nothing.
type PreemptionConfig struct {
	SystemSchedulerEnabled   bool
	SysBatchSchedulerEnabled bool
	BatchSchedulerEnabled    bool
	ServiceSchedulerEnabled  bool
}

// schedulerConfiguration serves GET /v1/operator/scheduler/configuration.
// Nomad's takes operator read.
func (h *handler) schedulerConfiguration(w http.ResponseWriter, r *http.Request) (any, error) {
	if err := h.authorizeRoute(r, "Operator.SchedulerGetConfiguration"); err != nil {
		return nil, err
	}
	setLocalMeta(w, true)
	return &struct {
		SchedulerConfig *SchedulerConfiguration
	}{SchedulerConfig: &SchedulerConfiguration{SchedulerAlgorithm: "spread"}}, nil
}

// hostVolumeList serves GET /v1/volumes?type=host: volplane has no host
// volumes, so the list is empty, as Nomad's on a cluster without any.
func hostVolumeList(w http.ResponseWriter) (any, error) {
	setLocalMeta(w, true)
	return []struct{}{}, nil
}
