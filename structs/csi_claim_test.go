package structs

import (
	"fmt"
	"testing"

	"github.com/shoenig/test/must"
)

const (
	testVolID     = "vol-1"
	testHolder    = "alloc-held"
	testClaimer   = "alloc-new"
	testHolderN   = "node-1"
	testClaimerN  = "node-2"
	testPluginID  = "plug-1"
	fs            = CSIVolumeAttachmentModeFilesystem
	block         = CSIVolumeAttachmentModeBlockDevice
	snr           = CSIVolumeAccessModeSingleNodeReader
	snw           = CSIVolumeAccessModeSingleNodeWriter
	mnr           = CSIVolumeAccessModeMultiNodeReader
	mnsw          = CSIVolumeAccessModeMultiNodeSingleWriter
	mnmw          = CSIVolumeAccessModeMultiNodeMultiWriter
	noMode        = CSIVolumeAccessModeUnknown
	read          = CSIVolumeClaimRead
	write         = CSIVolumeClaimWrite
	noClaimHeld   = CSIVolumeClaimMode(-1)
	testNamespace = "default"
)

var allAccessModes = []CSIVolumeAccessMode{snr, snw, mnr, mnsw, mnmw}

// testClaimVolume returns a schedulable volume whose capabilities are every
// access mode with a file system attachment.
func testClaimVolume() *CSIVolume {
	v := &CSIVolume{
		ID:            testVolID,
		Namespace:     testNamespace,
		PluginID:      testPluginID,
		Schedulable:   true,
		NodesHealthy:  1,
		NodesExpected: 1,
	}
	for _, m := range allAccessModes {
		v.RequestedCapabilities = append(v.RequestedCapabilities,
			&CSIVolumeCapability{AccessMode: m, AttachmentMode: fs})
	}
	return v
}

func testClaim(alloc, node string, mode CSIVolumeClaimMode, access CSIVolumeAccessMode) *CSIVolumeClaim {
	return &CSIVolumeClaim{
		AllocationID:   alloc,
		NodeID:         node,
		ExternalNodeID: "ext-" + node,
		Mode:           mode,
		AccessMode:     access,
		AttachmentMode: fs,
		ReadOnly:       mode == read,
		State:          CSIVolumeClaimStateTaken,
	}
}

// mustTake applies a claim that the test expects to succeed.
func mustTake(t *testing.T, v *CSIVolume, c *CSIVolumeClaim) {
	t.Helper()
	must.NoError(t, v.Claim(c))
}

// startRelease checkpoints the first step of the release of c, as the
// servers do when its allocation ends: every release starts there.
func startRelease(t *testing.T, v *CSIVolume, c *CSIVolumeClaim) {
	t.Helper()
	rel := c.Copy()
	rel.State = CSIVolumeClaimStateUnpublishing
	mustTake(t, v, rel)
}

