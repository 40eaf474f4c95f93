package server

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Namespace is the endpoint for namespaces. They exist with or without
// ACLs; with ACLs, only management tokens write them, and a token sees the
// namespaces it may do anything in.
type Namespace struct {
	srv *Server
}

// UpsertNamespaces creates or updates namespaces.
func (e *Namespace) UpsertNamespaces(args *structs.NamespaceUpsertRequest, reply *structs.GenericResponse) error {
	if done, err := e.srv.forward("Namespace.UpsertNamespaces", args, args, reply); done {
		return err
	}
	if err := checkCount("namespaces", len(args.Namespaces)); err != nil {
		return err
	}
	out := make([]*structs.Namespace, len(args.Namespaces))
	for i, n := range args.Namespaces {
		if n == nil {
			return structs.ErrInvalid("namespace %d of the request is empty", i+1)
		}
		if err := n.Validate(); err != nil {
			return err
		}
		c := n.Copy()
		c.CreateIndex, c.ModifyIndex = 0, 0
		out[i] = c
	}
	args.Namespaces = out
	_, index, err := e.srv.raftApply(structs.NamespaceUpsertRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}

// DeleteNamespaces deletes namespaces that hold no volumes and no jobs.
func (e *Namespace) DeleteNamespaces(args *structs.NamespaceDeleteRequest, reply *structs.GenericResponse) error {
	if done, err := e.srv.forward("Namespace.DeleteNamespaces", args, args, reply); done {
		return err
	}
	if err := checkCount("namespace names", len(args.Namespaces)); err != nil {
		return err
	}
	_, index, err := e.srv.raftApply(structs.NamespaceDeleteRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}

// ListNamespaces lists the namespaces, by name prefix, that the token may
// do anything in.
func (e *Namespace) ListNamespaces(args *structs.NamespaceListRequest, reply *structs.NamespaceListResponse) error {
	if done, err := e.srv.forward("Namespace.ListNamespaces", args, args, reply); done {
		return err
	}
	id, err := e.srv.aclIdentity(args)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		all, err := st.Namespaces(ws, args.Prefix)
		if err != nil {
			return 0, err
		}
		reply.Namespaces = []*structs.Namespace{}
		for _, n := range all {
			if id == nil || id.acl.AllowNamespace(n.Name) {
				reply.Namespaces = append(reply.Namespaces, n)
			}
		}
		return st.Index(state.TableNamespaces)
	})
}

// GetNamespace returns one namespace; Namespace is nil when unknown.
func (e *Namespace) GetNamespace(args *structs.NamespaceSpecificRequest, reply *structs.SingleNamespaceResponse) error {
	if done, err := e.srv.forward("Namespace.GetNamespace", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		n, err := st.NamespaceByName(ws, args.Name)
		if err != nil {
			return 0, err
		}
		reply.Namespace = n
		if n == nil || n.ModifyIndex == 0 {
			return st.Index(state.TableNamespaces)
		}
		return n.ModifyIndex, nil
	})
}
