package structs

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// MessageType is the first byte of every Raft log entry. It selects the FSM
// applier that decodes the rest of the entry.
//
// The numbers are append-only: a number, once released, is never reused or
// renumbered, because old log entries and snapshots still carry it.
type MessageType uint8

const (
	NodeRegisterRequestType        MessageType = 0
	NodeUpdateStatusRequestType    MessageType = 1
	NodeDeregisterRequestType      MessageType = 2
	CSIVolumeRegisterRequestType   MessageType = 3
	CSIVolumeDeregisterRequestType MessageType = 4
	CSIVolumeClaimRequestType      MessageType = 5
	AllocUpsertRequestType         MessageType = 6
	JobRegisterRequestType         MessageType = 7
	JobDeregisterRequestType       MessageType = 8
	PlanApplyRequestType           MessageType = 9
	NodeIntroUpsertRequestType     MessageType = 10
	NodeIntroDeleteRequestType     MessageType = 11
	RootKeyUpsertRequestType       MessageType = 12
	CSIVolumeResealRequestType     MessageType = 13
	ACLPolicyUpsertRequestType     MessageType = 14
	ACLPolicyDeleteRequestType     MessageType = 15
	ACLTokenUpsertRequestType      MessageType = 16
	ACLTokenDeleteRequestType      MessageType = 17
	ACLTokenBootstrapRequestType   MessageType = 18
	NamespaceUpsertRequestType     MessageType = 19
	NamespaceDeleteRequestType     MessageType = 20

	NodeGCRequestType      MessageType = 21
	CSIPluginGCRequestType MessageType = 22

	NodeUpdateDrainRequestType          MessageType = 23
	NodeUpdateEligibilityRequestType    MessageType = 24
	AllocDrainStopRequestType           MessageType = 25
	CSIVolumeCheckpointBatchRequestType MessageType = 27
	CSIVolumeRegisterBatchRequestType   MessageType = 28
	CSIVolumeClaimBatchRequestType      MessageType = 29
	// NodeRegisterHashedRequestType is a NodeRegisterRequest whose node
	// carries the hash of its secret and not the secret: an older server's
	// FSM, which needs the secret itself, stops on it rather than refuse
	// the registration and diverge.
	NodeRegisterHashedRequestType MessageType = 30
)

// IgnoreUnknownTypeFlag may be set on a message type by a newer server for an
// entry that older servers can safely skip. Without it an unknown type stops
// the FSM, because skipping it would let replicas diverge.
const IgnoreUnknownTypeFlag MessageType = 128

var messageTypeNames = map[MessageType]string{
	NodeRegisterRequestType:        "NodeRegister",
	NodeUpdateStatusRequestType:    "NodeUpdateStatus",
	NodeDeregisterRequestType:      "NodeDeregister",
	CSIVolumeRegisterRequestType:   "CSIVolumeRegister",
	CSIVolumeDeregisterRequestType: "CSIVolumeDeregister",
	CSIVolumeClaimRequestType:      "CSIVolumeClaim",
	AllocUpsertRequestType:         "AllocUpsert",
	JobRegisterRequestType:         "JobRegister",
	JobDeregisterRequestType:       "JobDeregister",
	PlanApplyRequestType:           "PlanApply",
	NodeIntroUpsertRequestType:     "NodeIntroUpsert",
	NodeIntroDeleteRequestType:     "NodeIntroDelete",
	RootKeyUpsertRequestType:       "RootKeyUpsert",
	CSIVolumeResealRequestType:     "CSIVolumeReseal",
	ACLPolicyUpsertRequestType:     "ACLPolicyUpsert",
	ACLPolicyDeleteRequestType:     "ACLPolicyDelete",
	ACLTokenUpsertRequestType:      "ACLTokenUpsert",
	ACLTokenDeleteRequestType:      "ACLTokenDelete",
	ACLTokenBootstrapRequestType:   "ACLTokenBootstrap",
	NamespaceUpsertRequestType:     "NamespaceUpsert",
	NamespaceDeleteRequestType:     "NamespaceDelete",

	NodeGCRequestType:      "NodeGC",
	CSIPluginGCRequestType: "CSIPluginGC",

	NodeUpdateDrainRequestType:          "NodeUpdateDrain",
	NodeUpdateEligibilityRequestType:    "NodeUpdateEligibility",
	AllocDrainStopRequestType:           "AllocDrainStop",
	CSIVolumeCheckpointBatchRequestType: "CSIVolumeCheckpointBatch",
	CSIVolumeRegisterBatchRequestType:   "CSIVolumeRegisterBatch",
	CSIVolumeClaimBatchRequestType:      "CSIVolumeClaimBatch",
	NodeRegisterHashedRequestType:       "NodeRegisterHashed",
}

// MessageTypes returns every defined message type, for tests that check each
// one has an applier.
func MessageTypes() []MessageType {
	out := make([]MessageType, 0, len(messageTypeNames))
	for t := range messageTypeNames {
		out = append(out, t)
	}
	return out
}

// MaxMessageType is the highest message type this build defines, and so
// applies.
func MaxMessageType() MessageType {
	var top MessageType
	for t := range messageTypeNames {
		top = max(top, t)
	}
	return top
}

