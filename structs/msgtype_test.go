package structs

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestMessageTypes_Named(t *testing.T) {
	types := MessageTypes()
	must.SliceNotEmpty(t, types)
	seen := map[string]MessageType{}
	for _, typ := range types {
		name := typ.String()
		must.StrNotHasPrefix(t, "MessageType(", name, must.Sprintf("message type %d has no name", typ))
		must.MapNotContainsKey(t, seen, name, must.Sprintf("name %q used twice", name))
		seen[name] = typ
		must.Less(t, IgnoreUnknownTypeFlag, typ, must.Sprintf("type %d collides with the ignore flag", typ))
	}
	must.Eq(t, "MessageType(99)", MessageType(99).String())

	// The numbers are append-only: these must never change.
	must.Eq(t, map[string]MessageType{
		"NodeRegister":        0,
		"NodeUpdateStatus":    1,
		"NodeDeregister":      2,
		"CSIVolumeRegister":   3,
		"CSIVolumeDeregister": 4,
		"CSIVolumeClaim":      5,
		"AllocUpsert":         6,
		"JobRegister":         7,
		"JobDeregister":       8,
		"PlanApply":           9,
		"NodeIntroUpsert":     10,
		"NodeIntroDelete":     11,
		"RootKeyUpsert":       12,
		"CSIVolumeReseal":     13,
		"ACLPolicyUpsert":     14,
		"ACLPolicyDelete":     15,
		"ACLTokenUpsert":      16,
		"ACLTokenDelete":      17,
		"ACLTokenBootstrap":   18,
		"NamespaceUpsert":     19,
		"NamespaceDelete":     20,

		"NodeGC":      21,
		"CSIPluginGC": 22,

		"NodeUpdateDrain":          23,
		"NodeUpdateEligibility":    24,
		"AllocDrainStop":           25,
		"CSIVolumeCheckpointBatch": 27,
		"CSIVolumeRegisterBatch":   28,
		"CSIVolumeClaimBatch":      29,
		"NodeRegisterHashed":       30,
	}, seen)
}

func TestSnapshotTypes_Named(t *testing.T) {
	types := SnapshotTypes()
	must.SliceNotEmpty(t, types)
	seen := map[string]SnapshotType{}
	for _, typ := range types {
		name := typ.String()
		must.StrNotHasPrefix(t, "SnapshotType(", name, must.Sprintf("snapshot type %d has no name", typ))
		must.MapNotContainsKey(t, seen, name)
		seen[name] = typ
	}
	must.Eq(t, "SnapshotType(77)", SnapshotType(77).String())
	must.Eq(t, map[string]SnapshotType{
		"Index": 0, "Node": 1, "CSIVolume": 2, "CSIPlugin": 3, "Alloc": 4, "Job": 5, "NodeIntroToken": 6, "RootKey": 7,
		"ACLPolicy": 8, "ACLToken": 9, "Namespace": 10, "NodeHashed": 11,
	}, seen)
}

// roundTrip encodes msg as a log entry of type typ and decodes the body into
// out, checking the type byte.
func roundTrip(t *testing.T, typ MessageType, msg, out any) {
	t.Helper()
	buf, err := Encode(typ, msg)
	must.NoError(t, err)
	must.SliceNotEmpty(t, buf)
	must.Eq(t, byte(typ), buf[0])
	must.NoError(t, Decode(buf[1:], out))
}

