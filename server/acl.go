package server

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/volplane/volplane/acl"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// identity is who a request acts as, once its token is resolved.
type identity struct {
	// acl is what the caller may do.
	acl *acl.ACL
	// token is the caller's token: the anonymous token for a request
	// without one, nil for a client node.
	token *structs.ACLToken
	// nodeID is set when the token was a client node's secret: the node
	// may then act for itself only.
	nodeID string
}

// anonymousToken is what a request without a token acts as: the policy
// named "anonymous", when an operator created it.
var anonymousToken = &structs.ACLToken{
	AccessorID: "anonymous",
	Name:       "Anonymous Token",
	Type:       structs.ACLClientToken,
	Policies:   []string{structs.AnonymousPolicyName},
	Global:     true,
}

// Default lifetimes of the resolver's cache entries (acl { token_ttl,
// policy_ttl }).
const (
	defaultACLTokenTTL  = 30 * time.Second
	defaultACLPolicyTTL = 30 * time.Second
	// maxACLCacheEntries bounds each cache: past it, entries are dropped
	// at random, so a flood of distinct tokens costs resolutions, not
	// memory.
	maxACLCacheEntries = 4096
)

// aclResolver turns a request's secret into an identity, from this
// server's own state. Resolved tokens and compiled policy sets are cached;
// an entry is used only while the token and policy tables are at the
// indexes it was built at (any write to them ends every entry), the state
// store is the same one (a snapshot restore replaces it), and its TTL has
// not run out. Node identities are not cached: their lookup is one hash and
// one index read.
type aclResolver struct {
	tokenTTL, policyTTL time.Duration

	mu       sync.Mutex
	tokens   map[string]*tokenEntry  // by the hash of the secret
	policies map[string]*policyEntry // by the sorted policy names
}

type tokenEntry struct {
	id       *identity
	store    *state.StateStore
	tokIdx   uint64
	polIdx   uint64
	resolved time.Time
}

type policyEntry struct {
	acl      *acl.ACL
	store    *state.StateStore
	polIdx   uint64
	compiled time.Time
}

func newACLResolver(tokenTTL, policyTTL time.Duration) *aclResolver {
	if tokenTTL <= 0 {
		tokenTTL = defaultACLTokenTTL
	}
	if policyTTL <= 0 {
		policyTTL = defaultACLPolicyTTL
	}
	return &aclResolver{tokenTTL: tokenTTL, policyTTL: policyTTL,
		tokens: map[string]*tokenEntry{}, policies: map[string]*policyEntry{}}
}

// resolve returns the identity of secret in st at now: a token (management
// or client, or the anonymous one for ""), or a client node whose secret it
// is. An unknown or malformed secret is structs.ErrTokenNotFound, an expired
// token structs.ErrTokenExpired.
func (r *aclResolver) resolve(st *state.StateStore, secret string, now time.Time) (*identity, error) {
	tokIdx, err := st.Index(state.TableACLTokens)
	if err != nil {
		return nil, err
	}
	polIdx, err := st.Index(state.TableACLPolicies)
	if err != nil {
		return nil, err
	}
	key := string(structs.HashACLSecret(secret))
	r.mu.Lock()
	e := r.tokens[key]
	r.mu.Unlock()
	if e != nil && e.store == st && e.tokIdx == tokIdx && e.polIdx == polIdx && now.Sub(e.resolved) < r.tokenTTL {
		if e.id.token.IsExpired(now) {
			return nil, structs.ErrTokenExpired
		}
		return e.id, nil
	}

	var id *identity
	switch {
	case secret == "":
		a, err := r.compile(st, polIdx, anonymousToken.Policies, now)
		if err != nil {
			return nil, err
		}
		id = &identity{acl: a, token: anonymousToken}
	default:
		tok, err := st.ACLTokenBySecret(secret)
		if err != nil {
			return nil, err
		}
		if tok == nil {
			node, err := st.NodeBySecret(secret)
			if err != nil {
				return nil, err
			}
			if node == nil {
				return nil, structs.ErrTokenNotFound
			}
			return &identity{acl: acl.DenyAll, nodeID: node.ID}, nil
		}
		if tok.IsExpired(now) {
			return nil, structs.ErrTokenExpired
		}
		a := acl.Management
		if !tok.IsManagement() {
			if a, err = r.compile(st, polIdx, tok.Policies, now); err != nil {
				return nil, err
			}
		}
		id = &identity{acl: a, token: tok}
	}
	r.mu.Lock()
	evictOne(r.tokens)
	r.tokens[key] = &tokenEntry{id: id, store: st, tokIdx: tokIdx, polIdx: polIdx, resolved: now}
	r.mu.Unlock()
	return id, nil
}