// TestCSIVolume_ClaimTable has one row per cell of the access-mode table in
// DESIGN.md ("Claim rules"), in each pre-state the cell can be reached in.
func TestCSIVolume_ClaimTable(t *testing.T) {
	type row struct {
		name    string
		current CSIVolumeAccessMode // the volume's current mode, set by held
		held    CSIVolumeClaimMode  // the claim testHolder holds, or noClaimHeld
		mode    CSIVolumeClaimMode  // the new claim's mode
		access  CSIVolumeAccessMode // the new claim's access mode
		caps    []CSIVolumeAccessMode
		code    ErrorCode // "" when the claim is allowed
	}
	rows := []row{
		// none yet: a read is allowed whatever the (capable) access mode.
		{name: "none/read/snr", current: noMode, held: noClaimHeld, mode: read, access: snr},
		{name: "none/read/snw", current: noMode, held: noClaimHeld, mode: read, access: snw},
		{name: "none/read/mnr", current: noMode, held: noClaimHeld, mode: read, access: mnr},
		{name: "none/read/mnsw", current: noMode, held: noClaimHeld, mode: read, access: mnsw},
		{name: "none/read/mnmw", current: noMode, held: noClaimHeld, mode: read, access: mnmw},
		// none yet: a write is allowed if a writer mode is among the capabilities.
		{name: "none/write/snw", current: noMode, held: noClaimHeld, mode: write, access: snw},
		{name: "none/write/mnsw", current: noMode, held: noClaimHeld, mode: write, access: mnsw},
		{name: "none/write/mnmw", current: noMode, held: noClaimHeld, mode: write, access: mnmw},
		{name: "none/write/reader mode snr", current: noMode, held: noClaimHeld, mode: write, access: snr, code: ErrCodeInvalid},
		{name: "none/write/reader mode mnr", current: noMode, held: noClaimHeld, mode: write, access: mnr, code: ErrCodeInvalid},
		{name: "none/write/no writer capability", current: noMode, held: noClaimHeld, mode: write, access: mnsw,
			caps: []CSIVolumeAccessMode{snr, mnr}, code: ErrCodeInvalid},
		{name: "none/read/reader capabilities only", current: noMode, held: noClaimHeld, mode: read, access: mnr,
			caps: []CSIVolumeAccessMode{snr, mnr}},

		// single-node-reader-only: read only if no read claim exists; write never.
		{name: "snr/read held/read", current: snr, held: read, mode: read, access: snr, code: ErrCodeMaxClaims},
		{name: "snr/read held/write", current: snr, held: read, mode: write, access: snw, code: ErrCodeUnschedulable},
		{name: "snr/read held/write reader mode", current: snr, held: read, mode: write, access: snr, code: ErrCodeInvalid},

		// single-node-writer: read or write only if no claim exists.
		{name: "snw/read held/read", current: snw, held: read, mode: read, access: snw, code: ErrCodeMaxClaims},
		{name: "snw/write held/read", current: snw, held: write, mode: read, access: snw, code: ErrCodeMaxClaims},
		{name: "snw/read held/write", current: snw, held: read, mode: write, access: snw, code: ErrCodeMaxClaims},
		{name: "snw/write held/write", current: snw, held: write, mode: write, access: snw, code: ErrCodeMaxClaims},

		// multi-node-reader-only: read always; write never.
		{name: "mnr/read held/read", current: mnr, held: read, mode: read, access: mnr},
		{name: "mnr/read held/write", current: mnr, held: read, mode: write, access: mnsw, code: ErrCodeUnschedulable},
		{name: "mnr/read held/write mnmw", current: mnr, held: read, mode: write, access: mnmw, code: ErrCodeUnschedulable},

		// multi-node-single-writer: read always; write only if no write claim exists.
		{name: "mnsw/read held/read", current: mnsw, held: read, mode: read, access: mnsw},
		{name: "mnsw/write held/read", current: mnsw, held: write, mode: read, access: mnsw},
		{name: "mnsw/read held/write", current: mnsw, held: read, mode: write, access: mnsw},
		{name: "mnsw/write held/write", current: mnsw, held: write, mode: write, access: mnsw, code: ErrCodeMaxClaims},

		// multi-node-multi-writer: always.
		{name: "mnmw/read held/read", current: mnmw, held: read, mode: read, access: mnmw},
		{name: "mnmw/write held/read", current: mnmw, held: write, mode: read, access: mnmw},
		{name: "mnmw/read held/write", current: mnmw, held: read, mode: write, access: mnmw},
		{name: "mnmw/write held/write", current: mnmw, held: write, mode: write, access: mnmw},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			v := testClaimVolume()
			if tc.caps != nil {
				v.RequestedCapabilities = nil
				for _, m := range tc.caps {
					v.RequestedCapabilities = append(v.RequestedCapabilities,
						&CSIVolumeCapability{AccessMode: m, AttachmentMode: fs})
				}
			}
			if tc.held != noClaimHeld {
				mustTake(t, v, testClaim(testHolder, testHolderN, tc.held, tc.current))
			}
			must.Eq(t, tc.current, v.AccessMode)
			before := v.Copy()

			c := testClaim(testClaimer, testClaimerN, tc.mode, tc.access)
			checkErr := v.CheckClaim(c)
			must.Eq(t, before, v, must.Sprint("CheckClaim must not change the volume"))

			got := v.Copy()
			claimErr := got.Claim(c)
			must.Eq(t, CodeOf(checkErr), CodeOf(claimErr), must.Sprint("CheckClaim and Claim must agree"))

			if tc.code == "" {
				must.NoError(t, checkErr)
				must.NoError(t, claimErr)
				held := got.ReadClaims
				if tc.mode == write {
					held = got.WriteClaims
				}
				must.MapContainsKey(t, held, testClaimer)
				must.Eq(t, c, held[testClaimer])
				want := tc.current
				if want == noMode {
					want = tc.access
				}
				must.Eq(t, want, got.AccessMode)
				must.Eq(t, fs, got.AttachmentMode)
				if tc.held != noClaimHeld {
					must.True(t, got.ReadClaims[testHolder] != nil || got.WriteClaims[testHolder] != nil,
						must.Sprint("the existing claim must stay"))
				}
				return
			}

			must.Error(t, checkErr)
			must.Eq(t, tc.code, CodeOf(checkErr))
			must.Eq(t, checkErr.Error(), claimErr.Error())
			must.Eq(t, before, got, must.Sprint("a refused claim must not change the volume"))
			msg := checkErr.Error()
			must.StrContains(t, msg, fmt.Sprintf("%q", testVolID))
			must.StrContains(t, msg, fmt.Sprintf("%q", testClaimer))
			if tc.held != noClaimHeld && tc.code != ErrCodeInvalid {
				must.StrContains(t, msg, fmt.Sprintf("%q", testHolder), must.Sprint("the conflicting claim must be named"))
			}
		})
	}
}

