package server

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Snapshots and the storage provider's list of volumes are the plugin's:
// these endpoints ask a healthy controller of the plugin and pass the
// answer on, writing nothing to the state. Secrets in a request are used
// for its plugin calls only: never stored, logged or answered.

// maxSnapshotsPerRequest bounds the snapshots one create or delete names.
const maxSnapshotsPerRequest = 100

// CreateSnapshot snapshots registered volumes through their plugin's
// controller, one at a time, each holding its volume's lock. When some
// fail, the others are still made and the error names each failure and
// what was made.
func (e *CSIVolume) CreateSnapshot(args *structs.CSISnapshotCreateRequest, reply *structs.CSISnapshotCreateResponse) error {
	if done, err := e.srv.forward("CSIVolume.CreateSnapshot", args, args, reply); done {
		return err
	}
	if err := checkSnapshotCount(args.Snapshots); err != nil {
		return err
	}
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	ns := args.RequestNamespace()
	var b batchResult
	for i, in := range args.Snapshots {
		out, err := e.createSnapshot(snap, ns, in)
		if err != nil {
			b.fail(structs.Wrap(err, "snapshot %d", i+1))
			continue
		}
		reply.Snapshots = append(reply.Snapshots, out)
		b.done(fmt.Sprintf("%s of volume %s", out.ID, out.SourceVolumeID))
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return b.err("snapshots created")
}

func (e *CSIVolume) createSnapshot(snap *state.StateSnapshot, ns string, in *structs.CSISnapshot) (*structs.CSISnapshot, error) {
	switch {
	case in.SourceVolumeID == "":
		return nil, structs.ErrInvalid("missing source volume ID")
	case len(in.Name) > structs.MaxNameLength:
		return nil, structs.ErrInvalid("snapshot name is longer than %d characters", structs.MaxNameLength)
	}
	vol, err := snap.CSIVolumeByID(nil, ns, in.SourceVolumeID)
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, structs.ErrNotFound("volume %q not found", in.SourceVolumeID)
	}
	if in.PluginID != "" && in.PluginID != vol.PluginID {
		return nil, structs.ErrInvalid("volume %q belongs to plugin %q, not %q", vol.ID, vol.PluginID, in.PluginID)
	}
	plugin, err := pluginFor(snap, vol.PluginID)
	if err != nil {
		return nil, err
	}
	if err := plugin.RequireController(structs.CSIControllerCreateDeleteSnapshot, "create snapshots"); err != nil {
		return nil, err
	}
	name := in.Name
	if name == "" {
		// The name is the plugin's idempotency key: a repeat within the
		// same second is the same snapshot.
		name = fmt.Sprintf("%s-%d", vol.ID, time.Now().Unix())
	}

	unlock, err := e.srv.lockVolume(vol.Namespace, vol.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	opened, err := e.srv.openVolume(vol)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.ClientRPCTimeout)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerCreateSnapshot(ctx, &structs.ClientCSIControllerCreateSnapshotRequest{
		PluginID:   vol.PluginID,
		VolumeID:   vol.RemoteID(),
		Name:       name,
		Secrets:    overlaySecrets(opened.Secrets, in.Secrets),
		Parameters: in.Parameters,
	})
	if err != nil {
		return nil, structs.Wrap(err, "volume %q", vol.ID)
	}
	out := resp.Snapshot
	out.SourceVolumeID, out.PluginID = vol.ID, vol.PluginID
	out.Name, out.Secrets, out.Parameters = "", nil, nil
	e.logger.Info("volume snapshot created", "volume_id", vol.ID, "plugin_id", vol.PluginID, "snapshot_id", out.ID)
	return out, nil
}