func (t MessageType) String() string {
	if n, ok := messageTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("MessageType(%d)", uint8(t))
}

// SnapshotType is the first byte of every record in an FSM snapshot.
// Append-only, like MessageType.
type SnapshotType uint8

const (
	IndexSnapshot     SnapshotType = 0
	NodeSnapshot      SnapshotType = 1
	CSIVolumeSnapshot SnapshotType = 2
	CSIPluginSnapshot SnapshotType = 3
	AllocSnapshot     SnapshotType = 4
	JobSnapshot       SnapshotType = 5
	NodeIntroSnapshot SnapshotType = 6
	RootKeySnapshot   SnapshotType = 7
	ACLPolicySnapshot SnapshotType = 8
	ACLTokenSnapshot  SnapshotType = 9
	NamespaceSnapshot SnapshotType = 10
	// NodeHashedSnapshot holds a node whose secret is hashed: an older
	// build, which needs the secret itself, refuses the snapshot instead of
	// restoring nodes without one. NodeSnapshot records, an older build's,
	// are still restored (their secrets hashed).
	NodeHashedSnapshot SnapshotType = 11
)

// RestoreOnlySnapshotTypes are the record types this build restores but no
// longer writes.
func RestoreOnlySnapshotTypes() []SnapshotType { return []SnapshotType{NodeSnapshot} }

var snapshotTypeNames = map[SnapshotType]string{
	IndexSnapshot:     "Index",
	NodeSnapshot:      "Node",
	CSIVolumeSnapshot: "CSIVolume",
	CSIPluginSnapshot: "CSIPlugin",
	AllocSnapshot:     "Alloc",
	JobSnapshot:       "Job",
	NodeIntroSnapshot: "NodeIntroToken",
	RootKeySnapshot:   "RootKey",
	ACLPolicySnapshot: "ACLPolicy",
	ACLTokenSnapshot:  "ACLToken",
	NamespaceSnapshot: "Namespace",

	NodeHashedSnapshot: "NodeHashed",
}

// SnapshotTypes returns every defined snapshot record type.
func SnapshotTypes() []SnapshotType {
	out := make([]SnapshotType, 0, len(snapshotTypeNames))
	for t := range snapshotTypeNames {
		out = append(out, t)
	}
	return out
}

func (t SnapshotType) String() string {
	if n, ok := snapshotTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("SnapshotType(%d)", uint8(t))
}

// MsgpackHandle is the one codec handle used for RPC, Raft entries and
// snapshots, so that every encoder and decoder agrees on the format.
var MsgpackHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.RawToString = true
	h.WriteExt = true
	// Bound the up-front allocation a declared collection length can cause, so
	// a hostile frame claiming a billion elements costs nothing until the
	// elements actually arrive.
	h.MaxInitLen = 4096
	// Only codec tags shape the wire form, so a json:"-" that keeps a secret
	// out of HTTP responses does not also keep it off the RPC wire.
	h.TypeInfos = codec.NewTypeInfos([]string{"codec"})
	return h
}()

// Encoders and decoders are pooled: each holds buffers and type caches worth
// several kilobytes, and every server encodes or decodes every Raft entry.
var (
	encoders = sync.Pool{New: func() any { return &pooledEncoder{enc: codec.NewEncoderBytes(nil, MsgpackHandle)} }}
	decoders = sync.Pool{New: func() any { return codec.NewDecoderBytes(nil, MsgpackHandle) }}
)

// pooledEncoder is an encoder with the scratch buffer it writes into.
type pooledEncoder struct {
	enc *codec.Encoder
	buf []byte
}

// maxPooledEncodeBuf bounds the scratch buffer a pooled encoder keeps, so
// one large snapshot-sized message does not pin its memory in the pool.
const maxPooledEncodeBuf = 64 << 10

// Encode writes a Raft log entry: the message type byte, then the msgpack body.
func Encode(t MessageType, msg any) ([]byte, error) {
	pe := encoders.Get().(*pooledEncoder)
	pe.buf = pe.buf[:0]
	pe.enc.ResetBytes(&pe.buf)
	err := pe.enc.Encode(msg)
	var out []byte
	if err == nil {
		out = make([]byte, 1+len(pe.buf))
		out[0] = uint8(t)
		copy(out[1:], pe.buf)
	}
	if cap(pe.buf) <= maxPooledEncodeBuf {
		encoders.Put(pe)
	}
	return out, err
}

// Decode reads a msgpack body (without the type byte) into out.
func Decode(buf []byte, out any) error {
	if buf == nil {
		buf = []byte{} // ResetBytes(nil) would leave the previous input in place
	}
	ZeroForDecode(out)
	dec := decoders.Get().(*codec.Decoder)
	defer decoders.Put(dec)
	dec.ResetBytes(buf)
	return dec.Decode(out)
}

// ZeroForDecode sets what out points to to its zero value. Types whose
// encoding omits empty fields (a "_struct" field tagged
// codec:",omitempty") decode correctly only into zero values: a field the
// sender left out because it was empty would otherwise keep what the
// value held before. Every decoder of volplane's messages calls it.
func ZeroForDecode(out any) {
	if rv := reflect.ValueOf(out); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
}