func TestCSIVolume_ClaimNamesConflictDeterministically(t *testing.T) {
	v := testClaimVolume()
	mustTake(t, v, testClaim("alloc-b", testHolderN, read, mnsw))
	mustTake(t, v, testClaim("alloc-a", testHolderN, read, mnsw))
	mustTake(t, v, testClaim("alloc-w", testHolderN, write, mnsw))
	for i := 0; i < 20; i++ {
		err := v.CheckClaim(testClaim(testClaimer, testClaimerN, write, mnsw))
		must.Eq(t, ErrCodeMaxClaims, CodeOf(err))
		must.StrContains(t, err.Error(), `"alloc-w"`)
	}
}

func TestCSIVolume_ClaimCapabilities(t *testing.T) {
	cases := []struct {
		name   string
		access CSIVolumeAccessMode
		attach CSIVolumeAttachmentMode
		code   ErrorCode
	}{
		{name: "listed pair", access: mnmw, attach: fs},
		{name: "listed block pair", access: mnsw, attach: block},
		{name: "access mode not listed", access: snw, attach: fs, code: ErrCodeInvalid},
		{name: "each half listed but not the pair", access: mnmw, attach: block, code: ErrCodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := testClaimVolume()
			v.RequestedCapabilities = []*CSIVolumeCapability{
				{AccessMode: mnmw, AttachmentMode: fs},
				{AccessMode: mnr, AttachmentMode: fs},
				{AccessMode: mnsw, AttachmentMode: block},
			}
			c := testClaim(testClaimer, testClaimerN, read, tc.access)
			c.AttachmentMode = tc.attach
			before := v.Copy()
			err := v.Claim(c)
			if tc.code == "" {
				must.NoError(t, err)
				return
			}
			must.Eq(t, tc.code, CodeOf(err))
			must.StrContains(t, err.Error(), `"vol-1"`)
			must.StrContains(t, err.Error(), `"alloc-new"`)
			must.StrContains(t, err.Error(), "is not among the volume's capabilities")
			must.StrContains(t, err.Error(), string(tc.access)+"/"+string(tc.attach))
			must.Eq(t, before, v)
		})
	}
}

func TestCSIVolume_ClaimAttachmentModeFrozenWhileClaimed(t *testing.T) {
	v := testClaimVolume()
	v.RequestedCapabilities = append(v.RequestedCapabilities, &CSIVolumeCapability{AccessMode: mnmw, AttachmentMode: block})
	mustTake(t, v, testClaim(testHolder, testHolderN, write, mnmw))
	must.Eq(t, fs, v.AttachmentMode)

	c := testClaim(testClaimer, testClaimerN, write, mnmw)
	c.AttachmentMode = block
	err := v.Claim(c)
	must.Eq(t, ErrCodeInvalid, CodeOf(err))
	must.StrContains(t, err.Error(), "cannot change attachment mode of claimed volume")
	must.StrContains(t, err.Error(), `"vol-1"`)
	must.StrContains(t, err.Error(), `"alloc-new"`)
	must.StrContains(t, err.Error(), `"alloc-held"`)

	t.Run("a release checkpoint still holds the mode", func(t *testing.T) {
		v := v.Copy()
		past := testClaim(testHolder, testHolderN, write, mnmw)
		startRelease(t, v, past)
		past.State = CSIVolumeClaimStateNodeDetached
		mustTake(t, v, past)
		must.Eq(t, ErrCodeInvalid, CodeOf(v.Claim(c)))
	})

	t.Run("free again once the last claim is freed", func(t *testing.T) {
		v := v.Copy()
		free := testClaim(testHolder, testHolderN, write, mnmw)
		startRelease(t, v, free)
		free.State = CSIVolumeClaimStateReadyToFree
		mustTake(t, v, free)
		must.Eq(t, noMode, v.AccessMode)
		must.Eq(t, CSIVolumeAttachmentModeUnknown, v.AttachmentMode)
		mustTake(t, v, c)
		must.Eq(t, block, v.AttachmentMode)
	})
}

