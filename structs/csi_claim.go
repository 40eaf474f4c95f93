package structs

import (
	"fmt"
	"maps"
	"slices"
)

// CSIVolumeClaimMode says whether a claim reads or writes.
type CSIVolumeClaimMode int

const (
	CSIVolumeClaimRead  CSIVolumeClaimMode = 0
	CSIVolumeClaimWrite CSIVolumeClaimMode = 1
)

func (m CSIVolumeClaimMode) String() string {
	if m == CSIVolumeClaimWrite {
		return "write"
	}
	return "read"
}

// CSIVolumeClaimState is where a claim is in its life. The numbers 0-4
// follow Nomad's wire values and are never reused; the order of release is
// taken → waiting-for-client → unpublishing → node-detached →
// controller-detached → ready-to-free → (removed) (see ReleaseOrder).
type CSIVolumeClaimState int

const (
	CSIVolumeClaimStateTaken              CSIVolumeClaimState = 0
	CSIVolumeClaimStateNodeDetached       CSIVolumeClaimState = 1
	CSIVolumeClaimStateControllerDetached CSIVolumeClaimState = 2
	CSIVolumeClaimStateReadyToFree        CSIVolumeClaimState = 3
	CSIVolumeClaimStateUnpublishing       CSIVolumeClaimState = 4
	// CSIVolumeClaimStateWaitingForClient is a claim of an allocation the
	// servers stopped while its client still runs its tasks: nothing may be
	// unpublished under them. The state store moves it to unpublishing in
	// the write that records the client's report that the tasks stopped
	// (or that loses the allocation with its node); a release does not try
	// anything meanwhile, so waiting is neither an attempt nor an error.
	// Not Nomad's: Nomad keeps such a claim live until then.
	CSIVolumeClaimStateWaitingForClient CSIVolumeClaimState = 5
)

// WaitingForClientNote is the note a claim waiting for its client carries,
// as volume status shows it.
const WaitingForClientNote = "waiting for the client to stop tasks"

