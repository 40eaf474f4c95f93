package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/volplane/volplane/structs"
)

// fakeProvider is the storage behind agentEndpoint's lifecycle calls: the
// snapshots it made, in order, the external IDs of the volumes it holds
// (every volume a controller validated, and extra ones), and whether its
// expansions ask for node expansion. Guarded by the endpoint's mu.
type fakeProvider struct {
	snapshots []*structs.CSISnapshot
	volumes   []string
	nodeToo   bool
}

func (a *agentEndpoint) setNodeExpansion(required bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.provider.nodeToo = required
}

func (a *agentEndpoint) addProviderVolume(ext string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.provider.volumes, ext) {
		a.provider.volumes = append(a.provider.volumes, ext)
		slices.Sort(a.provider.volumes)
	}
}

func (a *agentEndpoint) ControllerCreateSnapshot(args *structs.ClientCSIControllerCreateSnapshotRequest, reply *structs.ClientCSIControllerCreateSnapshotResponse) error {
	if err := a.record("snapshot:" + args.VolumeID + ":" + args.Name + ":" + args.Secrets["token"]); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &structs.CSISnapshot{ID: "snap-" + args.Name, ExternalSourceVolumeID: args.VolumeID, SizeBytes: 1 << 20,
		CreateTime: 1700000000, IsReady: true}
	a.provider.snapshots = append(a.provider.snapshots, s)
	c := *s
	reply.Snapshot = &c
	return nil
}

func (a *agentEndpoint) ControllerDeleteSnapshot(args *structs.ClientCSIControllerDeleteSnapshotRequest, reply *structs.ClientCSIEmptyResponse) error {
	if err := a.record("delete-snapshot:" + args.SnapshotID + ":" + args.Secrets["token"]); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.provider.snapshots = slices.DeleteFunc(a.provider.snapshots, func(s *structs.CSISnapshot) bool { return s.ID == args.SnapshotID })
	return nil
}

func (a *agentEndpoint) ControllerListSnapshots(args *structs.ClientCSIControllerListSnapshotsRequest, reply *structs.ClientCSIControllerListSnapshotsResponse) error {
	if err := a.record("list-snapshots:" + args.Secrets["token"]); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	page, next, err := providerPage(a.provider.snapshots, args.StartingToken, args.MaxEntries)
	if err != nil {
		return err
	}
	for _, s := range page {
		c := *s
		reply.Entries = append(reply.Entries, &c)
	}
	reply.NextToken = next
	return nil
}

func (a *agentEndpoint) ControllerListVolumes(args *structs.ClientCSIControllerListVolumesRequest, reply *structs.ClientCSIControllerListVolumesResponse) error {
	if err := a.record("list-volumes"); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	page, next, err := providerPage(a.provider.volumes, args.StartingToken, args.MaxEntries)
	if err != nil {
		return err
	}
	for _, ext := range page {
		reply.Entries = append(reply.Entries, &structs.CSIVolumeExternalStub{ExternalID: ext, CapacityBytes: 1 << 30})
	}
	reply.NextToken = next
	return nil
}

func (a *agentEndpoint) ControllerExpandVolume(args *structs.ClientCSIControllerExpandVolumeRequest, reply *structs.ClientCSIControllerExpandVolumeResponse) error {
	what := fmt.Sprintf("expand:%s:%d", args.VolumeID, args.CapacityMin)
	if args.Capability != nil {
		what += ":" + string(args.Capability.AccessMode)
	}
	if err := a.record(what); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	reply.CapacityBytes, reply.NodeExpansionRequired = args.CapacityMin, a.provider.nodeToo
	return nil
}

func (a *agentEndpoint) NodeExpandVolume(args *structs.ClientCSINodeExpandVolumeRequest, reply *structs.ClientCSINodeExpandVolumeResponse) error {
	if err := a.record(fmt.Sprintf("node-expand:%s:%s:%d", args.ExternalID, args.AllocID, args.CapacityMin)); err != nil {
		return err
	}
	reply.CapacityBytes = args.CapacityMin
	return nil
}

// providerPage pages as a plugin does: the token is the position of the
// page's first entry, "pos:N"; anything else is refused as the client
// agent refuses a token its plugin did not hand out.
func providerPage[T any](all []T, token string, maxEntries int32) ([]T, string, error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(token, "pos:"))
		if !strings.HasPrefix(token, "pos:") || err != nil || n < 0 || n > len(all) {
			return nil, "", structs.ErrInvalid("invalid next_token %q: the plugin did not hand it out", token)
		}
		start = n
	}
	page := all[start:]
	if maxEntries > 0 && len(page) > int(maxEntries) {
		return page[:maxEntries], fmt.Sprintf("pos:%d", start+int(maxEntries)), nil
	}
	return page, "", nil
}
