package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-uuid"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// ACL is the endpoint for ACL policies and tokens. Who may call each
// method is in aclRules, checked by forward; the methods check what the
// request says.
type ACL struct {
	srv    *Server
	logger hclog.Logger
}

// errACLDisabled answers ACL calls on a cluster without ACLs, in Nomad's
// words.
var errACLDisabled = structs.ErrInvalid("ACL support disabled")

// ACLBootstrapResetFile is the file, in the server dir of a server's data
// dir, that lets the bootstrap run again, as in Nomad: it holds the reset
// index the refused bootstrap named.
const ACLBootstrapResetFile = "acl-bootstrap-reset"

// BootstrapResetPath is where the leader looks for the reset file.
func BootstrapResetPath(dataDir string) string {
	return filepath.Join(dataDir, "server", ACLBootstrapResetFile)
}

// Bootstrap creates the first management token and returns it with its
// secret. Once done, it is refused with the reset index, unless the
// leader's data dir holds the reset file with that index.
func (e *ACL) Bootstrap(args *structs.ACLTokenBootstrapRequest, reply *structs.ACLTokenUpsertResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.Bootstrap", args, args, reply); done {
		return err
	}
	secret := args.BootstrapSecret
	if secret != "" {
		if _, err := uuid.ParseUUID(secret); err != nil {
			return structs.ErrInvalid("invalid acl token: the bootstrap secret must be a UUID")
		}
	}
	args.BootstrapSecret = ""
	done, err := e.srv.State().ACLBootstrapIndex()
	if err != nil {
		return err
	}
	args.ResetIndex = 0
	if done != 0 {
		specified := e.bootstrapResetIndex()
		switch {
		case specified == 0:
			return state.ErrACLBootstrapDone(done)
		case specified != done:
			return structs.ErrInvalid("Invalid bootstrap reset index (specified %d, reset index: %d)", specified, done)
		}
		args.ResetIndex = done
	}
	if secret == "" {
		if secret, err = uuid.GenerateUUID(); err != nil {
			return err
		}
	}
	accessor, err := uuid.GenerateUUID()
	if err != nil {
		return err
	}
	args.Token = &structs.ACLToken{AccessorID: accessor, Name: structs.BootstrapTokenName,
		Type: structs.ACLManagementToken, Global: true, CreateTime: time.Now().UTC(),
		SecretHash: structs.HashACLSecret(secret)}
	_, index, err := e.srv.raftApply(structs.ACLTokenBootstrapRequestType, args)
	if err != nil {
		return err
	}
	e.logger.Info("ACL bootstrap done: management token created", "accessor_id", accessor, "reset_index", args.ResetIndex)
	tok, err := e.stored(accessor, secret)
	if err != nil {
		return err
	}
	reply.Tokens, reply.Index = []*structs.ACLToken{tok}, index
	return nil
}

// bootstrapResetIndex reads the reset file; 0 when there is none or it
// does not hold a number.
func (e *ACL) bootstrapResetIndex() uint64 {
	path := BootstrapResetPath(e.srv.config.DataDir)
	raw, err := os.ReadFile(path)
	if err != nil {
		if !os.IsNotExist(err) {
			e.logger.Error("reading the ACL bootstrap reset file", "path", path, "error", err)
		}
		return 0
	}
	var idx uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(raw)), "%d", &idx); err != nil {
		e.logger.Error("the ACL bootstrap reset file does not hold an index", "path", path)
		return 0
	}
	e.logger.Warn("ACL bootstrap reset file found", "path", path, "reset_index", idx)
	return idx
}

// stored reads a token back after its write, for the reply, with secret
// (its creation's, or "") set.
func (e *ACL) stored(accessor, secret string) (*structs.ACLToken, error) {
	tok, err := e.srv.State().ACLTokenByAccessorID(nil, accessor)
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, structs.ErrNotFound("ACL token %q not found after its write", accessor)
	}
	out := tok.Public()
	out.SecretID = secret
	return out, nil
}

// checkCount bounds the objects of one request.
func checkCount(what string, n int) error {
	switch {
	case n == 0:
		return structs.ErrInvalid("no %s given", what)
	case n > structs.MaxACLObjectsPerRequest:
		return structs.ErrInvalid("%d %s in one request is more than the limit of %d", n, what, structs.MaxACLObjectsPerRequest)
	}
	return nil
}

