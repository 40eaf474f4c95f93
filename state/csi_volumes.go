package state

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// AllNamespaces, given as a namespace to the volume reads, means every
// namespace.
const AllNamespaces = "*"

func csiVolumesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableCSIVolumes,
		Indexes: map[string]*memdb.IndexSchema{
			// Volume IDs are unique per namespace. The compound key sorts by
			// namespace, then ID, which is the order of paginated lists.
			indexID: {
				Name:   indexID,
				Unique: true,
				Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Namespace"},
					&memdb.StringFieldIndex{Field: "ID"},
				}},
			},
			// Non-unique: memdb appends the primary key, so the volumes of one
			// plugin also come out by namespace, then ID.
			indexPluginID: {
				Name:    indexPluginID,
				Indexer: &memdb.StringFieldIndex{Field: "PluginID"},
			},
			indexPastClaims: pastClaimsIndex(),
			indexClaimAlloc: claimAllocIndex(),
		},
	}
}

// UpsertCSIVolume registers volumes or updates them, all or nothing. A new
// volume must pass structs.CSIVolume.Validate; an update must pass
// structs.CSIVolume.Merge against the volume as stored, the same rule the
// leader checked against its snapshot, so an update that a claim written
// in between made wrong (a capability or mount options in use) is refused
// here. Claims and the current access and attachment modes are the claim
// path's to change: an update keeps the stored ones whatever the request
// says, and a new volume starts with none.
func (s *StateStore) UpsertCSIVolume(index uint64, vols []*structs.CSIVolume) error {
	txn := s.writeTxn()
	defer txn.Abort()
	for _, v := range vols {
		if _, err := upsertCSIVolumeTxn(txn, index, v, false); err != nil {
			return err
		}
	}
	return commit(txn, index)
}

// upsertCSIVolumeTxn writes one volume of a registration and says whether
// it changed the stored row. With owned set, vol is the caller's to give
// away (an entry the FSM decoded): a new volume is then stored as it is,
// without a copy, and the caller must not touch it again.
func upsertCSIVolumeTxn(txn *memdb.Txn, index uint64, vol *structs.CSIVolume, owned bool) (bool, error) {
	switch {
	case vol == nil:
		return false, structs.ErrInvalid("volume register: empty volume")
	case vol.ID == "":
		return false, structs.ErrInvalid("volume register: missing volume id")
	case vol.Namespace == "":
		return false, structs.ErrInvalid("volume %q: missing namespace", vol.ID)
	case vol.PluginID == "":
		return false, structs.ErrInvalid("volume %q: missing plugin id", vol.ID)
	}
	plugin, err := pluginByIDTxn(txn, nil, vol.PluginID)
	if err != nil {
		return false, err
	}
	if plugin == nil {
		return false, structs.ErrNotFound("volume %q: no CSI plugin named %q could be found", vol.ID, vol.PluginID)
	}
	existing, err := volumeByIDTxn(txn, nil, vol.Namespace, vol.ID)
	if err != nil {
		return false, err
	}

	if existing == nil {
		if err := namespaceExistsTxn(txn, "volume", vol.ID, vol.Namespace); err != nil {
			return false, err
		}
		v := vol
		if !owned {
			v = vol.Copy()
		}
		// The request may carry the claims of a volume the leader merged
		// onto and that was deregistered since; they are not this one's.
		v.ReadClaims, v.WriteClaims, v.PastClaims = nil, nil, nil
		if err := v.Validate(); err != nil {
			return false, err
		}
		v.AccessMode = structs.CSIVolumeAccessModeUnknown
		v.AttachmentMode = structs.CSIVolumeAttachmentModeUnknown
		v.CreateIndex, v.ModifyIndex = index, index
		return true, insertVolumeTxn(txn, v)
	}

	v, err := existing.Merge(vol)
	if err != nil {
		return false, err
	}
	if err := validateWithClaims(v); err != nil {
		return false, err
	}
	normalizeVolume(v)
	if volumesEqual(existing, v) {
		return false, nil
	}
	v.ModifyIndex, v.ModifyTime = index, vol.ModifyTime
	return true, insertVolumeTxn(txn, v)
}

