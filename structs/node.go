package structs

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Node statuses.
const (
	NodeStatusInit  = "initializing"
	NodeStatusReady = "ready"
	NodeStatusDown  = "down"
)

// ValidNodeStatus reports whether s is a known node status.
func ValidNodeStatus(s string) bool {
	return s == NodeStatusInit || s == NodeStatusReady || s == NodeStatusDown
}

// NodeDownOrGone is the one decision of whether nothing can be asked of a
// node's agent any more: the node is gone from the state (n is nil) or
// marked down, which the servers do only once it missed its heartbeats
// beyond the grace period. A release then skips the node step (its
// allocations were lost, and a returning agent cleans up for itself); an
// operator's detach may release claims of allocations still listed as
// running there.
func NodeDownOrGone(n *Node) bool { return n == nil || n.Status == NodeStatusDown }

// Node is a client agent's machine.
type Node struct {
	ID   string
	Name string
	// SecretID authenticates the node's own calls. The node's agent sends
	// it; the servers keep only its hash (SecretHash) and write it to the
	// Raft log only while a server of an older build may read the entry.
	// Never returned by the HTTP API (json:"-").
	SecretID string `json:"-"`
	// SecretHash is the SHA-256 of SecretID, all the servers store: a
	// copy of their state or log does not let anyone act as the node.
	SecretHash []byte `json:"-"`
	Datacenter string
	// Address is where the node's agent runs, for display.
	Address    string
	Attributes map[string]string

	Status            string
	StatusDescription string
	StatusUpdatedAt   int64

	// IntroducedBy says how the node was let in (NodeIntroducedBy*); empty
	// for a node that registered while the cluster was open. Set by the
	// leader, never by the client.
	IntroducedBy string

	// Fingerprints of the CSI plugins the node runs, by plugin ID.
	CSIControllerPlugins map[string]*CSIInfo
	CSINodePlugins       map[string]*CSIInfo

	// SchedulingEligibility, DrainStrategy and LastDrain are the
	// operator's, as Nomad's: set by node drain and node eligibility,
	// kept when the node's agent registers again.
	SchedulingEligibility string
	// DrainStrategy is set while the node is draining.
	DrainStrategy *DrainStrategy
	// LastDrain is what is known of the node's last drain.
	LastDrain *DrainMetadata

	// LastHeartbeat is when the leader last heard from the node. It is the
	// leader's memory, not replicated state: filled in only on answers the
	// leader gives, zero otherwise.
	LastHeartbeat time.Time
	// GCAfter is when the node GC removes this node, which is down: the
	// time it went down plus the servers' node_gc_threshold. It is filled
	// in on reads of down nodes, never stored. The node is removed then
	// only once no claim on it is left.
	GCAfter time.Time `json:",omitzero"`

	CreateIndex uint64
	ModifyIndex uint64
}

// DueForGC returns when a node down since StatusUpdatedAt becomes due for
// the node GC with the threshold, or the zero time for a node that is not
// down.
func (n *Node) DueForGC(threshold time.Duration) time.Time {
	if n.Status != NodeStatusDown || threshold <= 0 {
		return time.Time{}
	}
	return time.Unix(0, n.StatusUpdatedAt).Add(threshold)
}

// Copy returns a deep copy.
func (n *Node) Copy() *Node {
	if n == nil {
		return nil
	}
	c := *n
	c.SecretHash = slices.Clone(n.SecretHash)
	c.Attributes = maps.Clone(n.Attributes)
	c.CSIControllerPlugins = copyInfoMap(n.CSIControllerPlugins)
	c.CSINodePlugins = copyInfoMap(n.CSINodePlugins)
	c.DrainStrategy = n.DrainStrategy.Copy()
	c.LastDrain = n.LastDrain.Copy()
	return &c
}

func copyInfoMap(m map[string]*CSIInfo) map[string]*CSIInfo {
	if m == nil {
		return nil
	}
	return copyInfos(m)
}

// PluginsEqual reports whether two fingerprint maps are the same, ignoring
// update times.
func PluginsEqual(a, b map[string]*CSIInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		// Check the key too: a nil fingerprint must not match a missing one.
		w, ok := b[k]
		if !ok || !v.Equal(w) {
			return false
		}
	}
	return true
}

// HashSecret replaces the node's secret with its hash, as the servers
// store it; a node without a secret in clear keeps its hash.
func (n *Node) HashSecret() {
	if n.SecretID != "" {
		n.SecretHash, n.SecretID = HashACLSecret(n.SecretID), ""
	}
}

// SecretMatches says, in constant time, whether secret is the one whose
// hash the node, as the servers store it, carries. An empty secret matches
// no node, nor does any secret a node without a hash.
func (n *Node) SecretMatches(secret string) bool {
	return secret != "" && len(n.SecretHash) == sha256.Size && ACLSecretMatches(secret, n.SecretHash)
}