func TestCSIVolume_ClaimRepeatIsNoop(t *testing.T) {
	cases := []struct {
		name   string
		held   CSIVolumeClaimMode
		access CSIVolumeAccessMode
		again  CSIVolumeClaimMode
	}{
		{name: "read again", held: read, access: snr, again: read},
		{name: "write again", held: write, access: snw, again: write},
		{name: "read after write keeps the write", held: write, access: snw, again: read},
		{name: "read again multi", held: read, access: mnmw, again: read},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := testClaimVolume()
			mustTake(t, v, testClaim(testHolder, testHolderN, tc.held, tc.access))
			before := v.Copy()
			again := testClaim(testHolder, testHolderN, tc.again, tc.access)
			again.PublishContext = map[string]string{"changed": "yes"}
			again.Attempts = 7
			must.NoError(t, v.CheckClaim(again))
			must.NoError(t, v.Claim(again))
			// Only the publish context the controller returned is taken
			// from a repeat; nothing else of it.
			want := before.Copy()
			for _, m := range []map[string]*CSIVolumeClaim{want.ReadClaims, want.WriteClaims} {
				if held := m[testHolder]; held != nil {
					held.PublishContext = map[string]string{"changed": "yes"}
				}
			}
			must.Eq(t, want, v)
		})
	}

	t.Run("repeat is a no-op even when the plugin is unhealthy", func(t *testing.T) {
		v := testClaimVolume()
		mustTake(t, v, testClaim(testHolder, testHolderN, read, mnr))
		v.Schedulable, v.NodesHealthy = false, 0
		before := v.Copy()
		must.NoError(t, v.Claim(testClaim(testHolder, testHolderN, read, mnr)))
		must.Eq(t, before, v)
	})
}

func TestCSIVolume_ClaimUpgradeReadToWrite(t *testing.T) {
	cases := []struct {
		name   string
		access CSIVolumeAccessMode
		others []*CSIVolumeClaim
		code   ErrorCode
		naming string
	}{
		{name: "single-node-writer, alone", access: snw},
		{name: "multi-node-single-writer, alone", access: mnsw},
		{name: "multi-node-single-writer, other readers", access: mnsw,
			others: []*CSIVolumeClaim{testClaim("alloc-r", testHolderN, read, mnsw)}},
		{name: "multi-node-single-writer, other writer", access: mnsw,
			others: []*CSIVolumeClaim{testClaim("alloc-w", testHolderN, write, mnsw)},
			code:   ErrCodeMaxClaims, naming: `"alloc-w"`},
		{name: "multi-node-multi-writer, other writer", access: mnmw,
			others: []*CSIVolumeClaim{testClaim("alloc-w", testHolderN, write, mnmw)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := testClaimVolume()
			mustTake(t, v, testClaim(testClaimer, testClaimerN, read, tc.access))
			for _, o := range tc.others {
				mustTake(t, v, o)
			}
			before := v.Copy()
			err := v.Claim(testClaim(testClaimer, testClaimerN, write, tc.access))
			if tc.code != "" {
				must.Eq(t, tc.code, CodeOf(err))
				must.StrContains(t, err.Error(), tc.naming)
				must.Eq(t, before, v)
				return
			}
			must.NoError(t, err)
			must.MapNotContainsKey(t, v.ReadClaims, testClaimer)
			must.MapContainsKey(t, v.WriteClaims, testClaimer)
			must.Eq(t, write, v.WriteClaims[testClaimer].Mode)
			must.Eq(t, tc.access, v.AccessMode)
		})
	}

	t.Run("reader-only current mode refuses the upgrade", func(t *testing.T) {
		v := testClaimVolume()
		mustTake(t, v, testClaim(testClaimer, testClaimerN, read, mnr))
		err := v.Claim(testClaim(testClaimer, testClaimerN, write, mnsw))
		must.Eq(t, ErrCodeUnschedulable, CodeOf(err))
		must.StrContains(t, err.Error(), `"alloc-new"`)
	})
}

func TestCSIVolume_ClaimUnschedulable(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(v *CSIVolume)
		reason string
	}{
		{
			name:   "no healthy node plugin",
			mutate: func(v *CSIVolume) { v.Schedulable, v.NodesHealthy = false, 0 },
			reason: `plugin "plug-1" has no healthy node plugins`,
		},
		{
			name: "controller required without a healthy controller",
			mutate: func(v *CSIVolume) {
				v.Schedulable, v.ControllerRequired, v.ControllersHealthy, v.ControllersExpected = false, true, 0, 1
			},
			reason: `plugin "plug-1" requires a controller and has no healthy controllers`,
		},
	}
	for _, tc := range cases {
		for _, mode := range []CSIVolumeClaimMode{read, write} {
			t.Run(tc.name+"/"+mode.String(), func(t *testing.T) {
				v := testClaimVolume()
				tc.mutate(v)
				before := v.Copy()
				err := v.Claim(testClaim(testClaimer, testClaimerN, mode, mnmw))
				must.Eq(t, ErrCodeUnschedulable, CodeOf(err))
				must.StrContains(t, err.Error(), "volume is currently unschedulable")
				must.StrContains(t, err.Error(), tc.reason)
				must.StrContains(t, err.Error(), `"vol-1"`)
				must.StrContains(t, err.Error(), `"alloc-new"`)
				must.Eq(t, before, v)
			})
		}
	}

	t.Run("controller required and healthy", func(t *testing.T) {
		v := testClaimVolume()
		v.ControllerRequired, v.ControllersHealthy = true, 1
		must.NoError(t, v.Claim(testClaim(testClaimer, testClaimerN, write, mnmw)))
	})
}

