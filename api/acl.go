package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/volplane/volplane/structs"
)

// ACLPolicies is the ACL policy endpoints.
type ACLPolicies struct{ c *Client }

// ACLPolicies returns the ACL policy endpoints.
func (c *Client) ACLPolicies() *ACLPolicies { return &ACLPolicies{c: c} }

// List returns the policies the token may see.
func (a *ACLPolicies) List(q *QueryOptions) ([]*structs.ACLPolicyListStub, *QueryMeta, error) {
	return list[*structs.ACLPolicyListStub](a.c, "/v1/acl/policies", q)
}

// Info reads one policy.
func (a *ACLPolicies) Info(name string, q *QueryOptions) (*structs.ACLPolicy, *QueryMeta, error) {
	if name == "" {
		return nil, nil, errors.New("missing policy name")
	}
	return get[structs.ACLPolicy](a.c, "/v1/acl/policy/"+escape(name), q)
}

// Upsert creates or replaces a policy.
func (a *ACLPolicies) Upsert(p *structs.ACLPolicy, w *WriteOptions) (*WriteMeta, error) {
	if p == nil || p.Name == "" {
		return nil, errors.New("missing policy name")
	}
	r := a.c.newWrite(http.MethodPut, "/v1/acl/policy/"+escape(p.Name), w)
	r.body = map[string]string{"Name": p.Name, "Description": p.Description, "Rules": p.Rules}
	return a.c.write(r, nil)
}

// Delete deletes a policy.
func (a *ACLPolicies) Delete(name string, w *WriteOptions) (*WriteMeta, error) {
	if name == "" {
		return nil, errors.New("missing policy name")
	}
	return a.c.write(a.c.newWrite(http.MethodDelete, "/v1/acl/policy/"+escape(name), w), nil)
}

// ACLTokens is the ACL token endpoints.
type ACLTokens struct{ c *Client }

// ACLTokens returns the ACL token endpoints.
func (c *Client) ACLTokens() *ACLTokens { return &ACLTokens{c: c} }

// Bootstrap creates the first management token; secret, when set, is its
// SecretID (a UUID). The answer carries the SecretID, this once.
func (a *ACLTokens) Bootstrap(secret string, w *WriteOptions) (*structs.ACLToken, *WriteMeta, error) {
	r := a.c.newWrite(http.MethodPut, "/v1/acl/bootstrap", w)
	if secret != "" {
		r.body = map[string]string{"BootstrapSecret": secret}
	}
	var out structs.ACLToken
	wm, err := a.c.write(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, wm, nil
}

// TokenOptions describe a token to create or update.
type TokenOptions struct {
	Name     string
	Type     string // "client" or "management"
	Policies []string
	// TTL, at creation, makes the token expire that long after.
	TTL time.Duration
}

func (o TokenOptions) body() map[string]any {
	b := map[string]any{"Name": o.Name, "Type": o.Type, "Policies": o.Policies}
	if o.Policies == nil {
		b["Policies"] = []string{}
	}
	if o.TTL > 0 {
		b["ExpirationTTL"] = o.TTL.String()
	}
	return b
}

// Create creates a token; the answer carries its SecretID, this once.
func (a *ACLTokens) Create(o TokenOptions, w *WriteOptions) (*structs.ACLToken, *WriteMeta, error) {
	r := a.c.newWrite(http.MethodPut, "/v1/acl/token", w)
	r.body = o.body()
	var out structs.ACLToken
	wm, err := a.c.write(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, wm, nil
}

// Update changes a token's name, type and policies.
func (a *ACLTokens) Update(accessor string, o TokenOptions, w *WriteOptions) (*structs.ACLToken, *WriteMeta, error) {
	if accessor == "" {
		return nil, nil, errors.New("missing accessor id")
	}
	r := a.c.newWrite(http.MethodPut, "/v1/acl/token/"+escape(accessor), w)
	body := o.body()
	delete(body, "ExpirationTTL")
	r.body = body
	var out structs.ACLToken
	wm, err := a.c.write(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, wm, nil
}

// List returns token stubs (management tokens only).
func (a *ACLTokens) List(q *QueryOptions) ([]*structs.ACLTokenListStub, *QueryMeta, error) {
	return list[*structs.ACLTokenListStub](a.c, "/v1/acl/tokens", q)
}

// Info reads a token by accessor, never with its secret.
func (a *ACLTokens) Info(accessor string, q *QueryOptions) (*structs.ACLToken, *QueryMeta, error) {
	if accessor == "" {
		return nil, nil, errors.New("missing accessor id")
	}
	return get[structs.ACLToken](a.c, "/v1/acl/token/"+escape(accessor), q)
}

// Self reads the caller's own token.
func (a *ACLTokens) Self(q *QueryOptions) (*structs.ACLToken, *QueryMeta, error) {
	return get[structs.ACLToken](a.c, "/v1/acl/token/self", q)
}

// Delete deletes a token.
func (a *ACLTokens) Delete(accessor string, w *WriteOptions) (*WriteMeta, error) {
	if accessor == "" {
		return nil, errors.New("missing accessor id")
	}
	return a.c.write(a.c.newWrite(http.MethodDelete, "/v1/acl/token/"+escape(accessor), w), nil)
}
