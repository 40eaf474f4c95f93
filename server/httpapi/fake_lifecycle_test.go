package httpapi

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volplane/volplane/structs"
)

// lifecycleRPC serves the fake backend's snapshot, external listing and GC
// calls; the caller holds f.mu. Snapshots are kept in creation order; a
// page token is the position of the page's first entry, "pos:N".
func (f *fakeBackend) lifecycleRPC(method string, args, reply any) error {
	switch method {
	case "CSIVolume.CreateSnapshot":
		a, r := args.(*structs.CSISnapshotCreateRequest), reply.(*structs.CSISnapshotCreateResponse)
		for _, in := range a.Snapshots {
			v := f.volumes[volKey(a.RequestNamespace(), in.SourceVolumeID)]
			if v == nil {
				return structs.ErrNotFound("volume %q not found", in.SourceVolumeID)
			}
			s := &structs.CSISnapshot{ID: fmt.Sprintf("snap-%d", len(f.snapshots)+1), ExternalSourceVolumeID: v.RemoteID(),
				SourceVolumeID: v.ID, PluginID: v.PluginID, SizeBytes: 1024, CreateTime: time.Now().Unix(), IsReady: true,
				// Left in on purpose: the handler must drop what only a
				// creation takes.
				Secrets: in.Secrets, Name: in.Name}
			f.snapshots = append(f.snapshots, s)
			r.Snapshots = append(r.Snapshots, s)
		}
		r.QueryMeta = f.readMeta()
	case "CSIVolume.DeleteSnapshot":
		a := args.(*structs.CSISnapshotDeleteRequest)
		for _, in := range a.Snapshots {
			f.snapshots = slices.DeleteFunc(f.snapshots, func(s *structs.CSISnapshot) bool {
				return s.ID == in.ID && s.PluginID == in.PluginID
			})
		}
	case "CSIVolume.ListSnapshots":
		a, r := args.(*structs.CSISnapshotListRequest), reply.(*structs.CSISnapshotListResponse)
		if f.plugins[a.PluginID] == nil {
			return structs.ErrNotFound("no CSI plugin named %q could be found", a.PluginID)
		}
		var all []*structs.CSISnapshot
		for _, s := range f.snapshots {
			if s.PluginID == a.PluginID {
				all = append(all, s)
			}
		}
		page, next, err := fakePage(all, a.NextToken, a.PerPage)
		if err != nil {
			return err
		}
		r.Snapshots, r.QueryMeta = page, f.readMeta()
		r.NextToken = next
	case "CSIVolume.ListExternal":
		a, r := args.(*structs.CSIVolumeExternalListRequest), reply.(*structs.CSIVolumeExternalListResponse)
		if f.plugins[a.PluginID] == nil {
			return structs.ErrNotFound("no CSI plugin named %q could be found", a.PluginID)
		}
		var all []*structs.CSIVolumeExternalStub
		for _, k := range slices.Sorted(maps.Keys(f.volumes)) {
			if v := f.volumes[k]; v.PluginID == a.PluginID {
				all = append(all, &structs.CSIVolumeExternalStub{ExternalID: v.RemoteID(), CapacityBytes: v.Capacity,
					VolumeID: v.ID, Namespace: v.Namespace})
			}
		}
		page, next, err := fakePage(all, a.NextToken, a.PerPage)
		if err != nil {
			return err
		}
		r.Volumes, r.QueryMeta = page, f.readMeta()
		r.NextToken = next
	case "System.GarbageCollect":
		f.index++
		reply.(*structs.GCResponse).Index = f.index
	default:
		return fmt.Errorf("fake backend: unknown method %q", method)
	}
	return nil
}

// fakePage returns the page of all that token ("pos:N") starts.
func fakePage[T any](all []T, token string, perPage int32) ([]T, string, error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(token, "pos:"))
		if !strings.HasPrefix(token, "pos:") || err != nil || n < 0 || n > len(all) {
			return nil, "", structs.ErrInvalid("invalid next_token %q", token)
		}
		start = n
	}
	page := all[start:]
	if perPage > 0 && len(page) > int(perPage) {
		return page[:perPage], fmt.Sprintf("pos:%d", start+int(perPage)), nil
	}
	return page, "", nil
}