func TestCSIVolumeClaim_ValidateRequest(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *CSIVolumeClaim)
		msgs   []string
	}{
		{name: "valid read", mutate: func(c *CSIVolumeClaim) {}},
		{name: "valid write", mutate: func(c *CSIVolumeClaim) { c.Mode, c.AccessMode = write, snw }},
		{name: "missing allocation", mutate: func(c *CSIVolumeClaim) { c.AllocationID = "" },
			msgs: []string{"missing allocation id"}},
		{name: "missing node", mutate: func(c *CSIVolumeClaim) { c.NodeID = "" },
			msgs: []string{"missing node id"}},
		{name: "unknown mode", mutate: func(c *CSIVolumeClaim) { c.Mode = 7 },
			msgs: []string{"unknown claim mode 7"}},
		{name: "unknown access mode", mutate: func(c *CSIVolumeClaim) { c.AccessMode = "everyone" },
			msgs: []string{`unknown access mode "everyone"`}},
		{name: "missing attachment mode", mutate: func(c *CSIVolumeClaim) { c.AttachmentMode = "" },
			msgs: []string{`unknown attachment mode ""`}},
		{name: "write with single-node-reader-only", mutate: func(c *CSIVolumeClaim) { c.Mode, c.AccessMode = write, snr },
			msgs: []string{`a write claim cannot use the reader-only access mode "single-node-reader-only"`}},
		{name: "write with multi-node-reader-only", mutate: func(c *CSIVolumeClaim) { c.Mode, c.AccessMode = write, mnr },
			msgs: []string{`a write claim cannot use the reader-only access mode "multi-node-reader-only"`}},
		{name: "everything at once", mutate: func(c *CSIVolumeClaim) { *c = CSIVolumeClaim{Mode: 9} },
			msgs: []string{"missing allocation id", "missing node id", "unknown claim mode 9",
				"unknown access mode", "unknown attachment mode"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testClaim(testClaimer, testClaimerN, read, mnr)
			tc.mutate(c)
			err := c.ValidateRequest()
			if len(tc.msgs) == 0 {
				must.NoError(t, err)
				return
			}
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
			for _, m := range tc.msgs {
				must.StrContains(t, err.Error(), m)
			}
			// The volume's own check refuses it the same way, naming the volume.
			v := testClaimVolume()
			verr := v.CheckClaim(c)
			must.Eq(t, ErrCodeInvalid, CodeOf(verr))
			must.StrContains(t, verr.Error(), `volume "vol-1"`)
			for _, m := range tc.msgs {
				must.StrContains(t, verr.Error(), m)
			}
		})
	}
}