// UpsertPolicies creates or replaces policies; each must parse.
func (e *ACL) UpsertPolicies(args *structs.ACLPolicyUpsertRequest, reply *structs.GenericResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.UpsertPolicies", args, args, reply); done {
		return err
	}
	if err := checkCount("policies", len(args.Policies)); err != nil {
		return err
	}
	out := make([]*structs.ACLPolicy, len(args.Policies))
	for i, p := range args.Policies {
		if p == nil {
			return structs.ErrInvalid("policy %d of the request is empty", i+1)
		}
		if err := p.Validate(); err != nil {
			return err
		}
		c := p.Copy()
		c.CreateIndex, c.ModifyIndex = 0, 0
		out[i] = c
	}
	args.Policies = out
	_, index, err := e.srv.raftApply(structs.ACLPolicyUpsertRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}

// DeletePolicies deletes policies by name.
func (e *ACL) DeletePolicies(args *structs.ACLPolicyDeleteRequest, reply *structs.GenericResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.DeletePolicies", args, args, reply); done {
		return err
	}
	if err := checkCount("policy names", len(args.Names)); err != nil {
		return err
	}
	_, index, err := e.srv.raftApply(structs.ACLPolicyDeleteRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}

// ListPolicies lists the policies the token may see: every one for a
// management token, its own for others.
func (e *ACL) ListPolicies(args *structs.ACLPolicyListRequest, reply *structs.ACLPolicyListResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.ListPolicies", args, args, reply); done {
		return err
	}
	id, err := e.srv.aclIdentity(args)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		iter, err := st.ACLPolicies(ws, args.Prefix)
		if err != nil {
			return 0, err
		}
		reply.Policies = []*structs.ACLPolicyListStub{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			p := raw.(*structs.ACLPolicy)
			if id.token.IsManagement() || (id.token != anonymousToken && contains(id.token.Policies, p.Name)) {
				reply.Policies = append(reply.Policies, p.Stub())
			}
		}
		return st.Index(state.TableACLPolicies)
	})
}

// GetPolicy returns one policy; Policy is nil when unknown.
func (e *ACL) GetPolicy(args *structs.ACLPolicySpecificRequest, reply *structs.SingleACLPolicyResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.GetPolicy", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		p, err := st.ACLPolicyByName(ws, args.Name)
		if err != nil {
			return 0, err
		}
		reply.Policy = p
		if p == nil {
			return st.Index(state.TableACLPolicies)
		}
		return p.ModifyIndex, nil
	})
}

// UpsertTokens creates tokens (those without an AccessorID) and updates
// others. A created token gets a new accessor and secret, its create time
// and, with an ExpirationTTL, its expiration time, all decided here; the
// reply carries its secret, which is never shown again. An update may
// change the name, type and policies only.
func (e *ACL) UpsertTokens(args *structs.ACLTokenUpsertRequest, reply *structs.ACLTokenUpsertResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.UpsertTokens", args, args, reply); done {
		return err
	}
	if err := checkCount("tokens", len(args.Tokens)); err != nil {
		return err
	}
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	secrets := make([]string, len(args.Tokens))
	out := make([]*structs.ACLToken, len(args.Tokens))
	for i, in := range args.Tokens {
		if in == nil {
			return structs.ErrInvalid("token %d of the request is empty", i+1)
		}
		t := in.Copy()
		t.Global, t.SecretHash = true, nil
		if t.AccessorID == "" {
			if secrets[i], err = e.prepareCreate(t, now); err != nil {
				return err
			}
		} else if err := prepareUpdate(snap, t); err != nil {
			return err
		}
		if err := t.Validate(); err != nil {
			return err
		}
		for _, name := range t.Policies {
			p, err := snap.ACLPolicyByName(nil, name)
			if err != nil {
				return err
			}
			if p == nil {
				return structs.ErrInvalid("ACL token: policy %q does not exist", name)
			}
		}
		out[i] = t
	}
	args.Tokens = out
	_, index, err := e.srv.raftApply(structs.ACLTokenUpsertRequestType, args)
	if err != nil {
		return err
	}
	reply.Tokens = nil
	for i, t := range out {
		tok, err := e.stored(t.AccessorID, secrets[i])
		if err != nil {
			return err
		}
		reply.Tokens = append(reply.Tokens, tok)
	}
	reply.Index = index
	return nil
}

