package server

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// CSIPlugin is the endpoint for reading plugins. Plugins are derived from
// node fingerprints; there is nothing to write.
type CSIPlugin struct {
	srv *Server
}

// List returns plugin stubs, optionally by ID prefix.
func (e *CSIPlugin) List(args *structs.CSIPluginListRequest, reply *structs.CSIPluginListResponse) error {
	if done, err := e.srv.forward("CSIPlugin.List", args, args, reply); done {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		iter, err := st.CSIPluginsByIDPrefix(ws, args.Prefix)
		if err != nil {
			return 0, err
		}
		reply.Plugins = []*structs.CSIPluginListStub{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			reply.Plugins = append(reply.Plugins, raw.(*structs.CSIPlugin).Stub())
		}
		return st.Index(state.TableCSIPlugins)
	})
}

// Get returns one plugin with its instances; Plugin is nil when unknown.
func (e *CSIPlugin) Get(args *structs.CSIPluginGetRequest, reply *structs.CSIPluginGetResponse) error {
	if done, err := e.srv.forward("CSIPlugin.Get", args, args, reply); done {
		return err
	}
	if args.ID == "" {
		return structs.ErrInvalid("missing plugin ID")
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		p, err := st.CSIPluginByID(ws, args.ID)
		if err != nil {
			return 0, err
		}
		reply.Plugin = p
		if p == nil {
			return st.IndexWatch(ws, state.TableCSIPlugins)
		}
		return p.ModifyIndex, nil
	})
}
