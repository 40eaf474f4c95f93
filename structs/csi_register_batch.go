package structs

// MaxRegisterBatch bounds the register requests one Raft entry carries,
// and MaxRegisterBatchBytes their encoded size: the leader starts a new
// entry at either bound (a request larger than the byte bound goes alone).
const (
	MaxRegisterBatch      = 64
	MaxRegisterBatchBytes = 256 << 10
)

// CSIVolumeRegisterBatchRequest carries the volume registrations of many
// callers in one Raft entry: the leader's group commit of the requests
// that arrive while an entry is being committed. Each item is the msgpack
// body of a CSIVolumeRegisterRequest, exactly as a CSIVolumeRegister entry
// carries it, so its size is known before the entry is made. The FSM
// applies each request with every rule of a single register, in order,
// each seeing the ones before it, and each all or nothing: a request that
// is refused changes nothing and does not refuse the others. The entry's
// response is one error (nil when applied) per request, in order. The
// leader writes it; no endpoint takes it from a caller.
type CSIVolumeRegisterBatchRequest struct {
	Requests [][]byte
}

// Validate checks the shape of a batch: its number of requests. The
// rules of each request are those of a single register.
func (r *CSIVolumeRegisterBatchRequest) Validate() error {
	if len(r.Requests) == 0 {
		return ErrInvalid("register batch: no requests")
	}
	if len(r.Requests) > MaxRegisterBatch {
		return ErrInvalid("register batch: %d requests, at most %d", len(r.Requests), MaxRegisterBatch)
	}
	return nil
}
