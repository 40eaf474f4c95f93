package structs

import (
	"crypto/sha256"
	"crypto/subtle"
	"regexp"
	"slices"
	"time"

	"github.com/volplane/volplane/acl"
)

// ACL token types, as Nomad's.
const (
	ACLClientToken     = "client"
	ACLManagementToken = "management"
)

// AnonymousPolicyName is the policy that applies to requests without a
// token, as in Nomad: it exists only when an operator creates it, and
// requests without a token are denied everything until then.
const AnonymousPolicyName = "anonymous"

// Nomad's name of the token a bootstrap creates.
const BootstrapTokenName = "Bootstrap Token"

// Bounds of ACL objects. Names are Nomad's; the counts keep one request
// from writing an unbounded Raft entry.
const (
	MaxACLPolicyDescription = 256
	MaxACLTokenName         = 256
	MaxACLTokenPolicies     = 64
	MaxACLObjectsPerRequest = 256
	// ACL token lifetimes, Nomad's defaults (acl { token_min_expiration_ttl,
	// token_max_expiration_ttl }).
	MinACLTokenTTL = time.Minute
	MaxACLTokenTTL = 24 * time.Hour
)

// validACLName is a policy name, as Nomad's.
var validACLName = regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`)

// ACLPolicy is a named set of rules in Nomad's policy language.
type ACLPolicy struct {
	Name        string
	Description string
	Rules       string

	CreateIndex uint64
	ModifyIndex uint64
}

// ACLPolicyListStub is a policy as lists show it.
type ACLPolicyListStub struct {
	Name        string
	Description string
	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a copy; a policy has no references.
func (p *ACLPolicy) Copy() *ACLPolicy {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// Stub returns the policy as lists show it.
func (p *ACLPolicy) Stub() *ACLPolicyListStub {
	return &ACLPolicyListStub{Name: p.Name, Description: p.Description, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex}
}

// Validate checks a policy as an operator writes it; its rules must parse.
// The same check runs on the leader and in the FSM.
func (p *ACLPolicy) Validate() error {
	var m MultiError
	if !validACLName.MatchString(p.Name) {
		m.Add("name %q must be 1 to 128 letters, digits and dashes", truncate(p.Name, 64))
	}
	if len(p.Description) > MaxACLPolicyDescription {
		m.Add("description is longer than %d characters", MaxACLPolicyDescription)
	}
	if _, err := acl.Parse(p.Rules); err != nil {
		m.Add("rules: %v", err)
	}
	return m.ErrorOrNil("ACL policy " + quoteName(p.Name))
}

// ACLToken is a token: a SecretID that callers send as X-Nomad-Token, and
// an AccessorID that names it. The servers keep only a hash of the secret
// (SecretHash): SecretID is filled in the reply to the token's creation or
// the bootstrap, and nowhere else.
type ACLToken struct {
	AccessorID string
	SecretID   string
	Name       string
	Type       string
	Policies   []string
	// Global is always true: volplane has one region, and every token is
	// known to every server.
	Global bool

	CreateTime time.Time
	// ExpirationTime is when the token stops working; nil never.
	ExpirationTime *time.Time `json:",omitempty"`
	// ExpirationTTL is how the caller asked for ExpirationTime at creation.
	ExpirationTTL time.Duration `json:",omitempty"`

	// SecretHash is the SHA-256 of the secret, by which a token is looked
	// up. Never returned by the API.
	SecretHash []byte `json:"-"`

	CreateIndex uint64
	ModifyIndex uint64
}

// ACLTokenListStub is a token as lists show it.
type ACLTokenListStub struct {
	AccessorID     string
	Name           string
	Type           string
	Policies       []string
	Global         bool
	CreateTime     time.Time
	ExpirationTime *time.Time `json:",omitempty"`
	CreateIndex    uint64
	ModifyIndex    uint64
}

// Copy returns a deep copy.
func (t *ACLToken) Copy() *ACLToken {
	if t == nil {
		return nil
	}
	c := *t
	c.Policies = slices.Clone(t.Policies)
	c.SecretHash = slices.Clone(t.SecretHash)
	if t.ExpirationTime != nil {
		e := *t.ExpirationTime
		c.ExpirationTime = &e
	}
	return &c
}

// Public is the token as any answer but its creation shows it: no secret,
// no hash.
func (t *ACLToken) Public() *ACLToken {
	c := t.Copy()
	c.SecretID, c.SecretHash = "", nil
	return c
}

// Stub returns the token as lists show it.
func (t *ACLToken) Stub() *ACLTokenListStub {
	c := t.Copy()
	return &ACLTokenListStub{AccessorID: c.AccessorID, Name: c.Name, Type: c.Type, Policies: c.Policies,
		Global: c.Global, CreateTime: c.CreateTime, ExpirationTime: c.ExpirationTime,
		CreateIndex: c.CreateIndex, ModifyIndex: c.ModifyIndex}
}

// IsManagement reports whether the token may do everything.
func (t *ACLToken) IsManagement() bool { return t != nil && t.Type == ACLManagementToken }

// IsExpired reports whether the token no longer works at now.
func (t *ACLToken) IsExpired(now time.Time) bool {
	return t != nil && t.ExpirationTime != nil && !t.ExpirationTime.IsZero() && !now.Before(*t.ExpirationTime)
}

// Validate checks what an operator may set on a token: its name, type and
// policies. The times and the hash are the leader's to set and are checked
// where they are set.
func (t *ACLToken) Validate() error {
	var m MultiError
	if len(t.Name) > MaxACLTokenName {
		m.Add("name is longer than %d characters", MaxACLTokenName)
	}
	switch t.Type {
	case ACLClientToken:
		if len(t.Policies) == 0 {
			m.Add("a client token needs at least one policy")
		}
	case ACLManagementToken:
		if len(t.Policies) != 0 {
			m.Add("a management token cannot have policies")
		}
	default:
		m.Add("type %q must be %q or %q", truncate(t.Type, 32), ACLClientToken, ACLManagementToken)
	}
	if len(t.Policies) > MaxACLTokenPolicies {
		m.Add("%d policies is more than the limit of %d", len(t.Policies), MaxACLTokenPolicies)
	}
	for _, p := range t.Policies {
		if !validACLName.MatchString(p) {
			m.Add("policy name %q must be 1 to 128 letters, digits and dashes", truncate(p, 64))
		}
	}
	if t.ExpirationTTL < 0 {
		m.Add("expiration TTL %s must not be negative", t.ExpirationTTL)
	} else if t.ExpirationTTL > 0 && (t.ExpirationTTL < MinACLTokenTTL || t.ExpirationTTL > MaxACLTokenTTL) {
		m.Add("expiration TTL %s must be between %s and %s", t.ExpirationTTL, MinACLTokenTTL, MaxACLTokenTTL)
	}
	return m.ErrorOrNil("ACL token")
}

// HashACLSecret is the hash a token's secret is stored and looked up by.
func HashACLSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// ACLSecretMatches compares a secret with a stored hash in constant time.
func ACLSecretMatches(secret string, hash []byte) bool {
	return subtle.ConstantTimeCompare(HashACLSecret(secret), hash) == 1
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func quoteName(s string) string {
	return `"` + truncate(s, 64) + `"`
}

// ACLPolicyUpsertRequest creates or replaces policies, all or nothing.
type ACLPolicyUpsertRequest struct {
	Policies []*ACLPolicy
	WriteRequest
}

// ACLPolicyDeleteRequest deletes policies by name, all or nothing.
type ACLPolicyDeleteRequest struct {
	Names []string
	WriteRequest
}

// ACLPolicyListRequest lists policies, by name prefix.
type ACLPolicyListRequest struct {
	QueryOptions
}

// ACLPolicyListResponse carries the policies the token may see.
type ACLPolicyListResponse struct {
	Policies []*ACLPolicyListStub
	QueryMeta
}

// ACLPolicySpecificRequest reads one policy.
type ACLPolicySpecificRequest struct {
	Name string
	QueryOptions
}

// SingleACLPolicyResponse carries one policy, nil when unknown.
type SingleACLPolicyResponse struct {
	Policy *ACLPolicy
	QueryMeta
}

// ACLTokenBootstrapRequest creates the first management token. The leader
// fills Token (with the hash of its secret) and ResetIndex; the FSM applies
// it only while no bootstrap happened since ResetIndex.
type ACLTokenBootstrapRequest struct {
	Token *ACLToken
	// ResetIndex is 0 for a first bootstrap, or the index of the bootstrap
	// an operator reset (the acl-bootstrap-reset file).
	ResetIndex uint64
	// BootstrapSecret, when set by the operator, is the new token's secret
	// (a UUID), as Nomad's. It never reaches the Raft log.
	BootstrapSecret string
	WriteRequest
}

// ACLTokenUpsertRequest creates or updates tokens, all or nothing. A token
// without an AccessorID is created; the leader then fills its accessor,
// hash and times. Tokens in the Raft entry never carry a SecretID.
type ACLTokenUpsertRequest struct {
	Tokens []*ACLToken
	WriteRequest
}

// ACLTokenUpsertResponse carries the tokens written; a created token's
// SecretID is in it, this once.
type ACLTokenUpsertResponse struct {
	Tokens []*ACLToken
	WriteMeta
}

// ACLTokenDeleteRequest deletes tokens by accessor, all or nothing.
type ACLTokenDeleteRequest struct {
	AccessorIDs []string
	WriteRequest
}

// ACLTokenListRequest lists tokens, by accessor prefix.
type ACLTokenListRequest struct {
	QueryOptions
}

// ACLTokenListResponse carries token stubs.
type ACLTokenListResponse struct {
	Tokens []*ACLTokenListStub
	QueryMeta
}

// ACLTokenSpecificRequest reads one token by accessor.
type ACLTokenSpecificRequest struct {
	AccessorID string
	QueryOptions
}

// SingleACLTokenResponse carries one token without its secret, nil when
// unknown.
type SingleACLTokenResponse struct {
	Token *ACLToken
	QueryMeta
}

// RequestWithToken is implemented by every request: the token the caller
// sent (X-Nomad-Token), which the servers resolve to what it may do.
type RequestWithToken interface {
	RequestToken() string
	SetRequestToken(string)
}

// RequestToken is the caller's token.
func (w *WriteRequest) RequestToken() string { return w.AuthToken }

// SetRequestToken sets the caller's token.
func (w *WriteRequest) SetRequestToken(t string) { w.AuthToken = t }

// RequestToken is the caller's token.
func (q *QueryOptions) RequestToken() string { return q.AuthToken }

// SetRequestToken sets the caller's token.
func (q *QueryOptions) SetRequestToken(t string) { q.AuthToken = t }
