package structs

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

const (
	secretValue = "hunter2-secret"
	mountSecret = "password=s3cr3t-flag"
)

// testVolume returns a valid, unclaimed volume with every optional field set.
func testVolume() *CSIVolume {
	return &CSIVolume{
		ID:              testVolID,
		Namespace:       testNamespace,
		Name:            "database",
		ExternalID:      "ext-vol-1",
		PluginID:        testPluginID,
		Provider:        "example.com/csi",
		ProviderVersion: "1.0.0",
		RequestedCapabilities: []*CSIVolumeCapability{
			{AccessMode: snw, AttachmentMode: fs},
			{AccessMode: mnr, AttachmentMode: fs},
		},
		MountOptions:         &CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime", mountSecret}},
		Secrets:              CSISecrets{"token": secretValue},
		Parameters:           map[string]string{"tier": "gold"},
		Context:              map[string]string{"pool": "a"},
		RequestedCapacityMin: 1 << 30,
		RequestedCapacityMax: 2 << 30,
		RequestedTopologies: &CSITopologyRequest{
			Required:  []*CSITopology{{Segments: map[string]string{"zone": "a"}}},
			Preferred: []*CSITopology{{Segments: map[string]string{"rack": "1"}}},
		},
		Topologies:  []*CSITopology{{Segments: map[string]string{"zone": "a"}}},
		Schedulable: true, NodesHealthy: 1, NodesExpected: 1,
	}
}