func (s CSIVolumeClaimState) String() string {
	switch s {
	case CSIVolumeClaimStateTaken:
		return "taken"
	case CSIVolumeClaimStateNodeDetached:
		return "node-detached"
	case CSIVolumeClaimStateControllerDetached:
		return "controller-detached"
	case CSIVolumeClaimStateReadyToFree:
		return "ready-to-free"
	case CSIVolumeClaimStateUnpublishing:
		return "unpublishing"
	case CSIVolumeClaimStateWaitingForClient:
		return "waiting-for-client"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// ReleaseOrder is the state's position in a claim's life, from 0 (taken)
// to 5 (ready-to-free), and -1 for a state that does not exist: a claim
// only ever moves to a state of a higher order (or stays, recording a
// failed attempt). The wire numbers are not in that order.
func (s CSIVolumeClaimState) ReleaseOrder() int {
	switch s {
	case CSIVolumeClaimStateTaken:
		return 0
	case CSIVolumeClaimStateWaitingForClient:
		return 1
	case CSIVolumeClaimStateUnpublishing:
		return 2
	case CSIVolumeClaimStateNodeDetached:
		return 3
	case CSIVolumeClaimStateControllerDetached:
		return 4
	case CSIVolumeClaimStateReadyToFree:
		return 5
	}
	return -1
}

// NodeStepPending reports whether a claim being released may still be
// published on its node: its node step (unpublish, unstage) has not run.
func (s CSIVolumeClaimState) NodeStepPending() bool {
	return s.ReleaseOrder() >= 0 && s.ReleaseOrder() < CSIVolumeClaimStateNodeDetached.ReleaseOrder()
}

// CSIVolumeClaim is one allocation's hold on a volume, with everything a
// later release needs, so a release never has to ask anyone for it again.
type CSIVolumeClaim struct {
	_struct        bool `codec:",omitempty"`
	AllocationID   string
	NodeID         string
	ExternalNodeID string
	Mode           CSIVolumeClaimMode
	AccessMode     CSIVolumeAccessMode
	AttachmentMode CSIVolumeAttachmentMode
	ReadOnly       bool
	// PublishContext is what ControllerPublish returned; it goes to the node
	// plugin. It can carry credentials and is never shown by the API.
	PublishContext map[string]string
	State          CSIVolumeClaimState

	// Release bookkeeping, stamped by the leader.
	Attempts    int
	LastError   string
	NextAttempt int64
	// AttemptInFlight says that NextAttempt is the deadline of a retry a
	// leader began, not a backoff: the leader that began it is the only
	// one that waits for it. A later leader retries at once, since the
	// caller of that attempt is gone: the client cancelled its call when
	// the caller's stream ended, and serializes calls on a volume.
	AttemptInFlight bool
	ClaimedAt       int64
	// Note says what the release did that is worth knowing, e.g. that the
	// node step was skipped because the node is down.
	Note string
}

// Copy returns a deep copy.
func (c *CSIVolumeClaim) Copy() *CSIVolumeClaim {
	if c == nil {
		return nil
	}
	cc := *c
	cc.PublishContext = maps.Clone(c.PublishContext)
	return &cc
}

func copyClaims(m map[string]*CSIVolumeClaim) map[string]*CSIVolumeClaim {
	return mapClaims(m, (*CSIVolumeClaim).Copy)
}

// shallowCopyClaims copies m and each claim in it, sharing the claims'
// publish contexts (see CSIVolume.CopyClaims).
func shallowCopyClaims(m map[string]*CSIVolumeClaim) map[string]*CSIVolumeClaim {
	return mapClaims(m, func(c *CSIVolumeClaim) *CSIVolumeClaim {
		if c == nil {
			return nil
		}
		cc := *c
		return &cc
	})
}

// mapClaims copies m, each claim in it passed through each; nil for
// nil.
func mapClaims(m map[string]*CSIVolumeClaim, each func(*CSIVolumeClaim) *CSIVolumeClaim) map[string]*CSIVolumeClaim {
	if m == nil {
		return nil
	}
	out := make(map[string]*CSIVolumeClaim, len(m))
	for k, c := range m {
		out[k] = each(c)
	}
	return out
}

func (c *CSIVolumeClaim) describe() string {
	return fmt.Sprintf("allocation %q on node %q holds a %s claim (%s)", c.AllocationID, c.NodeID, c.Mode, c.AccessMode)
}

// ClaimErr builds the typed error of a refused claim: it names the volume,
// the allocation and, where there is one, the conflicting claim.
func claimErr(code ErrorCode, v *CSIVolume, c *CSIVolumeClaim, why string) error {
	return NewError(code, "volume %q: allocation %q cannot take a %s claim: %s", v.ID, c.AllocationID, c.Mode, why)
}

// ValidateRequest checks the shape of a claim before any state is read.
func (c *CSIVolumeClaim) ValidateRequest() error {
	var m MultiError
	if c.AllocationID == "" {
		m.Add("missing allocation id")
	}
	if c.NodeID == "" {
		m.Add("missing node id")
	}
	if c.Mode != CSIVolumeClaimRead && c.Mode != CSIVolumeClaimWrite {
		m.Add("unknown claim mode %d", c.Mode)
	}
	if !c.AccessMode.Valid() {
		m.Add("unknown access mode %q", c.AccessMode)
	}
	if !c.AttachmentMode.Valid() {
		m.Add("unknown attachment mode %q", c.AttachmentMode)
	}
	if c.Mode == CSIVolumeClaimWrite && c.AccessMode.Valid() && !c.AccessMode.IsWriter() {
		m.Add("a write claim cannot use the reader-only access mode %q", c.AccessMode)
	}
	return m.ErrorOrNil("claim")
}

// CheckClaim applies the claim rules to a new claim (state taken) against the
// volume as it is now, without changing it. The volume's plugin health must
// already be derived (Schedulable). It returns nil when the claim may be
// written, including when it repeats a claim the allocation already holds.
func (v *CSIVolume) CheckClaim(c *CSIVolumeClaim) error {
	if err := c.ValidateRequest(); err != nil {
		return Wrap(err, "volume %q: allocation %q", v.ID, c.AllocationID)
	}
	// A release checkpoint keeps the live claim until the claim is freed, so
	// this check must come before the idempotent repeat below: otherwise a
	// client retrying its claim while the servers unpublish the volume would
	// be told it holds the volume.
	if past := v.PastClaims[c.AllocationID]; past != nil {
		return claimErr(ErrCodeConflict, v, c, fmt.Sprintf("its earlier claim is being released (%s)", past.State))
	}
	if held := v.ReadClaims[c.AllocationID]; held != nil && c.Mode == CSIVolumeClaimRead {
		return nil
	}
	if held := v.WriteClaims[c.AllocationID]; held != nil {
		// A writer asking again, or asking to read, keeps what it holds.
		return nil
	}
	if !v.HasCapability(c.AccessMode, c.AttachmentMode) {
		return claimErr(ErrCodeInvalid, v, c, fmt.Sprintf("%s/%s is not among the volume's capabilities %s",
			c.AccessMode, c.AttachmentMode, v.capabilityList()))
	}
	if v.AttachmentMode != CSIVolumeAttachmentModeUnknown && c.AttachmentMode != v.AttachmentMode {
		why := fmt.Sprintf("cannot change attachment mode of claimed volume from %s to %s", v.AttachmentMode, c.AttachmentMode)
		if h := v.otherHolder(c.AllocationID); h != nil {
			why += ": " + h.describe()
		}
		return claimErr(ErrCodeInvalid, v, c, why)
	}
	if !v.Schedulable {
		return claimErr(ErrCodeUnschedulable, v, c, v.unschedulableReason())
	}
	mode := v.AccessMode
	if mode == CSIVolumeAccessModeUnknown {
		mode = c.AccessMode
	}
	// An allocation upgrading its own read claim to a write does not conflict
	// with itself.
	readers := otherClaims(v.ReadClaims, c.AllocationID)
	writers := otherClaims(v.WriteClaims, c.AllocationID)
	if c.Mode == CSIVolumeClaimRead {
		switch mode {
		case CSIVolumeAccessModeSingleNodeReader:
			if len(readers) > 0 {
				return claimErr(ErrCodeMaxClaims, v, c, "volume max claims reached: "+readers[0].describe())
			}
		case CSIVolumeAccessModeSingleNodeWriter:
			if len(readers)+len(writers) > 0 {
				return claimErr(ErrCodeMaxClaims, v, c, "volume max claims reached: "+first(readers, writers).describe())
			}
		}
		return nil
	}
	switch mode {
	case CSIVolumeAccessModeSingleNodeReader, CSIVolumeAccessModeMultiNodeReader:
		why := fmt.Sprintf("the volume is claimed read-only (%s)", mode)
		if h := v.otherHolder(c.AllocationID); h != nil {
			why += ": " + h.describe()
		}
		return claimErr(ErrCodeUnschedulable, v, c, why)
	case CSIVolumeAccessModeSingleNodeWriter:
		if len(readers)+len(writers) > 0 {
			return claimErr(ErrCodeMaxClaims, v, c, "volume max claims reached: "+first(readers, writers).describe())
		}
	case CSIVolumeAccessModeMultiNodeSingleWriter:
		if len(writers) > 0 {
			return claimErr(ErrCodeMaxClaims, v, c, "volume max claims reached: "+writers[0].describe())
		}
	}
	return nil
}

// Claim applies a claim to the volume in place (the caller passes a copy).
// A claim in state taken is checked with CheckClaim and recorded; a claim in
// state ready-to-free removes the allocation's claims and, when none remain,
// resets the current modes; any other state records a release checkpoint in
// PastClaims while the live claim stays, so the volume stays in use until it
// is freed.
func (v *CSIVolume) Claim(c *CSIVolumeClaim) error {
	switch c.State {
	case CSIVolumeClaimStateTaken:
		if err := v.CheckClaim(c); err != nil {
			return err
		}
		held := v.WriteClaims[c.AllocationID]
		if held == nil && c.Mode == CSIVolumeClaimRead {
			held = v.ReadClaims[c.AllocationID]
		}
		if held != nil {
			// A repeat changes nothing, except that it may bring what a
			// later release needs and the first write did not have yet:
			// the controller's publish context and the provider's node ID.
			if len(c.PublishContext) > 0 {
				held.PublishContext = maps.Clone(c.PublishContext)
			}
			if c.ExternalNodeID != "" {
				held.ExternalNodeID = c.ExternalNodeID
			}
			return nil
		}
		cc := c.Copy()
		if c.Mode == CSIVolumeClaimWrite {
			delete(v.ReadClaims, c.AllocationID)
			v.WriteClaims = setClaim(v.WriteClaims, cc)
		} else {
			v.ReadClaims = setClaim(v.ReadClaims, cc)
		}
		if v.AccessMode == CSIVolumeAccessModeUnknown {
			v.AccessMode = c.AccessMode
			v.AttachmentMode = c.AttachmentMode
		}
		return nil
	case CSIVolumeClaimStateReadyToFree:
		if err := v.checkCheckpoint(c); err != nil {
			return err
		}
		v.FreeClaims(c.AllocationID)
		return nil
	case CSIVolumeClaimStateUnpublishing, CSIVolumeClaimStateNodeDetached, CSIVolumeClaimStateControllerDetached:
		if err := v.checkCheckpoint(c); err != nil {
			return err
		}
		v.PastClaims = setClaim(v.PastClaims, c.Copy())
		return nil
	case CSIVolumeClaimStateWaitingForClient:
		// Only the state store puts a claim in this state, in the write
		// that stops its allocation: a checkpoint cannot move one back.
		return NewError(ErrCodeInvalid, "volume %q: allocation %q: a claim waits for its client only when its allocation is stopped, not by a checkpoint",
			v.ID, c.AllocationID)
	}
	return NewError(ErrCodeInvalid, "volume %q: allocation %q: unknown claim state %d", v.ID, c.AllocationID, c.State)
}

// checkCheckpoint applies the rules of a release checkpoint (any state but
// taken) against the volume as it is now. A release only moves forward: a
// checkpoint may repeat the state it records (a failed attempt's
// bookkeeping) or move past it, never back, so a stale checkpoint from a
// leader that lost its lead cannot send a claim back to a step whose side
// effect was already undone. It must be for a claim the allocation holds,
// on the node it holds it on, so a release can never be started for a
// claim that does not exist or aimed at another node. A release starts at
// unpublishing: a live claim with no release in progress cannot skip the
// node step.
func (v *CSIVolume) checkCheckpoint(c *CSIVolumeClaim) error {
	held := v.PastClaims[c.AllocationID]
	if held == nil {
		held = v.WriteClaims[c.AllocationID]
	}
	if held == nil {
		held = v.ReadClaims[c.AllocationID]
	}
	if held == nil {
		return NewError(ErrCodeNotFound, "volume %q: allocation %q holds no claim to release (%s)", v.ID, c.AllocationID, c.State)
	}
	if c.NodeID != held.NodeID {
		return NewError(ErrCodeInvalid, "volume %q: allocation %q: a release checkpoint for node %q, but the claim is on node %q",
			v.ID, c.AllocationID, c.NodeID, held.NodeID)
	}
	from := held.State
	if v.PastClaims[c.AllocationID] == nil {
		// No release yet: the live claim is where it starts.
		from = CSIVolumeClaimStateTaken
		if c.State != CSIVolumeClaimStateUnpublishing {
			return NewError(ErrCodeConflict, "volume %q: allocation %q: a release starts at %s, not %s",
				v.ID, c.AllocationID, CSIVolumeClaimStateUnpublishing, c.State)
		}
	}
	if c.State.ReleaseOrder() < from.ReleaseOrder() {
		return NewError(ErrCodeConflict, "volume %q: allocation %q: the release is at %s and cannot go back to %s",
			v.ID, c.AllocationID, from, c.State)
	}
	return nil
}

// FreeClaims removes every claim of an allocation, live or being released,
// and resets the current modes when no claim remains, without any check:
// it is what a release's last step does, for views of the volume (the
// scheduler's) that look ahead to it. Writes go through Claim.
func (v *CSIVolume) FreeClaims(allocID string) {
	delete(v.ReadClaims, allocID)
	delete(v.WriteClaims, allocID)
	delete(v.PastClaims, allocID)
	if !v.InUse() {
		v.AccessMode = CSIVolumeAccessModeUnknown
		v.AttachmentMode = CSIVolumeAttachmentModeUnknown
	}
}

func setClaim(m map[string]*CSIVolumeClaim, c *CSIVolumeClaim) map[string]*CSIVolumeClaim {
	if m == nil {
		m = make(map[string]*CSIVolumeClaim)
	}
	m[c.AllocationID] = c
	return m
}

// otherClaims lists the claims not held by alloc, in a stable order so that
// errors name the same conflicting claim every time.
func otherClaims(m map[string]*CSIVolumeClaim, alloc string) []*CSIVolumeClaim {
	var out []*CSIVolumeClaim
	for _, id := range slices.Sorted(maps.Keys(m)) {
		if id != alloc {
			out = append(out, m[id])
		}
	}
	return out
}

// otherHolder returns a claim held by another allocation (a reader first,
// then a writer, then one being released), so that an error can name the
// claim it conflicts with; nil when there is none.
func (v *CSIVolume) otherHolder(alloc string) *CSIVolumeClaim {
	for _, m := range []map[string]*CSIVolumeClaim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		if others := otherClaims(m, alloc); len(others) > 0 {
			return others[0]
		}
	}
	return nil
}

func first(a, b []*CSIVolumeClaim) *CSIVolumeClaim {
	if len(a) > 0 {
		return a[0]
	}
	return b[0]
}

func (v *CSIVolume) capabilityList() string {
	s := ""
	for i, c := range v.RequestedCapabilities {
		if i > 0 {
			s += ", "
		}
		s += c.String()
	}
	return "[" + s + "]"
}

func (v *CSIVolume) unschedulableReason() string {
	if v.UnschedulableReason != "" {
		return "volume is currently unschedulable: " + v.UnschedulableReason
	}
	switch {
	case v.NodesHealthy == 0:
		return fmt.Sprintf("volume is currently unschedulable: plugin %q has no healthy node plugins", v.PluginID)
	case v.ControllerRequired && v.ControllersHealthy == 0:
		return fmt.Sprintf("volume is currently unschedulable: plugin %q requires a controller and has no healthy controllers", v.PluginID)
	}
	return "volume is currently unschedulable"
}

// OtherUserOnNode is the one decision of whether another allocation than
// allocID still uses the volume on nodeID, so that the volume must stay
// attached there (a release then skips its controller step). It returns
// such an allocation and why, or "" when there is none. A claim being
// released counts until its node step is done, whatever its allocation's
// status: the volume may still be published there. A live claim counts
// while its allocation is known and not terminal; alloc looks an
// allocation up (nil when it is gone).
func (v *CSIVolume) OtherUserOnNode(allocID, nodeID string, alloc func(id string) (*Allocation, error)) (string, string, error) {
	for _, m := range []map[string]*CSIVolumeClaim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			c := m[id]
			if id == allocID || c.NodeID != nodeID {
				continue
			}
			if past := v.PastClaims[id]; past != nil {
				if past.State.NodeStepPending() {
					return id, fmt.Sprintf("allocation %q on the same node is not node-detached yet (%s)", id, past.State), nil
				}
				continue
			}
			a, err := alloc(id)
			if err != nil {
				return "", "", err
			}
			if a != nil && !a.Terminal() {
				return id, fmt.Sprintf("allocation %q on the same node still uses the volume", id), nil
			}
		}
	}
	return "", "", nil
}