// DeleteSnapshot deletes snapshots through their plugin's controller. When
// some fail, the others are still deleted and the error names each
// failure.
func (e *CSIVolume) DeleteSnapshot(args *structs.CSISnapshotDeleteRequest, reply *structs.CSISnapshotDeleteResponse) error {
	if done, err := e.srv.forward("CSIVolume.DeleteSnapshot", args, args, reply); done {
		return err
	}
	if err := checkSnapshotCount(args.Snapshots); err != nil {
		return err
	}
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	var b batchResult
	for i, in := range args.Snapshots {
		if err := e.deleteSnapshot(snap, in); err != nil {
			b.fail(structs.Wrap(err, "snapshot %d", i+1))
			continue
		}
		b.done(in.ID)
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return b.err("snapshots deleted")
}

func (e *CSIVolume) deleteSnapshot(snap *state.StateSnapshot, in *structs.CSISnapshot) error {
	if in.ID == "" || in.PluginID == "" {
		return structs.ErrInvalid("a snapshot to delete needs its plugin ID and snapshot ID")
	}
	plugin, err := pluginFor(snap, in.PluginID)
	if err != nil {
		return err
	}
	if err := plugin.RequireController(structs.CSIControllerCreateDeleteSnapshot, "delete snapshots"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.ClientRPCTimeout)
	defer cancel()
	err = e.srv.clientRPC.ControllerDeleteSnapshot(ctx, &structs.ClientCSIControllerDeleteSnapshotRequest{
		PluginID: in.PluginID, SnapshotID: in.ID, Secrets: in.Secrets,
	})
	if err != nil {
		return structs.Wrap(err, "deleting snapshot %q of plugin %q", in.ID, in.PluginID)
	}
	e.logger.Info("volume snapshot deleted", "plugin_id", in.PluginID, "snapshot_id", in.ID)
	return nil
}

// ListSnapshots lists one page of a plugin's snapshots, as its controller
// pages them (per_page and next_token are passed to the plugin), each with
// the ID of the registered volume it was taken of, when there is one.
func (e *CSIVolume) ListSnapshots(args *structs.CSISnapshotListRequest, reply *structs.CSISnapshotListResponse) error {
	if done, err := e.srv.forward("CSIVolume.ListSnapshots", args, args, reply); done {
		return err
	}
	page, err := listPage(e, args.PluginID, args.RequestNamespace(), &args.QueryOptions, structs.CSIControllerListSnapshots, "list snapshots",
		func(ctx context.Context, pluginID string) ([]*structs.CSISnapshot, string, error) {
			resp, err := e.srv.clientRPC.ControllerListSnapshots(ctx, &structs.ClientCSIControllerListSnapshotsRequest{
				PluginID: pluginID, MaxEntries: args.PerPage, StartingToken: args.NextToken, Secrets: args.Secrets,
			})
			if err != nil {
				return nil, "", err
			}
			return resp.Entries, resp.NextToken, nil
		},
		func(s *structs.CSISnapshot, pluginID string, registered map[string]*structs.CSIVolume) {
			if v := registered[s.ExternalSourceVolumeID]; v != nil {
				s.SourceVolumeID = v.ID
			}
			s.PluginID = pluginID
		})
	if err != nil {
		return err
	}
	reply.Snapshots, reply.QueryMeta = page.entries, page.meta
	return nil
}

// ListExternal lists one page of the volumes a plugin's storage provider
// holds, as its controller pages them (ListVolumes), each with the
// volplane volume registered with its external ID, when there is one.
func (e *CSIVolume) ListExternal(args *structs.CSIVolumeExternalListRequest, reply *structs.CSIVolumeExternalListResponse) error {
	if done, err := e.srv.forward("CSIVolume.ListExternal", args, args, reply); done {
		return err
	}
	page, err := listPage(e, args.PluginID, args.RequestNamespace(), &args.QueryOptions, structs.CSIControllerListVolumes, "list its volumes",
		func(ctx context.Context, pluginID string) ([]*structs.CSIVolumeExternalStub, string, error) {
			resp, err := e.srv.clientRPC.ControllerListVolumes(ctx, &structs.ClientCSIControllerListVolumesRequest{
				PluginID: pluginID, MaxEntries: args.PerPage, StartingToken: args.NextToken,
			})
			if err != nil {
				return nil, "", err
			}
			return resp.Entries, resp.NextToken, nil
		},
		func(v *structs.CSIVolumeExternalStub, _ string, registered map[string]*structs.CSIVolume) {
			if r := registered[v.ExternalID]; r != nil {
				v.VolumeID, v.Namespace = r.ID, r.Namespace
			}
		})
	if err != nil {
		return err
	}
	reply.Volumes, reply.QueryMeta = page.entries, page.meta
	return nil
}

// listed is one page of a listing and its query metadata.
type listed[T any] struct {
	entries []T
	meta    structs.QueryMeta
}

// listPage runs a listing: it checks the arguments and the plugin's
// capability, asks a controller for the page (call), keeps at most
// per_page entries, and has mark name the registered volume of each (by
// external ID, in the namespace, or all of them with "*").
func listPage[T any](e *CSIVolume, pluginID, ns string, q *structs.QueryOptions, need structs.CSIControllerCapability, what string,
	call func(ctx context.Context, pluginID string) ([]T, string, error),
	mark func(entry T, pluginID string, registered map[string]*structs.CSIVolume)) (*listed[T], error) {
	plugin, st, err := e.listingPlugin(pluginID, q.PerPage, need, what)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.ClientRPCTimeout)
	defer cancel()
	entries, next, err := call(ctx, plugin.ID)
	if err != nil {
		return nil, structs.Wrap(err, "plugin %q: %s", plugin.ID, what)
	}
	registered, index, err := registeredByRemoteID(st, ns, plugin.ID)
	if err != nil {
		return nil, err
	}
	out := &listed[T]{entries: make([]T, 0, len(entries))}
	for _, entry := range truncate(entries, q.PerPage) {
		mark(entry, plugin.ID, registered)
		out.entries = append(out.entries, entry)
	}
	out.meta.Index, out.meta.NextToken = index, next
	e.srv.setQueryMeta(&out.meta)
	return out, nil
}