func TestCSIVolume_ClaimRelease(t *testing.T) {
	for _, state := range []CSIVolumeClaimState{
		CSIVolumeClaimStateUnpublishing,
		CSIVolumeClaimStateNodeDetached,
		CSIVolumeClaimStateControllerDetached,
	} {
		t.Run(state.String()+" records a past claim and keeps the live one", func(t *testing.T) {
			v := testClaimVolume()
			mustTake(t, v, testClaim(testHolder, testHolderN, write, mnsw))
			rel := testClaim(testHolder, testHolderN, write, mnsw)
			startRelease(t, v, rel)
			rel.State = state
			rel.Attempts, rel.LastError = 2, "node unpublish: timeout"
			mustTake(t, v, rel)

			must.MapContainsKey(t, v.WriteClaims, testHolder)
			must.Eq(t, CSIVolumeClaimStateTaken, v.WriteClaims[testHolder].State)
			must.MapContainsKey(t, v.PastClaims, testHolder)
			must.Eq(t, rel, v.PastClaims[testHolder])
			must.True(t, v.InUse())
			must.Eq(t, mnsw, v.AccessMode)
			must.Eq(t, fs, v.AttachmentMode)

			// The volume stays in use: a second writer is still refused.
			must.Eq(t, ErrCodeMaxClaims, CodeOf(v.CheckClaim(testClaim(testClaimer, testClaimerN, write, mnsw))))

			// The stored checkpoint is a copy.
			rel.LastError = "changed"
			must.Eq(t, "node unpublish: timeout", v.PastClaims[testHolder].LastError)
		})
	}

	t.Run("a later checkpoint replaces the earlier one", func(t *testing.T) {
		v := testClaimVolume()
		mustTake(t, v, testClaim(testHolder, testHolderN, read, mnr))
		rel := testClaim(testHolder, testHolderN, read, mnr)
		rel.State = CSIVolumeClaimStateUnpublishing
		mustTake(t, v, rel)
		rel = rel.Copy()
		rel.State = CSIVolumeClaimStateNodeDetached
		mustTake(t, v, rel)
		must.MapLen(t, 1, v.PastClaims)
		must.Eq(t, CSIVolumeClaimStateNodeDetached, v.PastClaims[testHolder].State)
	})

	t.Run("ready-to-free removes everywhere, modes stay while others remain", func(t *testing.T) {
		v := testClaimVolume()
		mustTake(t, v, testClaim(testHolder, testHolderN, write, mnsw))
		mustTake(t, v, testClaim(testClaimer, testClaimerN, read, mnsw))
		rel := testClaim(testHolder, testHolderN, write, mnsw)
		startRelease(t, v, rel)
		rel.State = CSIVolumeClaimStateControllerDetached
		mustTake(t, v, rel)

		free := rel.Copy()
		free.State = CSIVolumeClaimStateReadyToFree
		mustTake(t, v, free)
		must.MapNotContainsKey(t, v.WriteClaims, testHolder)
		must.MapNotContainsKey(t, v.ReadClaims, testHolder)
		must.MapNotContainsKey(t, v.PastClaims, testHolder)
		must.MapContainsKey(t, v.ReadClaims, testClaimer)
		must.Eq(t, mnsw, v.AccessMode)
		must.Eq(t, fs, v.AttachmentMode)

		// The freed writer's slot is open again.
		must.NoError(t, v.CheckClaim(testClaim("alloc-3", testClaimerN, write, mnsw)))
	})

	t.Run("ready-to-free keeps modes while only a past claim remains", func(t *testing.T) {
		v := testClaimVolume()
		mustTake(t, v, testClaim(testHolder, testHolderN, read, mnr))
		mustTake(t, v, testClaim(testClaimer, testClaimerN, read, mnr))
		// testClaimer's live claim was dropped by some other path, leaving
		// only its release checkpoint.
		delete(v.ReadClaims, testClaimer)
		v.PastClaims = setClaim(v.PastClaims, &CSIVolumeClaim{AllocationID: testClaimer, State: CSIVolumeClaimStateNodeDetached})
		free := testClaim(testHolder, testHolderN, read, mnr)
		startRelease(t, v, free)
		free.State = CSIVolumeClaimStateReadyToFree
		mustTake(t, v, free)
		must.True(t, v.InUse())
		must.Eq(t, mnr, v.AccessMode)
	})

	t.Run("ready-to-free of the last claim resets the modes", func(t *testing.T) {
		v := testClaimVolume()
		mustTake(t, v, testClaim(testHolder, testHolderN, read, snr))
		free := testClaim(testHolder, testHolderN, read, snr)
		startRelease(t, v, free)
		free.State = CSIVolumeClaimStateReadyToFree
		mustTake(t, v, free)
		must.False(t, v.InUse())
		must.Eq(t, noMode, v.AccessMode)
		must.Eq(t, CSIVolumeAttachmentModeUnknown, v.AttachmentMode)
		// A write claim can now set a new mode.
		mustTake(t, v, testClaim(testClaimer, testClaimerN, write, mnmw))
		must.Eq(t, mnmw, v.AccessMode)
	})

	t.Run("ready-to-free of an unknown allocation is refused", func(t *testing.T) {
		v := testClaimVolume()
		mustTake(t, v, testClaim(testHolder, testHolderN, read, mnr))
		before := v.Copy()
		free := testClaim("alloc-unknown", testHolderN, read, mnr)
		free.State = CSIVolumeClaimStateReadyToFree
		err := v.Claim(free)
		must.Eq(t, ErrCodeNotFound, CodeOf(err))
		must.StrContains(t, err.Error(), `"alloc-unknown" holds no claim to release`)
		must.Eq(t, before, v)
	})

	t.Run("unknown state is invalid", func(t *testing.T) {
		v := testClaimVolume()
		c := testClaim(testClaimer, testClaimerN, read, mnr)
		c.State = 42
		err := v.Claim(c)
		must.Eq(t, ErrCodeInvalid, CodeOf(err))
		must.StrContains(t, err.Error(), `"vol-1"`)
		must.StrContains(t, err.Error(), `"alloc-new"`)
		must.StrContains(t, err.Error(), "unknown claim state 42")
	})
}

func TestCSIVolume_ClaimRefusedWhileReleasing(t *testing.T) {
	for _, mode := range []CSIVolumeClaimMode{read, write} {
		t.Run("live claim kept, "+mode.String(), func(t *testing.T) {
			v := testClaimVolume()
			mustTake(t, v, testClaim(testHolder, testHolderN, mode, mnmw))
			rel := testClaim(testHolder, testHolderN, mode, mnmw)
			rel.State = CSIVolumeClaimStateUnpublishing
			mustTake(t, v, rel)
			before := v.Copy()

			for _, again := range []CSIVolumeClaimMode{read, write} {
				c := testClaim(testHolder, testHolderN, again, mnmw)
				checkErr := v.CheckClaim(c)
				must.Eq(t, ErrCodeConflict, CodeOf(checkErr))
				err := v.Claim(c)
				must.Eq(t, ErrCodeConflict, CodeOf(err))
				must.StrContains(t, err.Error(), `"vol-1"`)
				must.StrContains(t, err.Error(), `"alloc-held"`)
				must.StrContains(t, err.Error(), "being released (unpublishing)")
				must.Eq(t, before, v)
			}
		})
	}

	t.Run("past claim only", func(t *testing.T) {
		v := testClaimVolume()
		v.PastClaims = map[string]*CSIVolumeClaim{
			testClaimer: {AllocationID: testClaimer, NodeID: testClaimerN, State: CSIVolumeClaimStateControllerDetached},
		}
		err := v.Claim(testClaim(testClaimer, testClaimerN, read, mnmw))
		must.Eq(t, ErrCodeConflict, CodeOf(err))
		must.StrContains(t, err.Error(), "being released (controller-detached)")
	})
}