func TestEncodeDecode_NodeRegisterRequest(t *testing.T) {
	// A zone other than UTC and a monotonic reading, as time.Now gives.
	updated := time.Now().In(time.FixedZone("east", 5*3600))
	node := testNode()
	node.SecretID = "the-node-secret"
	node.StatusUpdatedAt = 1700000000123456789
	node.CSINodePlugins[testPluginID].UpdateTime = updated
	node.CSIControllerPlugins[testPluginID].UpdateTime = time.Time{}
	req := &NodeRegisterRequest{
		Node:         node,
		WriteRequest: WriteRequest{Region: "global", Namespace: "ns", AuthToken: "tok", InternalRPCInfo: InternalRPCInfo{Forwarded: true}},
	}

	var got NodeRegisterRequest
	roundTrip(t, NodeRegisterRequestType, req, &got)
	must.Eq(t, req, &got)
	must.Eq(t, "the-node-secret", got.Node.SecretID, must.Sprint("json:\"-\" must not drop the secret from the msgpack wire"))
	must.True(t, got.Node.CSINodePlugins[testPluginID].UpdateTime.Equal(updated))
	must.True(t, got.Node.CSIControllerPlugins[testPluginID].UpdateTime.IsZero())
	must.True(t, got.Forwarded)

	// The same node never shows its secret in JSON.
	js, err := json.Marshal(node)
	must.NoError(t, err)
	must.StrNotContains(t, string(js), "the-node-secret")
	must.StrNotContains(t, string(js), "SecretID")
}

func TestEncodeDecode_NodeUpdateStatusRequest(t *testing.T) {
	req := &NodeUpdateStatusRequest{
		NodeID:         "node-1",
		SecretID:       "the-node-secret",
		Status:         NodeStatusReady,
		CSINodePlugins: map[string]*CSIInfo{testPluginID: testNodeInfo(true)},
		UpdatedAt:      42,
	}
	var got NodeUpdateStatusRequest
	roundTrip(t, NodeUpdateStatusRequestType, req, &got)
	must.Eq(t, req, &got)
	must.Eq(t, "the-node-secret", got.SecretID)
	must.True(t, got.CSINodePlugins[testPluginID].UpdateTime.Equal(testNodeInfo(true).UpdateTime))
}

func TestEncodeDecode_CSIVolumeRegisterRequest(t *testing.T) {
	vol := testVolume()
	vol.CreateTime, vol.ModifyTime = 1700000000000000001, 1700000000000000002
	mustTake(t, vol, testClaim(testHolder, testHolderN, write, snw))
	vol.WriteClaims[testHolder].PublishContext = map[string]string{"dev": "/dev/sdb"}
	vol.WriteClaims[testHolder].NextAttempt = 1700000000000000003
	vol.PastClaims = map[string]*CSIVolumeClaim{"p": {AllocationID: "p", State: CSIVolumeClaimStateControllerDetached, Attempts: 3, LastError: "boom"}}
	req := &CSIVolumeRegisterRequest{
		Volumes:      []*CSIVolume{vol, {ID: "vol-2", Namespace: "default", PluginID: "p"}},
		Timestamp:    1700000000999999999,
		WriteRequest: WriteRequest{Region: "global", AuthToken: "tok"},
	}

	var got CSIVolumeRegisterRequest
	roundTrip(t, CSIVolumeRegisterRequestType, req, &got)
	must.Eq(t, req, &got)
	must.Eq(t, CSISecrets{"token": secretValue}, got.Volumes[0].Secrets, must.Sprint("secrets travel to the servers"))
	must.Eq(t, []string{"noatime", mountSecret}, got.Volumes[0].MountOptions.MountFlags)
	must.Eq(t, int64(1700000000999999999), got.Timestamp)
}

func TestEncodeDecode_OtherRequests(t *testing.T) {
	claimReq := &CSIVolumeClaimRequest{
		VolumeID:     testVolID,
		Claim:        testClaim(testClaimer, testClaimerN, read, mnr),
		NodeSecretID: "node-secret",
		Timestamp:    7,
	}
	var gotClaim CSIVolumeClaimRequest
	roundTrip(t, CSIVolumeClaimRequestType, claimReq, &gotClaim)
	must.Eq(t, claimReq, &gotClaim)

	allocReq := &AllocUpdateRequest{Allocs: []*Allocation{{ID: "a", Name: "job.group[2]", ClientStatus: AllocClientStatusRunning}}, Timestamp: 9}
	var gotAlloc AllocUpdateRequest
	roundTrip(t, AllocUpsertRequestType, allocReq, &gotAlloc)
	must.Eq(t, allocReq, &gotAlloc)

	q := &CSIVolumeListRequest{PluginID: "p", QueryOptions: QueryOptions{MinQueryIndex: 5, MaxQueryTime: 90 * time.Second, AllowStale: true}}
	var gotQ CSIVolumeListRequest
	roundTrip(t, 0, q, &gotQ)
	must.Eq(t, q, &gotQ)
}