// compile returns the ACL of a set of policies. A policy that no longer
// exists grants nothing, as in Nomad; one stored policy that does not parse
// (it did when it was written) is skipped rather than denying the token
// everything its other policies grant.
func (r *aclResolver) compile(st *state.StateStore, polIdx uint64, names []string, now time.Time) (*acl.ACL, error) {
	sorted := slices.Sorted(slices.Values(names))
	key := strings.Join(sorted, "\x00")
	r.mu.Lock()
	e := r.policies[key]
	r.mu.Unlock()
	if e != nil && e.store == st && e.polIdx == polIdx && now.Sub(e.compiled) < r.policyTTL {
		return e.acl, nil
	}
	var parsed []*acl.Policy
	for _, name := range sorted {
		p, err := st.ACLPolicyByName(nil, name)
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue
		}
		if pol, err := acl.Parse(p.Rules); err == nil {
			parsed = append(parsed, pol)
		}
	}
	a := acl.New(parsed)
	r.mu.Lock()
	evictOne(r.policies)
	r.policies[key] = &policyEntry{acl: a, store: st, polIdx: polIdx, compiled: now}
	r.mu.Unlock()
	return a, nil
}

// evictOne drops an arbitrary entry of a full cache.
func evictOne[V any](m map[string]V) {
	if len(m) < maxACLCacheEntries {
		return
	}
	for k := range m {
		delete(m, k)
		return
	}
}

// aclIdentity resolves the token of a request on this server: nil, nil when
// ACLs are off (everything is allowed).
func (s *Server) aclIdentity(args any) (*identity, error) {
	if !s.config.ACLEnabled {
		return nil, nil
	}
	var secret string
	if r, ok := args.(structs.RequestWithToken); ok {
		secret = r.RequestToken()
	}
	return s.acls.resolve(s.State(), secret, time.Now())
}

// nsFilter returns a function telling which namespaces a list shows the
// identity: those where it may do any of ops. nil when everything shows.
func (id *identity) nsFilter(ops ...string) func(ns string) bool {
	if id == nil || id.acl.IsManagement() {
		return nil
	}
	return func(ns string) bool { return id.acl.AllowNsOpAnyOf(ns, ops...) }
}

// namespacesShown returns, for a read of namespace ns (acl.AllNamespaces
// for all), which namespaces' objects the caller may see: those where it
// may do any of ops. nil when it sees everything: ACLs are off, it is a
// management token, or ns is one namespace (which the endpoint's rule has
// checked already).
func (s *Server) namespacesShown(args any, ns string, ops ...string) (func(string) bool, error) {
	if ns != acl.AllNamespaces {
		return nil, nil
	}
	id, err := s.aclIdentity(args)
	if err != nil {
		return nil, err
	}
	return id.nsFilter(ops...), nil
}

// eventFilter checks the token of an event stream subscription (the
// "Event.Stream" row of aclRules) against this server's state, which the
// stream is read from, and returns which events the token may see: a
// volume's and its claims' where it may read the volume, plugins' with
// plugin read, tokens' and policies' for a management token. The token is
// resolved again (from the cache) for every event and heartbeat: once it
// is deleted or expires, the stream ends.
func (s *Server) eventFilter(secret string) (func(ev state.Event) (bool, error), error) {
	if !s.config.ACLEnabled {
		return nil, nil
	}
	const endpoint = "Event.Stream"
	args := &structs.GenericRequest{QueryOptions: structs.QueryOptions{AuthToken: secret, AllowStale: true}}
	id, err := s.aclIdentity(args)
	if err != nil {
		return nil, s.denied(endpoint, nil, err)
	}
	if !aclRules[endpoint].allows(id, args) {
		return nil, s.denied(endpoint, id, structs.ErrPermissionDenied)
	}
	return func(ev state.Event) (bool, error) {
		id, err := s.aclIdentity(args)
		if err != nil {
			return false, err
		}
		switch ev.Topic {
		case state.TopicCSIVolume, state.TopicCSIClaim:
			return id.acl.AllowNsOpAnyOf(ev.Namespace, volumeReadCaps...), nil
		case state.TopicCSIPlugin:
			return id.acl.AllowPluginRead(), nil
		case state.TopicACLToken, state.TopicACLPolicy:
			return id.acl.IsManagement(), nil
		}
		return false, nil
	}, nil
}