func TestCSIVolume_ClaimStoresACopy(t *testing.T) {
	v := testClaimVolume()
	c := testClaim(testClaimer, testClaimerN, write, mnsw)
	c.PublishContext = map[string]string{"device": "/dev/sdb"}
	mustTake(t, v, c)
	c.PublishContext["device"] = "/dev/evil"
	c.NodeID = "changed"
	must.Eq(t, "/dev/sdb", v.WriteClaims[testClaimer].PublishContext["device"])
	must.Eq(t, testClaimerN, v.WriteClaims[testClaimer].NodeID)
}

func TestCSIVolumeClaim_Strings(t *testing.T) {
	must.Eq(t, "read", read.String())
	must.Eq(t, "write", write.String())
	for s, want := range map[CSIVolumeClaimState]string{
		CSIVolumeClaimStateTaken:              "taken",
		CSIVolumeClaimStateUnpublishing:       "unpublishing",
		CSIVolumeClaimStateNodeDetached:       "node-detached",
		CSIVolumeClaimStateControllerDetached: "controller-detached",
		CSIVolumeClaimStateReadyToFree:        "ready-to-free",
		CSIVolumeClaimState(9):                "state(9)",
	} {
		must.Eq(t, want, s.String())
	}
	// The wire values are Nomad's and must never change.
	must.Eq(t, 0, int(CSIVolumeClaimStateTaken))
	must.Eq(t, 1, int(CSIVolumeClaimStateNodeDetached))
	must.Eq(t, 2, int(CSIVolumeClaimStateControllerDetached))
	must.Eq(t, 3, int(CSIVolumeClaimStateReadyToFree))
	must.Eq(t, 4, int(CSIVolumeClaimStateUnpublishing))
}

// TestCSIVolume_ClaimCheckpointRules covers the release checkpoint rules
// the FSM relies on: a checkpoint moves a claim forward or repeats its
// state, never back; it is for a claim that exists, on its node; and a
// release starts at unpublishing.
func TestCSIVolume_ClaimCheckpointRules(t *testing.T) {
	const (
		taken      = CSIVolumeClaimStateTaken
		unpub      = CSIVolumeClaimStateUnpublishing
		nodeDet    = CSIVolumeClaimStateNodeDetached
		ctrlDet    = CSIVolumeClaimStateControllerDetached
		readyFree  = CSIVolumeClaimStateReadyToFree
		noRelease  = CSIVolumeClaimState(-1)
		notClaimed = CSIVolumeClaimState(-2)
	)
	cases := []struct {
		past CSIVolumeClaimState // the release so far: noRelease, or the past claim's state
		to   CSIVolumeClaimState
		node string
		code ErrorCode // "" when accepted
	}{
		{past: noRelease, to: unpub},
		{past: noRelease, to: nodeDet, code: ErrCodeConflict},
		{past: noRelease, to: ctrlDet, code: ErrCodeConflict},
		{past: noRelease, to: readyFree, code: ErrCodeConflict},
		{past: notClaimed, to: unpub, code: ErrCodeNotFound},
		{past: notClaimed, to: readyFree, code: ErrCodeNotFound},
		{past: unpub, to: unpub},
		{past: unpub, to: nodeDet},
		{past: unpub, to: readyFree},
		{past: nodeDet, to: unpub, code: ErrCodeConflict},
		{past: nodeDet, to: nodeDet},
		{past: nodeDet, to: ctrlDet},
		{past: ctrlDet, to: nodeDet, code: ErrCodeConflict},
		{past: ctrlDet, to: unpub, code: ErrCodeConflict},
		{past: ctrlDet, to: readyFree},
		// A past claim in state taken (written before unpublishing existed)
		// moves on like one that is unpublishing.
		{past: taken, to: nodeDet},
		{past: unpub, to: nodeDet, node: testClaimerN, code: ErrCodeInvalid},
		{past: noRelease, to: unpub, node: testClaimerN, code: ErrCodeInvalid},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("%v to %s on %s", tc.past, tc.to, tc.node)
		t.Run(name, func(t *testing.T) {
			v := testClaimVolume()
			held := testClaim(testHolder, testHolderN, write, mnsw)
			if tc.past != notClaimed {
				mustTake(t, v, held)
			}
			if tc.past >= 0 {
				past := held.Copy()
				past.State = tc.past
				v.PastClaims = setClaim(v.PastClaims, past)
			}
			before := v.Copy()
			c := held.Copy()
			c.State = tc.to
			c.Attempts, c.LastError = 1, "timeout"
			if tc.node != "" {
				c.NodeID = tc.node
			}
			err := v.Claim(c)
			if tc.code != "" {
				must.Eq(t, tc.code, CodeOf(err), must.Sprint(err))
				must.StrContains(t, err.Error(), `"vol-1"`)
				must.StrContains(t, err.Error(), `"alloc-held"`)
				must.Eq(t, before, v)
				return
			}
			must.NoError(t, err)
			if tc.to == readyFree {
				must.False(t, v.InUse())
				return
			}
			must.Eq(t, c, v.PastClaims[testHolder])
		})
	}
}

