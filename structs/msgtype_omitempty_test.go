package structs

import (
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// goldRegister and goldClaim are the requests whose entries, as a build
// before the volume and claim types left their empty fields out encoded
// them, are in testdata/entries-before-omitempty.hex (one entry a line).
func goldRegister() *CSIVolumeRegisterRequest {
	return &CSIVolumeRegisterRequest{
		Volumes: []*CSIVolume{{
			ID: "db[0]", Namespace: "default", Name: "db", PluginID: "ebs", Provider: "ebs.csi", ProviderVersion: "1.2",
			RequestedCapabilities: []*CSIVolumeCapability{
				{AccessMode: CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: CSIVolumeAttachmentModeFilesystem},
			},
			MountOptions:  &CSIMountOptions{FSType: "ext4", SealedFlags: &Sealed{KeyID: "k1", Nonce: []byte{1, 2}, Ciphertext: []byte{3, 4, 5}}},
			SealedSecrets: &Sealed{KeyID: "k1", Nonce: []byte{6}, Ciphertext: []byte{7, 8}},
			Parameters:    map[string]string{"type": "gp3"},
			Capacity:      1 << 30, RequestedCapacityMin: 1 << 30,
			RequestedTopologies: &CSITopologyRequest{Required: []*CSITopology{{Segments: map[string]string{"zone": "a"}}}},
			Topologies:          []*CSITopology{{Segments: map[string]string{"zone": "a"}}},
			WriteClaims: map[string]*CSIVolumeClaim{"a1": {AllocationID: "a1", NodeID: "n1", Mode: CSIVolumeClaimWrite,
				AccessMode: CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: CSIVolumeAttachmentModeFilesystem,
				PublishContext: map[string]string{"dev": "/dev/xvdf"}, State: CSIVolumeClaimStateTaken, ClaimedAt: 7}},
			Schedulable: true, CreateIndex: 10, ModifyIndex: 12, CreateTime: 100, ModifyTime: 120,
		}},
		Timestamp:    99,
		WriteRequest: WriteRequest{Region: "global", Namespace: "default"},
	}
}

func goldClaim() *CSIVolumeClaimRequest {
	return &CSIVolumeClaimRequest{
		VolumeID: "db[0]",
		Claim: &CSIVolumeClaim{AllocationID: "a1", NodeID: "n1", Mode: CSIVolumeClaimWrite,
			AccessMode: CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: CSIVolumeAttachmentModeFilesystem,
			State: CSIVolumeClaimStateTaken},
		Timestamp:    5,
		WriteRequest: WriteRequest{Region: "global", Namespace: "default"},
	}
}

// Volume and claim entries leave their empty fields out, and decode to
// what was encoded; the entries an earlier build wrote, with every field,
// decode to the same requests, so a log or a snapshot written before
// reads back unchanged.
func TestEncode_VolumeAndClaimEntriesOmitEmptyFields(t *testing.T) {
	raw, err := os.ReadFile("testdata/entries-before-omitempty.hex")
	must.NoError(t, err)
	lines := strings.Fields(string(raw))
	must.Len(t, 2, lines)
	for i, tc := range []struct {
		t    MessageType
		want any
		out  func() any
	}{
		{CSIVolumeRegisterRequestType, goldRegister(), func() any { return new(CSIVolumeRegisterRequest) }},
		{CSIVolumeClaimRequestType, goldClaim(), func() any { return new(CSIVolumeClaimRequest) }},
	} {
		old, err := hex.DecodeString(lines[i])
		must.NoError(t, err)
		must.Eq(t, tc.t, MessageType(old[0]))
		fromOld := tc.out()
		must.NoError(t, Decode(old[1:], fromOld))
		must.Eq(t, tc.want, fromOld, must.Sprintf("%s entry of an earlier build", tc.t))

		now, err := Encode(tc.t, tc.want)
		must.NoError(t, err)
		fromNow := tc.out()
		must.NoError(t, Decode(now[1:], fromNow))
		must.Eq(t, tc.want, fromNow)
		must.Less(t, len(old)*2/3, len(now), must.Sprintf("%s entry: %d bytes, %d before", tc.t, len(now), len(old)))
		// Empty fields are not on the wire at all.
		for _, name := range []string{"ExternalID", "CloneID", "ReadClaims", "PastClaims", "LastError", "AuthToken"} {
			must.False(t, bytes.Contains(now, []byte(name)), must.Sprintf("%s entry carries empty %s", tc.t, name))
		}
	}
}

// A value decoded into holds what was sent and nothing it held before,
// even where the sender left an empty field out.
func TestDecode_IntoAUsedValueKeepsNothingOfIt(t *testing.T) {
	b, err := Encode(CSIVolumeClaimRequestType, &CSIVolumeClaimRequest{VolumeID: "v2", Claim: &CSIVolumeClaim{AllocationID: "a2"}})
	must.NoError(t, err)
	used := goldClaim()
	used.Claim.LastError = "stale"
	must.NoError(t, Decode(b[1:], used))
	must.Eq(t, &CSIVolumeClaimRequest{VolumeID: "v2", Claim: &CSIVolumeClaim{AllocationID: "a2"}}, used)
}