func TestDecode_WrongType(t *testing.T) {
	nodeReq := &NodeRegisterRequest{Node: testNode()}
	buf, err := Encode(NodeRegisterRequestType, nodeReq)
	must.NoError(t, err)
	body := buf[1:]

	// decode never panics; it returns Decode's error.
	decode := func(b []byte, out any) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return Decode(b, out)
	}

	var nilReq *NodeRegisterRequest
	errCases := []struct {
		name string
		body []byte
		out  any
	}{
		{name: "field of another kind", body: body, out: &RaftServer{}}, // Node: a map, not a string
		{name: "into a slice", body: body, out: &[]string{}},
		{name: "into an int", body: body, out: new(int)},
		{name: "into a struct value", body: body, out: NodeRegisterRequest{}},
		{name: "into nil", body: body, out: nil},
		{name: "into a nil pointer", body: body, out: nilReq},
		{name: "truncated", body: body[:len(body)/2], out: &NodeRegisterRequest{}},
		{name: "empty", body: nil, out: &NodeRegisterRequest{}},
		{name: "garbage", body: []byte{0xc1, 0xff, 0x00}, out: &NodeRegisterRequest{}},
		{name: "type byte left on", body: buf, out: &NodeRegisterRequest{}},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			err := decode(tc.body, tc.out)
			must.Error(t, err)
			must.False(t, strings.HasPrefix(err.Error(), "panic:"), must.Sprintf("decode panicked: %v", err))
		})
	}

	// A body whose fields are all unknown to the target decodes into a zero
	// value without error: unknown fields are ignored, so that an older
	// server can read entries written by a newer one. The FSM must therefore
	// choose the type by the entry's type byte, never by trying types.
	t.Run("disjoint struct decodes to zero value", func(t *testing.T) {
		var got CSIVolumeClaimRequest
		must.NoError(t, decode(body, &got))
		must.Eq(t, CSIVolumeClaimRequest{}, got)
	})
}

func TestMsgpackHandle_CodecTagsOnly(t *testing.T) {
	type tagged struct {
		Secret string `json:"-"`
		Named  string `json:"renamed"`
	}
	buf, err := Encode(0, &tagged{Secret: "s", Named: "n"})
	must.NoError(t, err)
	var got map[string]any
	must.NoError(t, Decode(buf[1:], &got))
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	must.Eq(t, []string{"Named", "Secret"}, keys, must.Sprint("json tags must not shape the msgpack wire"))
}

// Encoders and decoders are pooled: one call's input or output must never
// show through in the next.
func TestEncodeDecode_PooledCodecsKeepNoState(t *testing.T) {
	big := &NodeRegisterRequest{Node: testNode()}
	big.Node.Attributes = map[string]string{"padding": strings.Repeat("x", 2048)}
	bigBuf, err := Encode(NodeRegisterRequestType, big)
	must.NoError(t, err)
	small := &CSIVolumeDeregisterRequest{VolumeIDs: []string{"v1"}}
	for range 10 {
		var got NodeRegisterRequest
		must.NoError(t, Decode(bigBuf[1:], &got))
		must.Eq(t, big.Node.Attributes, got.Node.Attributes)
		must.Error(t, Decode(nil, &NodeRegisterRequest{}), must.Sprint("an empty body after a full one"))

		buf, err := Encode(CSIVolumeDeregisterRequestType, small)
		must.NoError(t, err)
		must.Eq(t, byte(CSIVolumeDeregisterRequestType), buf[0])
		must.Less(t, len(bigBuf)/2, len(buf), must.Sprint("a small entry after a large one"))
		var gotSmall CSIVolumeDeregisterRequest
		must.NoError(t, Decode(buf[1:], &gotSmall))
		must.Eq(t, small, &gotSmall)
	}
}