// validateWithClaims validates a volume as a registration would, but for
// its claims, which only a registration may not carry.
func validateWithClaims(v *structs.CSIVolume) error {
	c := *v
	c.ReadClaims, c.WriteClaims, c.PastClaims = nil, nil, nil
	return c.Validate()
}

// insertVolumeTxn stores v, which the caller owns, without its derived plugin
// fields: those are computed on every read so they are never stale.
func insertVolumeTxn(txn *memdb.Txn, v *structs.CSIVolume) error {
	normalizeVolume(v)
	setVolumeHealth(v, nil)
	if err := txn.Insert(TableCSIVolumes, v); err != nil {
		return fmt.Errorf("state: writing volume %q: %w", v.ID, err)
	}
	return nil
}

// normalizeVolume turns empty maps and lists into nil, so that the no-op
// check does not see a change where a request only spelled "none"
// differently.
func normalizeVolume(v *structs.CSIVolume) {
	if len(v.RequestedCapabilities) == 0 {
		v.RequestedCapabilities = nil
	}
	if len(v.Secrets) == 0 {
		v.Secrets = nil
	}
	if len(v.Parameters) == 0 {
		v.Parameters = nil
	}
	if len(v.Context) == 0 {
		v.Context = nil
	}
	if len(v.Topologies) == 0 {
		v.Topologies = nil
	}
	if len(v.ReadClaims) == 0 {
		v.ReadClaims = nil
	}
	if len(v.WriteClaims) == 0 {
		v.WriteClaims = nil
	}
	if len(v.PastClaims) == 0 {
		v.PastClaims = nil
	}
}

// volumesEqual compares two volumes as stored, ignoring the modify index and
// time and the derived fields.
func volumesEqual(a, b *structs.CSIVolume) bool {
	x, y := *a, *b
	x.ModifyIndex, y.ModifyIndex = 0, 0
	x.ModifyTime, y.ModifyTime = 0, 0
	setVolumeHealth(&x, nil)
	setVolumeHealth(&y, nil)
	return reflect.DeepEqual(&x, &y)
}

// pluginHealth is what a volume reads from its plugin.
type pluginHealth struct {
	schedulable         bool
	reason              string
	controllerRequired  bool
	controllersHealthy  int
	controllersExpected int
	nodesHealthy        int
	nodesExpected       int
}

// healthOf derives a volume's view of its plugin; a missing plugin leaves the
// volume unschedulable with zero counts.
func healthOf(p *structs.CSIPlugin) pluginHealth {
	if p == nil {
		return pluginHealth{}
	}
	reason := p.UnschedulableReason()
	return pluginHealth{
		schedulable:         reason == "",
		reason:              reason,
		controllerRequired:  p.ControllerRequired,
		controllersHealthy:  p.ControllersHealthy,
		controllersExpected: p.ControllersExpected,
		nodesHealthy:        p.NodesHealthy,
		nodesExpected:       p.NodesExpected,
	}
}

// setVolumeHealth sets the derived fields from the plugin (nil zeroes them).
func setVolumeHealth(v *structs.CSIVolume, p *structs.CSIPlugin) { healthOf(p).setOn(v) }

// setOn sets a volume's derived fields.
func (h pluginHealth) setOn(v *structs.CSIVolume) {
	v.Schedulable = h.schedulable
	v.UnschedulableReason = h.reason
	v.ControllerRequired = h.controllerRequired
	v.ControllersHealthy, v.ControllersExpected = h.controllersHealthy, h.controllersExpected
	v.NodesHealthy, v.NodesExpected = h.nodesHealthy, h.nodesExpected
}

func setStubHealth(s *structs.CSIVolListStub, h pluginHealth) {
	s.Schedulable = h.schedulable
	s.UnschedulableReason = h.reason
	s.ControllerRequired = h.controllerRequired
	s.ControllersHealthy, s.ControllersExpected = h.controllersHealthy, h.controllersExpected
	s.NodesHealthy, s.NodesExpected = h.nodesHealthy, h.nodesExpected
}