// listingPlugin checks a listing's arguments and returns its plugin, which
// must have a controller with the capability, and the state it was read
// from.
func (e *CSIVolume) listingPlugin(pluginID string, perPage int32, need structs.CSIControllerCapability, what string) (*structs.CSIPlugin, *state.StateStore, error) {
	if pluginID == "" {
		return nil, nil, structs.ErrInvalid("missing plugin_id: listings are per plugin")
	}
	if perPage < 0 || perPage > structs.MaxPerPage {
		return nil, nil, structs.ErrInvalid("per_page must be from 0 to %d, not %d", structs.MaxPerPage, perPage)
	}
	st := e.srv.State()
	plugin, err := pluginFor(st, pluginID)
	if err != nil {
		return nil, nil, err
	}
	if err := plugin.RequireController(need, what); err != nil {
		return nil, nil, err
	}
	return plugin, st, nil
}

// pluginReader is what pluginFor reads from: a store or a snapshot.
type pluginReader interface {
	CSIPluginByID(ws memdb.WatchSet, id string) (*structs.CSIPlugin, error)
}

// pluginFor returns the plugin, or a not-found error naming it.
func pluginFor(st pluginReader, id string) (*structs.CSIPlugin, error) {
	p, err := st.CSIPluginByID(nil, id)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, structs.ErrNotFound("no CSI plugin named %q could be found", id)
	}
	return p, nil
}

// registeredByRemoteID maps the external IDs of a plugin's volumes in a
// namespace (or all) to the volumes, and returns the volumes table's index.
func registeredByRemoteID(st *state.StateStore, ns, pluginID string) (map[string]*structs.CSIVolume, uint64, error) {
	index, err := st.Index(state.TableCSIVolumes)
	if err != nil {
		return nil, 0, err
	}
	iter, err := st.CSIVolumesByPluginID(nil, ns, "", pluginID)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]*structs.CSIVolume{}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		v := raw.(*structs.CSIVolume)
		out[v.RemoteID()] = v
	}
	return out, index, nil
}

// truncate keeps at most perPage entries (0: all): the spec lets a plugin
// return fewer than asked, never more, but one that does is held to it.
func truncate[T any](s []T, perPage int32) []T {
	if perPage > 0 && len(s) > int(perPage) {
		return s[:perPage]
	}
	return s
}

// overlaySecrets returns base with extra's keys written over it, in a new
// map: a request's secrets win over the volume's for its call.
func overlaySecrets(base, extra structs.CSISecrets) structs.CSISecrets {
	out := maps.Clone(base)
	if out == nil {
		out = structs.CSISecrets{}
	}
	maps.Copy(out, extra)
	return out
}

func checkSnapshotCount(snaps []*structs.CSISnapshot) error {
	switch {
	case len(snaps) == 0:
		return structs.ErrInvalid("missing snapshots")
	case len(snaps) > maxSnapshotsPerRequest:
		return structs.ErrInvalid("%d snapshots in one request; at most %d", len(snaps), maxSnapshotsPerRequest)
	}
	for i, s := range snaps {
		if s == nil {
			return structs.ErrInvalid("snapshot %d of the request is empty", i+1)
		}
	}
	return nil
}

// batchResult collects what a call over several items did: an item that
// fails does not stop the others, and the error says both what failed and
// what was done.
type batchResult struct {
	made     []string
	failures []string
	code     structs.ErrorCode
}

func (b *batchResult) done(what string) { b.made = append(b.made, what) }

func (b *batchResult) fail(err error) {
	b.failures = append(b.failures, structs.MessageOf(err))
	if b.code == "" {
		b.code = structs.CodeOf(err)
	}
}

// err is nil when nothing failed; otherwise its code is the first
// failure's and its message lists every failure, after what was done
// (doneWhat names it) when something was.
func (b *batchResult) err(doneWhat string) error {
	if len(b.failures) == 0 {
		return nil
	}
	msg := strings.Join(b.failures, "; ")
	if len(b.made) > 0 {
		msg = fmt.Sprintf("%d %s (%s); failed: %s", len(b.made), doneWhat, strings.Join(b.made, ", "), msg)
	}
	return &structs.Error{Code: b.code, Message: msg}
}