// prepareCreate fills a new token's accessor, hash and times, and returns
// its secret. A SecretID the caller sent is ignored, as in Nomad.
func (e *ACL) prepareCreate(t *structs.ACLToken, now time.Time) (string, error) {
	accessor, err := uuid.GenerateUUID()
	if err != nil {
		return "", err
	}
	secret, err := uuid.GenerateUUID()
	if err != nil {
		return "", err
	}
	t.AccessorID, t.SecretID, t.SecretHash, t.CreateTime = accessor, "", structs.HashACLSecret(secret), now
	switch {
	case t.ExpirationTTL > 0:
		exp := now.Add(t.ExpirationTTL)
		t.ExpirationTime = &exp
	case t.ExpirationTime != nil && !t.ExpirationTime.IsZero():
		in := t.ExpirationTime.Sub(now)
		if in < structs.MinACLTokenTTL || in > structs.MaxACLTokenTTL {
			return "", structs.ErrInvalid("ACL token: expiration time must be between %s and %s from now",
				structs.MinACLTokenTTL, structs.MaxACLTokenTTL)
		}
		exp := t.ExpirationTime.UTC()
		t.ExpirationTime = &exp
	default:
		t.ExpirationTime = nil
	}
	return secret, nil
}

// prepareUpdate checks an update against the stored token: its secret and
// expiry cannot change.
func prepareUpdate(snap *state.StateSnapshot, t *structs.ACLToken) error {
	existing, err := snap.ACLTokenByAccessorID(nil, t.AccessorID)
	if err != nil {
		return err
	}
	if existing == nil {
		return structs.ErrNotFound("ACL token %q not found", t.AccessorID)
	}
	if t.SecretID != "" && !structs.ACLSecretMatches(t.SecretID, existing.SecretHash) {
		return structs.ErrInvalid("ACL token %q: the secret of a token cannot change", t.AccessorID)
	}
	if t.ExpirationTTL != 0 && t.ExpirationTTL != existing.ExpirationTTL {
		return structs.ErrInvalid("ACL token %q: cannot update expiration TTL", t.AccessorID)
	}
	if t.ExpirationTime != nil && (existing.ExpirationTime == nil || !t.ExpirationTime.Equal(*existing.ExpirationTime)) {
		return structs.ErrInvalid("ACL token %q: cannot update expiration time", t.AccessorID)
	}
	t.SecretID = ""
	t.CreateTime, t.ExpirationTTL, t.ExpirationTime = existing.CreateTime, existing.ExpirationTTL, existing.Copy().ExpirationTime
	return nil
}

// DeleteTokens deletes tokens by accessor.
func (e *ACL) DeleteTokens(args *structs.ACLTokenDeleteRequest, reply *structs.GenericResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.DeleteTokens", args, args, reply); done {
		return err
	}
	if err := checkCount("accessor ids", len(args.AccessorIDs)); err != nil {
		return err
	}
	_, index, err := e.srv.raftApply(structs.ACLTokenDeleteRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}

// ListTokens lists token stubs, by accessor prefix.
func (e *ACL) ListTokens(args *structs.ACLTokenListRequest, reply *structs.ACLTokenListResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.ListTokens", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		iter, err := st.ACLTokens(ws, args.Prefix)
		if err != nil {
			return 0, err
		}
		reply.Tokens = []*structs.ACLTokenListStub{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			reply.Tokens = append(reply.Tokens, raw.(*structs.ACLToken).Stub())
		}
		return st.Index(state.TableACLTokens)
	})
}

// GetToken returns one token without its secret; Token is nil when unknown.
func (e *ACL) GetToken(args *structs.ACLTokenSpecificRequest, reply *structs.SingleACLTokenResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.GetToken", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		t, err := st.ACLTokenByAccessorID(ws, args.AccessorID)
		if err != nil {
			return 0, err
		}
		if t == nil {
			reply.Token = nil
			return st.Index(state.TableACLTokens)
		}
		reply.Token = t.Public()
		return t.ModifyIndex, nil
	})
}

// ResolveToken returns the caller's own token (GET /v1/acl/token/self),
// without its secret: the anonymous token for a request without one.
func (e *ACL) ResolveToken(args *structs.GenericRequest, reply *structs.SingleACLTokenResponse) error {
	if !e.srv.config.ACLEnabled {
		return errACLDisabled
	}
	if done, err := e.srv.forward("ACL.ResolveToken", args, args, reply); done {
		return err
	}
	id, err := e.srv.aclIdentity(args)
	if err != nil {
		return err
	}
	if id.token == nil {
		// A client node's secret is not an ACL token.
		return structs.ErrTokenNotFound
	}
	reply.Token = id.token.Public()
	reply.Index = max(id.token.ModifyIndex, 1)
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}