// CSIVolumeDeregister removes volumes, all or nothing, if
// CheckCSIVolumeDeregister allows it against the volumes as they are in
// this write.
func (s *StateStore) CSIVolumeDeregister(index uint64, namespace string, ids []string, force bool) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if err := checkDeregisterIDs(ids); err != nil {
		return err
	}
	for _, id := range ids {
		vol, err := checkDeregisterTxn(txn, namespace, id, force)
		if err != nil {
			return err
		}
		if err := txn.Delete(TableCSIVolumes, vol); err != nil {
			return fmt.Errorf("state: deleting volume %q: %w", id, err)
		}
		if err := deletePluginIfUnusedTxn(txn, vol.PluginID); err != nil {
			return err
		}
	}
	return commit(txn, index)
}

// CheckCSIVolumeDeregister applies the rules of a deregistration without
// writing anything, for the leader to keep a refused one out of the Raft
// log. A volume with any claim is refused, unless force is set and every
// claiming allocation is terminal or gone: force only cleans up after
// allocations that can no longer release the volume themselves, it never
// takes a volume from a live one.
func (s *StateStore) CheckCSIVolumeDeregister(namespace string, ids []string, force bool) error {
	if err := checkDeregisterIDs(ids); err != nil {
		return err
	}
	txn := s.db.Txn(false)
	for _, id := range ids {
		if _, err := checkDeregisterTxn(txn, namespace, id, force); err != nil {
			return err
		}
	}
	return nil
}

func checkDeregisterIDs(ids []string) error {
	if len(ids) == 0 {
		return structs.ErrInvalid("volume deregister: no volume ids given")
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return structs.ErrInvalid("volume deregister: volume %q named twice", id)
		}
		seen[id] = true
	}
	return nil
}

// checkDeregisterTxn returns the stored volume if it may be deregistered.
func checkDeregisterTxn(txn *memdb.Txn, namespace, id string, force bool) (*structs.CSIVolume, error) {
	vol, err := volumeByIDTxn(txn, nil, namespace, id)
	if err != nil {
		return nil, err
	}
	if vol == nil {
		return nil, structs.ErrNotFound("volume %q not found", id)
	}
	if !vol.InUse() {
		return vol, nil
	}
	if !force {
		return nil, structs.ErrConflict("volume %q in use: %s", id, vol.DescribeClaims())
	}
	for _, allocID := range claimingAllocs(vol) {
		a, err := allocByIDTxn(txn, nil, allocID)
		if err != nil {
			return nil, err
		}
		if a != nil && !a.Terminal() {
			return nil, structs.ErrConflict("volume %q cannot be force-deregistered: allocation %q holding it is not terminal", id, allocID)
		}
	}
	return vol, nil
}

// claimingAllocs lists, sorted, every allocation with a live or past claim.
func claimingAllocs(v *structs.CSIVolume) []string {
	ids := map[string]struct{}{}
	for _, m := range []map[string]*structs.CSIVolumeClaim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for id := range m {
			ids[id] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(ids))
}

// CSIVolumeClaim writes a claim (state taken) or a release checkpoint (any
// other state) of one allocation on one volume, at time now (stamped by the
// leader). The rules are checkClaimTxn's, applied to the volume as it is in
// this write, so of two claims that each passed the leader's check against
// an older snapshot, the second is refused here if the first makes it
// conflict. A refused write returns a *structs.Error and changes nothing. A
// claim that changes nothing, such as a client retrying, writes nothing.
func (s *StateStore) CSIVolumeClaim(index uint64, now int64, namespace, id string, claim *structs.CSIVolumeClaim) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if _, err := claimCSIVolumeTxn(txn, index, now, namespace, id, claim); err != nil {
		return err
	}
	return commit(txn, index)
}

// CheckCSIVolumeClaim applies the rules of a new claim (state taken)
// without writing anything, and returns the volume with its plugin health
// derived. Only its claims are its own (CopyClaims): the rest is shared
// with the stored row and read only. The leader calls it on its snapshot
// so that a refused claim costs no Raft entry; the write applies the same
// rules again.
func (s *StateStore) CheckCSIVolumeClaim(namespace, id string, claim *structs.CSIVolumeClaim) (*structs.CSIVolume, error) {
	if claim != nil && claim.State != structs.CSIVolumeClaimStateTaken {
		return nil, structs.ErrInvalid("volume %q: allocation %q: a new claim is in state %s, not %s",
			id, claim.AllocationID, claim.State, structs.CSIVolumeClaimStateTaken)
	}
	txn := s.db.Txn(false)
	_, v, err := claimTargetTxn(txn, namespace, id, claim)
	if err != nil {
		return nil, err
	}
	if err := checkClaimantTxn(txn, v, claim); err != nil {
		return nil, err
	}
	if err := v.CheckClaim(claim); err != nil {
		return nil, err
	}
	return v, nil
}

