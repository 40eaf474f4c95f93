package structs

// MaxEntryBatch bounds the requests one batch entry carries, and
// MaxEntryBatchBytes their encoded size: the leader starts a new entry at
// either bound (a request larger than the byte bound goes alone).
const (
	MaxEntryBatch      = 64
	MaxEntryBatchBytes = 256 << 10
)

// batchedTypes maps each batch message type to the type of the requests
// it carries.
var batchedTypes = map[MessageType]MessageType{
	CSIVolumeRegisterBatchRequestType: CSIVolumeRegisterRequestType,
	CSIVolumeClaimBatchRequestType:    CSIVolumeClaimRequestType,
}

// BatchedType returns the message type of the requests that entries of
// batch type t carry, and whether t is a batch type.
func BatchedType(t MessageType) (MessageType, bool) {
	inner, ok := batchedTypes[t]
	return inner, ok
}

// EntryBatchRequest carries the requests of many callers, all of one
// message type, in one Raft entry: the leader's group commit of the writes
// that arrive while an entry is being committed. Each item is the msgpack
// body of a request exactly as its own entry would carry it, so its size
// is known before the entry is made. The FSM applies each request with
// every rule of its own entry, in order, each seeing the ones before it,
// and each all or nothing: a request that is refused changes nothing and
// does not refuse the others. The entry's response is nil when every
// request was applied, else one error (nil where applied) per request, in
// order. The leader writes it; no endpoint takes it from a caller.
type EntryBatchRequest struct {
	Requests [][]byte
}

// Validate checks the shape of a batch: its number of requests. The
// rules of each request are those of its own type.
func (r *EntryBatchRequest) Validate() error {
	if len(r.Requests) == 0 {
		return ErrInvalid("entry batch: no requests")
	}
	if len(r.Requests) > MaxEntryBatch {
		return ErrInvalid("entry batch: %d requests, at most %d", len(r.Requests), MaxEntryBatch)
	}
	return nil
}