// Validate checks a node as a client registers it, or as the servers
// store it, with its secret hashed.
func (n *Node) Validate() error {
	var m MultiError
	if err := ValidateID("node id", n.ID); err != nil {
		m.AddErr(err)
	}
	if n.SecretID == "" && len(n.SecretHash) == 0 {
		m.Add("missing node secret")
	}
	if len(n.SecretHash) != 0 && len(n.SecretHash) != sha256.Size {
		m.Add("node secret hash of %d bytes, not a SHA-256", len(n.SecretHash))
	}
	if n.Name == "" {
		m.Add("missing node name")
	} else if len(n.Name) > MaxNameLength {
		m.Add("node name is longer than %d characters", MaxNameLength)
	}
	if n.Status != "" && !ValidNodeStatus(n.Status) {
		m.Add("unknown node status %q", n.Status)
	}
	if n.SchedulingEligibility != "" && !ValidEligibility(n.SchedulingEligibility) {
		m.Add("unknown scheduling eligibility %q", n.SchedulingEligibility)
	}
	validateFingerprints(&m, n.CSIControllerPlugins, true)
	validateFingerprints(&m, n.CSINodePlugins, false)
	subject := "node"
	if n.ID != "" {
		subject = fmt.Sprintf("node %q", n.ID)
	}
	return m.ErrorOrNil(subject)
}

func validateFingerprints(m *MultiError, infos map[string]*CSIInfo, controller bool) {
	// Sorted, so that the same node always gets the same error text.
	for _, id := range sortedKeys(infos) {
		info := infos[id]
		switch {
		case info == nil:
			m.Add("plugin %q: empty fingerprint", id)
		case info.PluginID != id:
			m.Add("plugin %q: fingerprint names plugin %q", id, info.PluginID)
		case controller && info.ControllerInfo == nil:
			m.Add("plugin %q: controller fingerprint without controller info", id)
		case !controller && info.NodeInfo == nil:
			m.Add("plugin %q: node fingerprint without node info", id)
		default:
			m.AddErr(info.Validate())
		}
	}
}

// Stub returns the list view.
func (n *Node) Stub() *NodeListStub {
	s := &NodeListStub{
		ID:                    n.ID,
		Name:                  n.Name,
		Datacenter:            n.Datacenter,
		Address:               n.Address,
		Status:                n.Status,
		StatusDescription:     n.StatusDescription,
		StatusUpdatedAt:       n.StatusUpdatedAt,
		SchedulingEligibility: n.SchedulingEligibility,
		Drain:                 n.DrainStrategy != nil,
		LastDrain:             n.LastDrain.Copy(),
		LastHeartbeat:         n.LastHeartbeat,
		GCAfter:               n.GCAfter,
		CreateIndex:           n.CreateIndex,
		ModifyIndex:           n.ModifyIndex,
	}
	s.CSIControllerPlugins = sortedKeys(n.CSIControllerPlugins)
	s.CSINodePlugins = sortedKeys(n.CSINodePlugins)
	return s
}

// NodeListStub is the list view of a node.
type NodeListStub struct {
	ID                string
	Name              string
	Datacenter        string
	Address           string
	Status            string
	StatusDescription string
	StatusUpdatedAt   int64
	// Drain says whether the node is draining; SchedulingEligibility and
	// LastDrain are the node's, as in Nomad's node list.
	Drain                 bool
	SchedulingEligibility string
	LastDrain             *DrainMetadata
	CSIControllerPlugins  []string
	CSINodePlugins        []string
	LastHeartbeat         time.Time
	GCAfter               time.Time `json:",omitzero"`
	CreateIndex           uint64
	ModifyIndex           uint64
}

// NodeRegisterRequest registers a node, or re-registers it after a restart.
type NodeRegisterRequest struct {
	Node *Node
	// IntroToken is the secret of a node introduction token, for a node
	// that registers for the first time where servers require one. The
	// leader checks it and clears it before the Raft write.
	IntroToken string `json:"-"`
	// IntroAccessorID is the token the leader accepted (empty for one from
	// the server's configuration): the FSM checks it again and marks a
	// single-use token used.
	IntroAccessorID string
	WriteRequest
}

// NodeUpdateStatusRequest is a client's heartbeat: its status and, when they
// changed, its plugin fingerprints. Fingerprints that are nil mean "no change";
// an empty map means "none any more".
type NodeUpdateStatusRequest struct {
	NodeID               string
	SecretID             string
	Status               string
	CSIControllerPlugins map[string]*CSIInfo
	CSINodePlugins       map[string]*CSIInfo
	// UpdatedAt is stamped by the leader before the Raft apply.
	UpdatedAt int64
	WriteRequest
}

// NodeUpdateResponse answers register and heartbeat calls.
type NodeUpdateResponse struct {
	// HeartbeatTTL is how long the servers wait for the next heartbeat.
	HeartbeatTTL time.Duration
	// Servers are the RPC addresses of the servers, for failover.
	Servers []string
	QueryMeta
}

// NodeDeregisterRequest removes nodes from state.
type NodeDeregisterRequest struct {
	NodeIDs []string
	WriteRequest
}

// NodeSpecificRequest reads one node.
type NodeSpecificRequest struct {
	NodeID string
	QueryOptions
}

// SingleNodeResponse carries one node, nil when unknown.
type SingleNodeResponse struct {
	Node *Node
	QueryMeta
}

// NodeListRequest lists nodes, by ID prefix.
type NodeListRequest struct {
	QueryOptions
}

// NodeListResponse carries node stubs.
type NodeListResponse struct {
	Nodes []*NodeListStub
	QueryMeta
}

// NodeConnQueryResponse says whether a server holds a session with a node,
// and since when.
type NodeConnQueryResponse struct {
	Connected   bool
	Established time.Time
	QueryMeta
}