// claimTargetTxn returns the stored volume a claim or checkpoint is for and
// a copy of it (structs.CSIVolume.CopyClaims), with its plugin health
// derived, whose claims the caller may change.
func claimTargetTxn(txn *memdb.Txn, namespace, id string, claim *structs.CSIVolumeClaim) (existing, v *structs.CSIVolume, err error) {
	if claim == nil {
		return nil, nil, structs.ErrInvalid("volume %q: missing claim", id)
	}
	existing, err = volumeByIDTxn(txn, nil, namespace, id)
	if err != nil {
		return nil, nil, err
	}
	if existing == nil {
		return nil, nil, structs.ErrNotFound("volume %q not found (allocation %q)", id, claim.AllocationID)
	}
	v = existing.CopyClaims()
	if err := denormalizeTxn(txn, nil, v); err != nil {
		return nil, nil, err
	}
	return existing, v, nil
}

// checkClaimantTxn checks that the allocation of a new claim can hold it:
// it exists, is live, runs on the claim's node and is in the volume's
// namespace. Releases need none of this: they may name allocations that are
// terminal or already gone. The claim rules of the volume itself are
// structs.CSIVolume.CheckClaim's. Whether the node may make the claim at
// all (its secret, its allocation's group asking for the volume) is the
// leader's to decide before the write.
func checkClaimantTxn(txn *memdb.Txn, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim) error {
	alloc, err := allocByIDTxn(txn, nil, claim.AllocationID)
	if err != nil {
		return err
	}
	switch {
	case alloc == nil:
		return structs.ErrNotFound("volume %q: allocation %q not found", vol.ID, claim.AllocationID)
	case alloc.NodeID != claim.NodeID:
		return structs.NewError(structs.ErrCodePermissionDenied, "volume %q: allocation %q runs on node %q, not %q",
			vol.ID, alloc.ID, alloc.NodeID, claim.NodeID)
	case alloc.Terminal():
		return structs.ErrInvalid("volume %q: allocation %q is terminal (%s/%s) and cannot claim it", vol.ID, alloc.ID,
			alloc.DesiredStatus, alloc.ClientStatus)
	case alloc.Namespace != vol.Namespace:
		return structs.ErrInvalid("volume %q: allocation %q is in namespace %q", vol.ID, alloc.ID, alloc.Namespace)
	}
	return nil
}

// claimCSIVolumeTxn writes one claim and says whether it changed the
// stored volume.
func claimCSIVolumeTxn(txn *memdb.Txn, index uint64, now int64, namespace, id string, claim *structs.CSIVolumeClaim) (bool, error) {
	existing, v, err := claimTargetTxn(txn, namespace, id, claim)
	if err != nil {
		return false, err
	}
	allocID := claim.AllocationID
	if claim.State == structs.CSIVolumeClaimStateTaken {
		if err := checkClaimantTxn(txn, v, claim); err != nil {
			return false, err
		}
	}

	prevRead, prevWrite := v.ReadClaims[allocID], v.WriteClaims[allocID]
	if err := v.Claim(claim); err != nil {
		return false, err
	}
	if claim.State == structs.CSIVolumeClaimStateTaken {
		cur := v.WriteClaims[allocID]
		if cur == nil {
			cur = v.ReadClaims[allocID]
		}
		// Claim stores a fresh copy only for a claim it newly took.
		if cur != nil && cur != prevRead && cur != prevWrite {
			cur.ClaimedAt = now
		}
	}

	setVolumeHealth(v, nil)
	normalizeVolume(v)
	if volumesEqual(existing, v) {
		return false, nil
	}
	v.ModifyIndex, v.ModifyTime = index, now
	return true, insertVolumeTxn(txn, v)
}