func TestCSIVolume_Validate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(v *CSIVolume)
		msg    string // "" when valid
	}{
		{name: "valid", mutate: func(v *CSIVolume) {}},
		{name: "valid minimal", mutate: func(v *CSIVolume) {
			*v = CSIVolume{ID: "v", Namespace: "n", PluginID: "p",
				RequestedCapabilities: []*CSIVolumeCapability{{AccessMode: mnmw, AttachmentMode: block}}}
		}},
		{name: "missing id", mutate: func(v *CSIVolume) { v.ID = "" }, msg: "missing volume id"},
		{name: "bad id", mutate: func(v *CSIVolume) { v.ID = "a/b" },
			msg: `volume id "a/b" must not contain any of / ? # % \`},
		{name: "missing plugin", mutate: func(v *CSIVolume) { v.PluginID = "" }, msg: "missing plugin id"},
		{name: "bad plugin", mutate: func(v *CSIVolume) { v.PluginID = "p q" },
			msg: `plugin id "p q" must not contain spaces or control characters`},
		{name: "missing namespace", mutate: func(v *CSIVolume) { v.Namespace = "" }, msg: "missing namespace"},
		{name: "long name", mutate: func(v *CSIVolume) { v.Name = strings.Repeat("n", MaxNameLength+1) },
			msg: "name is longer than 256 characters"},
		{name: "snapshot and clone", mutate: func(v *CSIVolume) { v.SnapshotID, v.CloneID = "s", "c" },
			msg: "only one of snapshot_id and clone_id is allowed"},
		{name: "no capabilities", mutate: func(v *CSIVolume) { v.RequestedCapabilities = nil },
			msg: "must include at least one capability block"},
		{name: "nil capability", mutate: func(v *CSIVolume) { v.RequestedCapabilities[1] = nil },
			msg: "capability 2 is empty"},
		{name: "bad access mode", mutate: func(v *CSIVolume) { v.RequestedCapabilities[0].AccessMode = "rw" },
			msg: `capability 1: unknown access mode "rw"`},
		{name: "bad attachment mode", mutate: func(v *CSIVolume) { v.RequestedCapabilities[1].AttachmentMode = "" },
			msg: `capability 2: unknown attachment mode ""`},
		{name: "block device with mount flags", mutate: func(v *CSIVolume) {
			v.RequestedCapabilities = []*CSIVolumeCapability{{AccessMode: snw, AttachmentMode: block}}
		}, msg: "block devices cannot have mount options"},
		{name: "block device with fs type", mutate: func(v *CSIVolume) {
			v.RequestedCapabilities = []*CSIVolumeCapability{{AccessMode: snw, AttachmentMode: block}}
			v.MountOptions = &CSIMountOptions{FSType: "xfs"}
		}, msg: "block devices cannot have mount options"},
		{name: "block device with empty mount options", mutate: func(v *CSIVolume) {
			v.RequestedCapabilities = []*CSIVolumeCapability{{AccessMode: snw, AttachmentMode: block}}
			v.MountOptions = &CSIMountOptions{}
		}},
		{name: "block and file system may have mount options", mutate: func(v *CSIVolume) {
			v.RequestedCapabilities = append(v.RequestedCapabilities, &CSIVolumeCapability{AccessMode: snw, AttachmentMode: block})
		}},
		{name: "capacity max below min", mutate: func(v *CSIVolume) { v.RequestedCapacityMin, v.RequestedCapacityMax = 2, 1 },
			msg: "capacity_max (1) is less than capacity_min (2)"},
		{name: "capacity max unset", mutate: func(v *CSIVolume) { v.RequestedCapacityMin, v.RequestedCapacityMax = 2, 0 }},
		{name: "negative capacity", mutate: func(v *CSIVolume) { v.RequestedCapacityMin, v.RequestedCapacityMax = -1, 0 },
			msg: "capacity must not be negative"},
		{name: "required topology without segments", mutate: func(v *CSIVolume) {
			v.RequestedTopologies.Required = append(v.RequestedTopologies.Required, &CSITopology{})
		}, msg: "required topology is missing segments field"},
		{name: "nil preferred topology", mutate: func(v *CSIVolume) {
			v.RequestedTopologies.Preferred = []*CSITopology{nil}
		}, msg: "preferred topology is missing segments field"},
		{name: "claims", mutate: func(v *CSIVolume) {
			v.PastClaims = map[string]*CSIVolumeClaim{"a": {AllocationID: "a"}}
		}, msg: "claims cannot be set by registration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := testVolume()
			tc.mutate(v)
			err := v.Validate()
			if tc.msg == "" {
				must.NoError(t, err)
				return
			}
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
			must.StrContains(t, err.Error(), tc.msg)
			if v.ID != "" {
				must.StrHasPrefix(t, `invalid: volume "`+v.ID+`" validation failed: `, err.Error())
			} else {
				must.StrHasPrefix(t, "invalid: volume validation failed: ", err.Error())
			}
		})
	}

	t.Run("all problems in one error", func(t *testing.T) {
		v := &CSIVolume{
			ID:                   "vol 1",
			SnapshotID:           "s",
			CloneID:              "c",
			RequestedCapacityMin: -5,
			RequestedTopologies:  &CSITopologyRequest{Required: []*CSITopology{{}}},
			ReadClaims:           map[string]*CSIVolumeClaim{"a": {}},
		}
		err := v.Validate()
		must.Eq(t, ErrCodeInvalid, CodeOf(err))
		want := []string{
			`volume id "vol 1" must not contain spaces or control characters`,
			"missing plugin id",
			"missing namespace",
			"only one of snapshot_id and clone_id is allowed",
			"must include at least one capability block",
			"capacity must not be negative",
			"required topology is missing segments field",
			"claims cannot be set by registration",
		}
		must.Eq(t, `volume "vol 1" validation failed: `+strings.Join(want, "; "), MessageOf(err))
	})
}

func TestValidateID(t *testing.T) {
	cases := []struct {
		name string
		id   string
		msg  string // "" when valid
	}{
		{name: "empty", id: "", msg: "missing thing id"},
		{name: "simple", id: "vol-1"},
		{name: "dots and underscores", id: "a.b_c:d@e"},
		{name: "per alloc suffix", id: "vol[0]"},
		{name: "unicode", id: "volume-é-日本"},
		{name: "exactly max length", id: strings.Repeat("x", MaxIDLength)},
		{name: "one past max length", id: strings.Repeat("x", MaxIDLength+1),
			msg: `thing id "` + strings.Repeat("x", 32) + `..." is longer than 128 characters`},
		{name: "slash", id: "a/b", msg: "must not contain any of / ? # % \\"},
		{name: "question mark", id: "a?b", msg: "must not contain any of"},
		{name: "hash", id: "a#b", msg: "must not contain any of"},
		{name: "percent", id: "a%2F", msg: "must not contain any of"},
		{name: "backslash", id: `a\b`, msg: "must not contain any of"},
		{name: "space", id: "a b", msg: "must not contain spaces or control characters"},
		{name: "leading space", id: " a", msg: "must not contain spaces or control characters"},
		{name: "tab", id: "a\tb", msg: "must not contain spaces or control characters"},
		{name: "newline", id: "a\n", msg: "must not contain spaces or control characters"},
		{name: "nul", id: "a\x00", msg: "must not contain spaces or control characters"},
		{name: "del", id: "a\x7f", msg: "must not contain spaces or control characters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateID("thing id", tc.id)
			if tc.msg == "" {
				must.NoError(t, err)
				return
			}
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
			must.StrContains(t, MessageOf(err), tc.msg)
			must.LessEq(t, 200, len(err.Error()), must.Sprint("a long id must not be echoed whole"))
		})
	}
}

func TestCSIVolume_Merge(t *testing.T) {
	// claimed returns the stored volume with a live claim, so its current
	// modes are set and it is in use.
	claimed := func() *CSIVolume {
		v := testVolume()
		mustTake(t, v, testClaim(testHolder, testHolderN, write, snw))
		return v
	}
	cases := []struct {
		name   string
		stored func() *CSIVolume
		update func(u *CSIVolume)
		msg    string // "" when the update is accepted
		// code of the refusal: invalid unless the claims alone refuse it.
		code  ErrorCode
		check func(t *testing.T, stored, out *CSIVolume)
	}{
		{name: "identical", stored: testVolume, update: func(u *CSIVolume) {}},
		{name: "name changed", stored: testVolume, update: func(u *CSIVolume) { u.Name = "other" },
			msg: "volume name cannot be updated"},
		{name: "name omitted", stored: testVolume, update: func(u *CSIVolume) { u.Name = "" },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, "database", out.Name) }},
		{name: "external id changed", stored: testVolume, update: func(u *CSIVolume) { u.ExternalID = "ext-2" },
			msg: "volume external ID cannot be updated"},
		{name: "external id omitted", stored: testVolume, update: func(u *CSIVolume) { u.ExternalID = "" },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, "ext-vol-1", out.ExternalID) }},
		{name: "plugin changed", stored: testVolume, update: func(u *CSIVolume) { u.PluginID = "plug-2" },
			msg: "volume plugin ID cannot be updated"},
		{name: "plugin omitted", stored: testVolume, update: func(u *CSIVolume) { u.PluginID = "" },
			msg: "volume plugin ID cannot be updated"},
		{name: "clone id changed", stored: testVolume, update: func(u *CSIVolume) { u.CloneID = "c" },
			msg: "volume clone ID cannot be updated"},
		{name: "snapshot id changed", stored: testVolume, update: func(u *CSIVolume) { u.SnapshotID = "s" },
			msg: "volume snapshot ID cannot be updated"},
		{name: "capability in use removed", stored: claimed, update: func(u *CSIVolume) {
			u.RequestedCapabilities = []*CSIVolumeCapability{{AccessMode: mnr, AttachmentMode: fs}}
		}, msg: "volume requested capabilities update was not compatible with existing capability in use (single-node-writer/file-system)",
			code: ErrCodeConflict},
		{name: "capability in use kept, another added", stored: claimed, update: func(u *CSIVolume) {
			u.RequestedCapabilities = []*CSIVolumeCapability{
				{AccessMode: mnmw, AttachmentMode: block}, {AccessMode: snw, AttachmentMode: fs}}
			u.MountOptions = nil
		}, check: func(t *testing.T, s, out *CSIVolume) {
			must.SliceLen(t, 2, out.RequestedCapabilities)
			must.Eq(t, mnmw, out.RequestedCapabilities[0].AccessMode)
		}},
		{name: "capabilities replaced while unclaimed", stored: testVolume, update: func(u *CSIVolume) {
			u.RequestedCapabilities = []*CSIVolumeCapability{{AccessMode: mnmw, AttachmentMode: fs}}
		}, check: func(t *testing.T, s, out *CSIVolume) {
			must.Eq(t, []*CSIVolumeCapability{{AccessMode: mnmw, AttachmentMode: fs}}, out.RequestedCapabilities)
		}},
		{name: "topology request changed", stored: testVolume, update: func(u *CSIVolume) {
			u.RequestedTopologies.Required[0].Segments["zone"] = "b"
		}, msg: "volume topology request update was not compatible with existing topology"},
		{name: "topology request omitted", stored: testVolume, update: func(u *CSIVolume) { u.RequestedTopologies = nil },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, s.RequestedTopologies, out.RequestedTopologies) }},
		{name: "mount options changed while in use", stored: claimed, update: func(u *CSIVolume) {
			u.MountOptions = &CSIMountOptions{FSType: "xfs"}
		}, msg: "can not update mount options while volume is in use", code: ErrCodeConflict},
		{name: "mount flags changed while in use", stored: claimed, update: func(u *CSIVolume) {
			u.MountOptions.MountFlags = []string{"noatime"}
		}, msg: "can not update mount options while volume is in use", code: ErrCodeConflict},
		{name: "mount options changed while releasing", stored: func() *CSIVolume {
			v := testVolume()
			v.PastClaims = map[string]*CSIVolumeClaim{"a": {AllocationID: "a", State: CSIVolumeClaimStateNodeDetached}}
			return v
		}, update: func(u *CSIVolume) { u.MountOptions = &CSIMountOptions{FSType: "xfs"} },
			msg: "can not update mount options while volume is in use", code: ErrCodeConflict},
		{name: "identity and mount options while in use", stored: claimed, update: func(u *CSIVolume) {
			u.ExternalID = "ext-2"
			u.MountOptions = &CSIMountOptions{FSType: "xfs"}
		}, msg: "volume external ID cannot be updated; can not update mount options while volume is in use"},
		{name: "provider follows the plugin", stored: testVolume, update: func(u *CSIVolume) {
			u.Provider, u.ProviderVersion = "example.com/other", "2.0"
		}, check: func(t *testing.T, s, out *CSIVolume) {
			must.Eq(t, "example.com/other", out.Provider)
			must.Eq(t, "2.0", out.ProviderVersion)
		}},
		{name: "provider omitted is kept", stored: func() *CSIVolume {
			v := testVolume()
			v.Provider, v.ProviderVersion = "example.com/p", "1.0"
			return v
		}, update: func(u *CSIVolume) { u.Provider, u.ProviderVersion = "", "" }, check: func(t *testing.T, s, out *CSIVolume) {
			must.Eq(t, "example.com/p", out.Provider)
			must.Eq(t, "1.0", out.ProviderVersion)
		}},
		{name: "same mount options while in use", stored: claimed, update: func(u *CSIVolume) {}},
		{name: "mount options omitted while in use", stored: claimed, update: func(u *CSIVolume) { u.MountOptions = nil },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, s.MountOptions, out.MountOptions) }},
		{name: "mount options changed while unused", stored: testVolume, update: func(u *CSIVolume) {
			u.MountOptions = &CSIMountOptions{FSType: "xfs"}
		}, check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, "xfs", out.MountOptions.FSType) }},
		{name: "parameters changed", stored: testVolume, update: func(u *CSIVolume) { u.Parameters = map[string]string{"tier": "silver"} },
			msg: "volume parameters cannot be updated"},
		{name: "parameters added", stored: testVolume, update: func(u *CSIVolume) { u.Parameters["extra"] = "x" },
			msg: "volume parameters cannot be updated"},
		{name: "parameters omitted", stored: testVolume, update: func(u *CSIVolume) { u.Parameters = nil },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, s.Parameters, out.Parameters) }},
		{name: "context omitted is kept", stored: testVolume, update: func(u *CSIVolume) { u.Context = nil },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, map[string]string{"pool": "a"}, out.Context) }},
		{name: "context replaced", stored: testVolume, update: func(u *CSIVolume) { u.Context = map[string]string{"pool": "b"} },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, map[string]string{"pool": "b"}, out.Context) }},
		{name: "secrets replaced", stored: testVolume, update: func(u *CSIVolume) { u.Secrets = CSISecrets{"other": "x"} },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, CSISecrets{"other": "x"}, out.Secrets) }},
		{name: "secrets omitted are removed", stored: testVolume, update: func(u *CSIVolume) { u.Secrets = nil },
			check: func(t *testing.T, s, out *CSIVolume) { must.MapEmpty(t, out.Secrets) }},
		{name: "capacity changed", stored: claimed, update: func(u *CSIVolume) { u.RequestedCapacityMin, u.RequestedCapacityMax = 5, 10 },
			check: func(t *testing.T, s, out *CSIVolume) {
				must.Eq(t, int64(5), out.RequestedCapacityMin)
				must.Eq(t, int64(10), out.RequestedCapacityMax)
			}},
		{name: "capacity omitted", stored: testVolume, update: func(u *CSIVolume) { u.RequestedCapacityMin, u.RequestedCapacityMax = 0, 0 },
			check: func(t *testing.T, s, out *CSIVolume) { must.Eq(t, s.RequestedCapacityMax, out.RequestedCapacityMax) }},
		{name: "claims and modes stay", stored: claimed, update: func(u *CSIVolume) {},
			check: func(t *testing.T, s, out *CSIVolume) {
				must.Eq(t, s.WriteClaims, out.WriteClaims)
				must.Eq(t, snw, out.AccessMode)
				must.Eq(t, fs, out.AttachmentMode)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stored := tc.stored()
			update := testVolume()
			tc.update(update)
			storedBefore, updateBefore := stored.Copy(), update.Copy()

			out, err := stored.Merge(update)
			must.Eq(t, storedBefore, stored, must.Sprint("Merge must not change the stored volume"))
			must.Eq(t, updateBefore, update, must.Sprint("Merge must not change the update"))
			if tc.msg != "" {
				must.Nil(t, out)
				want := tc.code
				if want == "" {
					want = ErrCodeInvalid
				}
				must.Eq(t, want, CodeOf(err))
				must.StrContains(t, err.Error(), `volume "vol-1" cannot be updated`)
				must.StrContains(t, err.Error(), tc.msg)
				return
			}
			must.NoError(t, err)
			must.Eq(t, stored.ID, out.ID)
			if tc.check != nil {
				tc.check(t, stored, out)
			}
			// The result shares nothing with either input.
			if len(out.RequestedCapabilities) > 0 {
				out.RequestedCapabilities[0].AccessMode = "mutated"
				must.NotEq(t, CSIVolumeAccessMode("mutated"), update.RequestedCapabilities[0].AccessMode)
			}
			if out.Secrets != nil {
				out.Secrets["mutated"] = "x"
				must.MapNotContainsKey(t, update.Secrets, "mutated")
				must.MapNotContainsKey(t, stored.Secrets, "mutated")
			}
		})
	}

	t.Run("all refusals in one error", func(t *testing.T) {
		stored := claimed()
		update := testVolume()
		update.Name, update.ExternalID, update.PluginID = "n2", "e2", "p2"
		update.Parameters = map[string]string{"x": "y"}
		update.MountOptions = nil
		_, err := stored.Merge(update)
		must.Eq(t, ErrCodeInvalid, CodeOf(err))
		must.Eq(t, `volume "vol-1" cannot be updated: volume name cannot be updated; `+
			`volume external ID cannot be updated; volume plugin ID cannot be updated; `+
			`volume parameters cannot be updated`, MessageOf(err))
	})
}

func TestCSIVolume_CopyIsDeep(t *testing.T) {
	orig := testVolume()
	mustTake(t, orig, testClaim(testHolder, testHolderN, write, snw))
	orig.WriteClaims[testHolder].PublishContext = map[string]string{"dev": "/dev/sdb"}
	rel := testClaim("alloc-past", testHolderN, read, snw)
	rel.State = CSIVolumeClaimStateNodeDetached
	orig.PastClaims = map[string]*CSIVolumeClaim{"alloc-past": rel}
	orig.ReadClaims = map[string]*CSIVolumeClaim{"alloc-r": testClaim("alloc-r", testHolderN, read, snw)}
	snapshot := orig.Copy()
	must.Eq(t, snapshot, orig)

	c := orig.Copy()
	c.RequestedCapabilities[0].AccessMode = mnmw
	c.RequestedCapabilities = append(c.RequestedCapabilities, &CSIVolumeCapability{})
	c.MountOptions.FSType = "xfs"
	c.MountOptions.MountFlags[0] = "changed"
	c.Secrets["token"] = "changed"
	c.Secrets["new"] = "x"
	c.Parameters["tier"] = "changed"
	c.Context["pool"] = "changed"
	c.RequestedTopologies.Required[0].Segments["zone"] = "changed"
	c.RequestedTopologies.Preferred = nil
	c.Topologies[0].Segments["zone"] = "changed"
	c.WriteClaims[testHolder].PublishContext["dev"] = "changed"
	c.WriteClaims[testHolder].State = CSIVolumeClaimStateUnpublishing
	c.WriteClaims["other"] = &CSIVolumeClaim{}
	c.ReadClaims["alloc-r"].NodeID = "changed"
	delete(c.PastClaims, "alloc-past")
	must.Eq(t, snapshot, orig)

	t.Run("nil stays nil", func(t *testing.T) {
		var v *CSIVolume
		must.Nil(t, v.Copy())
		empty := &CSIVolume{ID: "x"}
		must.Eq(t, empty, empty.Copy())
	})

	t.Run("nil capability entries keep their place", func(t *testing.T) {
		v := &CSIVolume{RequestedCapabilities: []*CSIVolumeCapability{nil, {AccessMode: snw, AttachmentMode: fs}}}
		must.Eq(t, v, v.Copy())
	})
}

func TestCSIVolume_Sanitize(t *testing.T) {
	orig := testVolume()
	mustTake(t, orig, testClaim(testHolder, testHolderN, write, snw))
	orig.WriteClaims[testHolder].PublishContext = map[string]string{"key": secretValue}
	orig.ReadClaims = map[string]*CSIVolumeClaim{"r": {AllocationID: "r", PublishContext: map[string]string{"k": secretValue}}}
	orig.PastClaims = map[string]*CSIVolumeClaim{"p": {AllocationID: "p", PublishContext: map[string]string{"k": secretValue}}}
	before := orig.Copy()

	s := orig.Sanitize()
	must.Eq(t, before, orig, must.Sprint("Sanitize must not modify the original"))
	must.Nil(t, s.Secrets)
	must.Eq(t, "ext4", s.MountOptions.FSType)
	must.Eq(t, []string{RedactedValue}, s.MountOptions.MountFlags)
	for _, m := range []map[string]*CSIVolumeClaim{s.ReadClaims, s.WriteClaims, s.PastClaims} {
		must.MapLen(t, 1, m)
		for _, c := range m {
			must.Nil(t, c.PublishContext)
		}
	}
	must.Eq(t, orig.WriteClaims[testHolder].NodeID, s.WriteClaims[testHolder].NodeID)
	must.Eq(t, orig.Parameters, s.Parameters)
	must.StrNotContains(t, fmt.Sprintf("%#v %+v", *s, *s.MountOptions), secretValue)

	t.Run("no flags stays no flags", func(t *testing.T) {
		v := testVolume()
		v.MountOptions = &CSIMountOptions{FSType: "ext4"}
		must.Nil(t, v.Sanitize().MountOptions.MountFlags)
		v.MountOptions = nil
		must.Nil(t, v.Sanitize().MountOptions)
	})

	t.Run("nil", func(t *testing.T) {
		var v *CSIVolume
		must.Nil(t, v.Sanitize())
	})
}

func TestCSISecretsAndMountOptions_NeverPrinted(t *testing.T) {
	secrets := CSISecrets{"token": secretValue, "b": secretValue + "-2"}
	opts := CSIMountOptions{FSType: "ext4", MountFlags: []string{"ro", mountSecret}}
	vol := testVolume()
	vol.Secrets = secrets
	vol.MountOptions = &opts

	type holder struct {
		Secrets CSISecrets
		Opts    CSIMountOptions
		OptsP   *CSIMountOptions
	}
	values := map[string]any{
		"secrets":              secrets,
		"secrets pointer":      &secrets,
		"mount options":        opts,
		"mount options ptr":    &opts,
		"volume":               vol,
		"volume value":         *vol,
		"struct holding both":  holder{Secrets: secrets, Opts: opts, OptsP: &opts},
		"slice of options":     []CSIMountOptions{opts},
		"map of secrets":       map[string]CSISecrets{"a": secrets},
		"register request":     &CSIVolumeRegisterRequest{Volumes: []*CSIVolume{vol}},
		"register request val": CSIVolumeRegisterRequest{Volumes: []*CSIVolume{vol}},
	}
	// %s and %q are checked only on the values themselves: on a struct that
	// holds a *CSIVolume below the top level they take fmt's bad-verb path,
	// which bypasses every String method (a limit of fmt, not of these types).
	direct := map[string]bool{"secrets": true, "secrets pointer": true, "mount options": true, "mount options ptr": true}
	for name, val := range values {
		t.Run(name, func(t *testing.T) {
			verbs := []string{"%v", "%+v", "%#v"}
			if direct[name] {
				verbs = append(verbs, "%s", "%q")
			}
			for _, verb := range verbs {
				out := fmt.Sprintf(verb, val)
				must.StrNotContains(t, out, secretValue, must.Sprintf("verb %q printed a secret: %q", verb, out))
				must.StrNotContains(t, out, "s3cr3t", must.Sprintf("verb %q printed a mount flag: %q", verb, out))
				must.StrNotContains(t, out, "password=", must.Sprintf("verb %q printed a mount flag: %q", verb, out))
			}
		})
	}

	t.Run("keys and fs type stay visible", func(t *testing.T) {
		must.Eq(t, "map[b=[REDACTED] token=[REDACTED]]", secrets.String())
		must.Eq(t, `fs_type="ext4" mount_flags=[REDACTED]`, opts.String())
		must.Eq(t, opts.String(), fmt.Sprintf("%#v", &opts))
		var nilOpts *CSIMountOptions
		must.Eq(t, "<nil>", fmt.Sprintf("%v", nilOpts))
		must.Eq(t, "map[]", fmt.Sprintf("%v", CSISecrets(nil)))
	})
}

func TestCSIVolume_Stub(t *testing.T) {
	v := testVolume()
	v.CreateIndex, v.ModifyIndex = 3, 9
	mustTake(t, v, testClaim("r1", testHolderN, read, mnr))
	v.AccessMode = CSIVolumeAccessModeUnknown // let a second mode in for the counts
	v.RequestedCapabilities = append(v.RequestedCapabilities, &CSIVolumeCapability{AccessMode: mnmw, AttachmentMode: fs})
	v.ReadClaims["r2"] = testClaim("r2", testHolderN, read, mnmw)
	v.WriteClaims = map[string]*CSIVolumeClaim{"w1": testClaim("w1", testHolderN, write, mnmw)}
	v.PastClaims = map[string]*CSIVolumeClaim{
		"p1": {AllocationID: "p1"}, "p2": {AllocationID: "p2"}, "p3": {AllocationID: "p3"},
	}
	v.AccessMode = mnmw
	v.ControllerRequired, v.ControllersHealthy, v.ControllersExpected = true, 1, 2
	v.NodesHealthy, v.NodesExpected = 4, 5

	s := v.Stub()
	must.Eq(t, &CSIVolListStub{
		ID:                  testVolID,
		Namespace:           testNamespace,
		Name:                "database",
		ExternalID:          "ext-vol-1",
		Topologies:          v.Topologies,
		AccessMode:          mnmw,
		AttachmentMode:      fs,
		CurrentReaders:      2,
		CurrentWriters:      1,
		PastClaims:          3,
		Schedulable:         true,
		PluginID:            testPluginID,
		Provider:            "example.com/csi",
		ControllerRequired:  true,
		ControllersHealthy:  1,
		ControllersExpected: 2,
		NodesHealthy:        4,
		NodesExpected:       5,
		CreateIndex:         3,
		ModifyIndex:         9,
	}, s)
	s.Topologies[0].Segments["zone"] = "changed"
	must.Eq(t, "a", v.Topologies[0].Segments["zone"], must.Sprint("the stub must not share topologies"))

	empty := (&CSIVolume{ID: "x"}).Stub()
	must.Eq(t, 0, empty.CurrentReaders+empty.CurrentWriters+empty.PastClaims)
}

func TestAllocSuffixAndVolumeIDForAlloc(t *testing.T) {
	cases := []struct {
		name      string
		allocName string
		suffix    string
	}{
		{name: "index 0", allocName: "job.group[0]", suffix: "[0]"},
		{name: "index 12", allocName: "job.group[12]", suffix: "[12]"},
		{name: "brackets in the job name", allocName: "job[1].group[3]", suffix: "[3]"},
		{name: "no suffix", allocName: "job.group", suffix: ""},
		{name: "empty name", allocName: "", suffix: ""},
		{name: "unclosed", allocName: "job.group[3", suffix: ""},
		{name: "close only", allocName: "job.group3]", suffix: ""},
		{name: "suffix not at the end", allocName: "job.group[3].x", suffix: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.suffix, AllocSuffix(tc.allocName))
			must.Eq(t, "data"+tc.suffix, VolumeIDForAlloc("data", true, tc.allocName))
			must.Eq(t, "data", VolumeIDForAlloc("data", false, tc.allocName))
		})
	}
}

func TestCSIVolume_RemoteIDAndInUse(t *testing.T) {
	v := &CSIVolume{ID: "vol"}
	must.Eq(t, "vol", v.RemoteID())
	v.ExternalID = "ext"
	must.Eq(t, "ext", v.RemoteID())

	must.False(t, v.InUse())
	v.PastClaims = map[string]*CSIVolumeClaim{}
	must.False(t, v.InUse(), must.Sprint("an empty map is not a claim"))
	v.PastClaims["a"] = &CSIVolumeClaim{AllocationID: "a"}
	must.True(t, v.InUse())
}

func TestCSIVolumeModes(t *testing.T) {
	for _, m := range allAccessModes {
		must.True(t, m.Valid())
	}
	must.False(t, CSIVolumeAccessModeUnknown.Valid())
	must.False(t, CSIVolumeAccessMode("SINGLE_NODE_WRITER").Valid())
	must.Eq(t, []bool{false, true, false, true, true},
		[]bool{snr.IsWriter(), snw.IsWriter(), mnr.IsWriter(), mnsw.IsWriter(), mnmw.IsWriter()})
	must.Eq(t, []bool{true, true, false, false, false},
		[]bool{snr.IsSingleNode(), snw.IsSingleNode(), mnr.IsSingleNode(), mnsw.IsSingleNode(), mnmw.IsSingleNode()})
	must.True(t, fs.Valid())
	must.True(t, block.Valid())
	must.False(t, CSIVolumeAttachmentModeUnknown.Valid())
}

func TestCSITopology(t *testing.T) {
	za := &CSITopology{Segments: map[string]string{"zone": "a", "rack": "1"}}
	must.True(t, za.Contains(&CSITopology{Segments: map[string]string{"zone": "a"}}))
	must.False(t, za.Contains(&CSITopology{Segments: map[string]string{"zone": "b"}}))
	must.False(t, za.Contains(&CSITopology{Segments: map[string]string{"region": "x"}}))
	must.True(t, za.Contains(&CSITopology{}))
	must.False(t, za.Contains(nil))
	must.False(t, (*CSITopology)(nil).Contains(za))

	r1 := &CSITopologyRequest{Required: []*CSITopology{za}}
	r2 := r1.Copy()
	must.True(t, r1.Equal(r2))
	r2.Required[0].Segments["zone"] = "b"
	must.False(t, r1.Equal(r2))
	must.Eq(t, "a", za.Segments["zone"])
	must.True(t, (*CSITopologyRequest)(nil).Equal(nil))
	must.False(t, r1.Equal(nil))
}