func TestCSIVolumeClaimState_ReleaseOrder(t *testing.T) {
	order := []CSIVolumeClaimState{CSIVolumeClaimStateTaken, CSIVolumeClaimStateWaitingForClient,
		CSIVolumeClaimStateUnpublishing, CSIVolumeClaimStateNodeDetached, CSIVolumeClaimStateControllerDetached,
		CSIVolumeClaimStateReadyToFree}
	for i, s := range order {
		must.Eq(t, i, s.ReleaseOrder(), must.Sprint(s))
		must.Eq(t, i < 3, s.NodeStepPending(), must.Sprint(s))
	}
	must.Eq(t, -1, CSIVolumeClaimState(9).ReleaseOrder())
	must.False(t, CSIVolumeClaimState(9).NodeStepPending())
}

func TestCSIVolume_OtherUserOnNode(t *testing.T) {
	claim := func(alloc, node string) *CSIVolumeClaim {
		return &CSIVolumeClaim{AllocationID: alloc, NodeID: node, Mode: CSIVolumeClaimRead}
	}
	allocs := map[string]*Allocation{
		"live":    {ID: "live", DesiredStatus: AllocDesiredStatusRun, ClientStatus: AllocClientStatusRunning},
		"stopped": {ID: "stopped", DesiredStatus: AllocDesiredStatusStop, ClientStatus: AllocClientStatusRunning},
		"done":    {ID: "done", DesiredStatus: AllocDesiredStatusRun, ClientStatus: AllocClientStatusComplete},
	}
	lookup := func(id string) (*Allocation, error) { return allocs[id], nil }
	for name, tc := range map[string]struct {
		vol  *CSIVolume
		want string
	}{
		"a live allocation on the node": {&CSIVolume{ReadClaims: map[string]*CSIVolumeClaim{
			"me": claim("me", "n1"), "live": claim("live", "n1")}}, "live"},
		"a live allocation on another node does not count": {&CSIVolume{ReadClaims: map[string]*CSIVolumeClaim{
			"me": claim("me", "n1"), "live": claim("live", "n2")}}, ""},
		"a terminal allocation without a past claim does not count": {&CSIVolume{ReadClaims: map[string]*CSIVolumeClaim{
			"me": claim("me", "n1"), "done": claim("done", "n1")}}, ""},
		"a gone allocation does not count": {&CSIVolume{ReadClaims: map[string]*CSIVolumeClaim{
			"me": claim("me", "n1"), "gone": claim("gone", "n1")}}, ""},
		"a claim waiting for its client counts, its allocation stopped or not": {&CSIVolume{
			ReadClaims: map[string]*CSIVolumeClaim{"me": claim("me", "n1"), "stopped": claim("stopped", "n1")},
			PastClaims: map[string]*CSIVolumeClaim{"stopped": {AllocationID: "stopped", NodeID: "n1", State: CSIVolumeClaimStateWaitingForClient}},
		}, "stopped"},
		"a node-detached claim does not count": {&CSIVolume{
			ReadClaims: map[string]*CSIVolumeClaim{"me": claim("me", "n1"), "stopped": claim("stopped", "n1")},
			PastClaims: map[string]*CSIVolumeClaim{"stopped": {AllocationID: "stopped", NodeID: "n1", State: CSIVolumeClaimStateNodeDetached}},
		}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, why, err := tc.vol.OtherUserOnNode("me", "n1", lookup)
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
			must.Eq(t, tc.want == "", why == "")
		})
	}
}

func TestNodeDownOrGone(t *testing.T) {
	must.True(t, NodeDownOrGone(nil))
	must.True(t, NodeDownOrGone(&Node{Status: NodeStatusDown}))
	must.False(t, NodeDownOrGone(&Node{Status: NodeStatusReady}))
	must.False(t, NodeDownOrGone(&Node{Status: NodeStatusInit}))
}