// CSIVolumeByID returns a copy of the volume with its plugin health derived,
// or nil when it is unknown. The plugin's row is watched too, so a blocking
// read wakes when the volume's schedulability changes.
func (s *StateStore) CSIVolumeByID(ws memdb.WatchSet, namespace, id string) (*structs.CSIVolume, error) {
	txn := s.db.Txn(false)
	raw, err := volumeByIDTxn(txn, ws, namespace, id)
	if err != nil || raw == nil {
		return nil, err
	}
	v := raw.Copy()
	if err := denormalizeTxn(txn, ws, v); err != nil {
		return nil, err
	}
	return v, nil
}

func volumeByIDTxn(txn *memdb.Txn, ws memdb.WatchSet, namespace, id string) (*structs.CSIVolume, error) {
	ch, raw, err := txn.FirstWatch(TableCSIVolumes, indexID, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading volume %q: %w", id, err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.CSIVolume), nil
}

// CSIVolumeDenormalizePlugins returns a copy of vol with the derived plugin
// fields set from the plugin as it is now.
func (s *StateStore) CSIVolumeDenormalizePlugins(ws memdb.WatchSet, vol *structs.CSIVolume) (*structs.CSIVolume, error) {
	if vol == nil {
		return nil, nil
	}
	v := vol.Copy()
	if err := denormalizeTxn(s.db.Txn(false), ws, v); err != nil {
		return nil, err
	}
	return v, nil
}

// denormalizeTxn sets v's derived fields in place; v must be the caller's.
func denormalizeTxn(txn *memdb.Txn, ws memdb.WatchSet, v *structs.CSIVolume) error {
	p, err := pluginByIDTxn(txn, ws, v.PluginID)
	if err != nil {
		return err
	}
	setVolumeHealth(v, p)
	return nil
}

// CSIVolumesByNamespace iterates over the stored volumes (derived fields not
// set) of a namespace, or of all with AllNamespaces, whose ID starts with
// prefix, by namespace then ID.
func (s *StateStore) CSIVolumesByNamespace(ws memdb.WatchSet, namespace, prefix string) (memdb.ResultIterator, error) {
	return volumesByNamespaceTxn(s.db.Txn(false), ws, namespace, prefix)
}

func volumesByNamespaceTxn(txn *memdb.Txn, ws memdb.WatchSet, namespace, prefix string) (memdb.ResultIterator, error) {
	if namespace != AllNamespaces {
		return getWatch(txn, ws, TableCSIVolumes, indexIDPrefix, namespace, prefix)
	}
	iter, err := getWatch(txn, ws, TableCSIVolumes, indexID)
	if err != nil || prefix == "" {
		return iter, err
	}
	return memdb.NewFilterIterator(iter, func(raw any) bool {
		return !strings.HasPrefix(raw.(*structs.CSIVolume).ID, prefix)
	}), nil
}

// CSIVolumesByPluginID iterates over the stored volumes of a plugin in a
// namespace (or all), whose ID starts with prefix. A row is left out when
// its namespace differs or when its ID lacks the prefix: either one alone
// excludes it.
func (s *StateStore) CSIVolumesByPluginID(ws memdb.WatchSet, namespace, prefix, pluginID string) (memdb.ResultIterator, error) {
	return volumesByPluginTxn(s.db.Txn(false), ws, namespace, prefix, pluginID)
}

func volumesByPluginTxn(txn *memdb.Txn, ws memdb.WatchSet, namespace, prefix, pluginID string) (memdb.ResultIterator, error) {
	iter, err := getWatch(txn, ws, TableCSIVolumes, indexPluginID, pluginID)
	if err != nil {
		return nil, err
	}
	return memdb.NewFilterIterator(iter, func(raw any) bool {
		v := raw.(*structs.CSIVolume)
		return (namespace != AllNamespaces && v.Namespace != namespace) || !strings.HasPrefix(v.ID, prefix)
	}), nil
}

// CSIVolumeRestore restores one volume as persisted.
func (r *StateRestore) CSIVolumeRestore(v *structs.CSIVolume) error {
	return insertVolumeTxn(r.txn, v)
}
