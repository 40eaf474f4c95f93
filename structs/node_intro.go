package structs

import (
	"crypto/sha256"
	"crypto/subtle"
	"time"
)

// How a node was let in, recorded on the node (Node.IntroducedBy). A node
// registered while the cluster was open has none; in a cluster that
// requires introduction or TLS, controller calls go only to nodes that
// were introduced.
const (
	NodeIntroducedByTLS   = "tls-certificate"
	NodeIntroducedByToken = "intro-token"
	NodeIntroducedByBoth  = "tls-certificate+intro-token"
)

// NodeIntroToken lets a new node register where servers require
// introduction (server { node_intro_required = true }). Only a hash of its
// secret is kept: the secret is shown once, when the token is created.
type NodeIntroToken struct {
	AccessorID string
	Name       string
	// SecretHash is the SHA-256 of the secret. Never returned by the API.
	SecretHash []byte `json:"-"`
	// SingleUse tokens introduce one node; UsedBy is that node's ID.
	SingleUse bool
	UsedBy    string
	// CreateTime is stamped by the leader; ExpirationTime is zero for a
	// token that does not expire.
	CreateTime     time.Time
	ExpirationTime time.Time

	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy.
func (t *NodeIntroToken) Copy() *NodeIntroToken {
	if t == nil {
		return nil
	}
	c := *t
	c.SecretHash = append([]byte(nil), t.SecretHash...)
	return &c
}

// Stub is the token as the API shows it: everything but the hash.
func (t *NodeIntroToken) Stub() *NodeIntroToken {
	c := t.Copy()
	c.SecretHash = nil
	return c
}

// Usable says why the token cannot introduce node nodeID at now, or nil.
// The same rule runs on the leader before the write and in the FSM.
func (t *NodeIntroToken) Usable(nodeID string, now time.Time) error {
	if !t.ExpirationTime.IsZero() && !now.Before(t.ExpirationTime) {
		return NewError(ErrCodePermissionDenied, "node introduction token %q expired at %s",
			t.AccessorID, t.ExpirationTime.UTC().Format(time.RFC3339))
	}
	if t.SingleUse && t.UsedBy != "" && t.UsedBy != nodeID {
		return NewError(ErrCodePermissionDenied, "node introduction token %q was already used by node %q",
			t.AccessorID, t.UsedBy)
	}
	return nil
}

// HashIntroSecret is the hash a token's secret is stored and looked up by.
func HashIntroSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// IntroSecretMatches compares a secret with a stored hash in constant time.
func IntroSecretMatches(secret string, hash []byte) bool {
	return subtle.ConstantTimeCompare(HashIntroSecret(secret), hash) == 1
}

// MaxIntroTokenTTL bounds the lifetime an operator may give a token.
const MaxIntroTokenTTL = 365 * 24 * time.Hour

// NodeIntroCreateRequest creates a token. The endpoint fills Token (with
// the hash, the accessor, and the times) before the Raft write.
type NodeIntroCreateRequest struct {
	Name      string
	TTL       time.Duration
	SingleUse bool

	Token *NodeIntroToken
	WriteRequest
}

// Validate checks what the operator sent.
func (r *NodeIntroCreateRequest) Validate() error {
	var m MultiError
	if len(r.Name) > MaxNameLength {
		m.Add("name is longer than %d characters", MaxNameLength)
	}
	if r.TTL < 0 || r.TTL > MaxIntroTokenTTL {
		m.Add("ttl %s is not between 0 (no expiry) and %s", r.TTL, MaxIntroTokenTTL)
	}
	return m.ErrorOrNil("node introduction token")
}

// NodeIntroCreateResponse carries the new token and, this once, its secret.
type NodeIntroCreateResponse struct {
	Token    *NodeIntroToken
	SecretID string
	WriteMeta
}

// NodeIntroListRequest lists the tokens.
type NodeIntroListRequest struct {
	QueryOptions
}

// NodeIntroListResponse carries the tokens, without their hashes.
type NodeIntroListResponse struct {
	Tokens []*NodeIntroToken
	QueryMeta
}

// NodeIntroDeleteRequest revokes tokens by accessor ID.
type NodeIntroDeleteRequest struct {
	AccessorIDs []string
	WriteRequest
}

// SecurityStatus is how a server is protected, for operators: whether any
// process that reaches its ports may act as a server or a node.
type SecurityStatus struct {
	Region            string
	RPCTLS            bool
	HTTPTLS           bool
	NodeIntroRequired bool
	// ACLEnabled is whether requests need an ACL token that allows them.
	ACLEnabled bool
	// Open is true when anything that reaches the RPC port can register a
	// node (no TLS and no introduction required).
	Open bool
	// Warnings say what an attacker on the network could do, one line each.
	Warnings []string
}
