package server

import (
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-uuid"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// introduce decides whether a node that is not registered yet may join,
// and records how it was let in. It runs on the leader, after forwarding,
// so a token is checked against the latest state; the FSM checks the
// accepted token again when it applies the registration. It returns the
// accessor of the Raft-stored token used ("" for a token from the
// configuration, or none) and the node's IntroducedBy.
func (s *Server) introduce(nodeID, secret string, now time.Time) (accessor, by string, err error) {
	token := false
	switch {
	case secret == "":
	case s.configIntroToken(secret):
		token = true
	default:
		t, err := s.State().NodeIntroTokenBySecret(secret)
		if err != nil {
			return "", "", err
		}
		if t == nil {
			return "", "", structs.NewError(structs.ErrCodePermissionDenied,
				"node %q: unknown node introduction token", nodeID)
		}
		if err := t.Usable(nodeID, now); err != nil {
			return "", "", structs.Wrap(err, "node %q", nodeID)
		}
		accessor, token = t.AccessorID, true
	}
	if !token && s.config.NodeIntroRequired {
		return "", "", structs.NewError(structs.ErrCodePermissionDenied,
			"node %q: this cluster requires a node introduction token for a new node (client { intro_token = ... } or -intro-token)", nodeID)
	}
	tls := s.tls.RPCEnabled()
	switch {
	case tls && token:
		by = structs.NodeIntroducedByBoth
	case tls:
		by = structs.NodeIntroducedByTLS
	case token:
		by = structs.NodeIntroducedByToken
	}
	return accessor, by, nil
}

// configIntroToken reports whether secret is one of the configuration's
// introduction tokens, comparing each in constant time.
func (s *Server) configIntroToken(secret string) bool {
	found := false
	for _, t := range s.config.NodeIntroTokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(secret)) == 1 {
			found = true
		}
	}
	return found
}

// secured reports whether the cluster tells nodes apart: with neither TLS
// nor required introduction, anything may register, and controller calls
// go to any ready node, as they always did.
func (s *Server) secured() bool {
	return s.tls.RPCEnabled() || s.config.NodeIntroRequired
}

// securityStatus describes how this server is protected.
func (s *Server) securityStatus() *structs.SecurityStatus {
	st := &structs.SecurityStatus{
		Region:            s.config.Region,
		RPCTLS:            s.tls.RPCEnabled(),
		HTTPTLS:           s.tls.HTTPEnabled(),
		NodeIntroRequired: s.config.NodeIntroRequired,
		ACLEnabled:        s.config.ACLEnabled,
	}
	st.Open = !st.RPCTLS && !st.NodeIntroRequired
	if !st.RPCTLS {
		st.Warnings = append(st.Warnings, fmt.Sprintf(
			"RPC without TLS: any process that reaches %s can join as a server, write to the Raft log, call every server-to-server endpoint and fetch the keyring's key-encryption key (set tls { rpc = true } with certificates from `volplane tls`)",
			s.rpcAddr))
	}
	if st.Open {
		st.Warnings = append(st.Warnings,
			"open node registration: any process that reaches the RPC port can register a node, receive controller and node calls with volume secrets, and claim volumes (set tls { rpc = true } or server { node_intro_required = true })")
	}
	if !st.ACLEnabled {
		st.Warnings = append(st.Warnings,
			"ACLs disabled: anyone who reaches the HTTP API can register, deregister and detach volumes, stop jobs and remove Raft peers (set acl { enabled = true } and bootstrap with `volplane acl bootstrap`)")
	}
	if !st.HTTPTLS {
		st.Warnings = append(st.Warnings, "HTTP API without TLS: requests and tokens travel in clear (set tls { http = true })")
	}
	return st
}

// Security answers how this server is protected; always answered locally.
func (e *Operator) Security(args *structs.GenericRequest, reply *structs.SecurityStatus) error {
	if err := e.srv.authorize("Operator.Security", args, args); err != nil {
		return err
	}
	*reply = *e.srv.securityStatus()
	return nil
}

// NodeIntroCreate creates a node introduction token and returns its
// secret, which is shown this once: only its hash is stored.
func (e *Operator) NodeIntroCreate(args *structs.NodeIntroCreateRequest, reply *structs.NodeIntroCreateResponse) error {
	if done, err := e.srv.forward("Operator.NodeIntroCreate", args, args, reply); done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	accessor, err := uuid.GenerateUUID()
	if err != nil {
		return err
	}
	secret, err := uuid.GenerateUUID()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	t := &structs.NodeIntroToken{AccessorID: accessor, Name: args.Name, SecretHash: structs.HashIntroSecret(secret),
		SingleUse: args.SingleUse, CreateTime: now}
	if args.TTL > 0 {
		t.ExpirationTime = now.Add(args.TTL)
	}
	args.Token = t
	_, index, err := e.srv.raftApply(structs.NodeIntroUpsertRequestType, args)
	if err != nil {
		return err
	}
	e.srv.logger.Info("node introduction token created", "accessor_id", accessor, "name", args.Name,
		"single_use", args.SingleUse, "ttl", args.TTL)
	reply.Token, reply.SecretID, reply.Index = t.Stub(), secret, index
	return nil
}

// NodeIntroList lists the tokens, without their hashes.
func (e *Operator) NodeIntroList(args *structs.NodeIntroListRequest, reply *structs.NodeIntroListResponse) error {
	if done, err := e.srv.forward("Operator.NodeIntroList", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		iter, err := st.NodeIntroTokens(ws)
		if err != nil {
			return 0, err
		}
		reply.Tokens = []*structs.NodeIntroToken{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			reply.Tokens = append(reply.Tokens, raw.(*structs.NodeIntroToken).Stub())
		}
		return st.Index(state.TableNodeIntro)
	})
}

// NodeIntroDelete revokes tokens; nodes they introduced stay registered.
func (e *Operator) NodeIntroDelete(args *structs.NodeIntroDeleteRequest, reply *structs.GenericResponse) error {
	if done, err := e.srv.forward("Operator.NodeIntroDelete", args, args, reply); done {
		return err
	}
	if len(args.AccessorIDs) == 0 {
		return structs.ErrInvalid("node introduction token revoke: no accessor ids given")
	}
	for _, id := range args.AccessorIDs {
		if err := structs.ValidateID("accessor id", id); err != nil {
			return structs.ErrInvalid("node introduction token revoke: %v", err)
		}
	}
	_, index, err := e.srv.raftApply(structs.NodeIntroDeleteRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}
