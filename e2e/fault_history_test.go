package e2e

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// history records the API clients' operations for the linearizability
// check: each operation's input, output, and the times it was invoked and
// returned (infinite for an unknown outcome: the operation may still take
// effect later).
type history struct {
	mu     sync.Mutex
	start  time.Time
	ops    []porcupine.Operation
	allocs map[string]int // allocation ID → its number in the model
	counts map[string]int // "claim ok", "read ok", ... for the figures
}

func newHistory() *history {
	return &history{start: time.Now(), allocs: map[string]int{}, counts: map[string]int{}}
}

// now is the history's clock: nanoseconds since the run began, monotonic.
func (h *history) now() int64 { return int64(time.Since(h.start)) }

// allocNum numbers an allocation the first time it is seen.
func (h *history) allocNum(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.allocs[id]
	if !ok {
		n = len(h.allocs) + 1
		h.allocs[id] = n
	}
	return n
}

// record adds an operation invoked at call that just returned out.
func (h *history) record(client int, in claimInput, call int64, out claimOutput) {
	ret := h.now()
	if out.Outcome == outUnknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.counts[in.Kind.String()+" "+out.Outcome.String()]++
}

// operations returns a copy of the history so far.
func (h *history) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// figures says how many operations ended how, e.g. "claim ok 120".
func (h *history) figures() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for k, n := range h.counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d operations (%s)", len(h.ops), strings.Join(parts, ", "))
}

// classify turns an RPC's error into the outcome the model judges: what
// the servers refused before writing anything, what cannot have been
// committed at all, and what may or may not have been (or may yet be).
//
// The API volumes' plugin has no controller, so a claim returns right
// after its Raft write: every claim error with a refusal code comes from
// the checks before it, or from the FSM refusing the entry.
func classify(err error) claimOutput {
	if err == nil {
		return claimOutput{Outcome: outOK}
	}
	out := claimOutput{Detail: err.Error()}
	switch {
	case rpc.IsConnError(err):
		out.Outcome = outUnknown
		return out
	}
	switch structs.CodeOf(err) {
	case structs.ErrCodeMaxClaims, structs.ErrCodeConflict, structs.ErrCodeInvalid, structs.ErrCodeNotFound,
		structs.ErrCodePermissionDenied, structs.ErrCodeUnschedulable:
		out.Outcome = outRefused
	case structs.ErrCodeNoLeader, structs.ErrCodeRetryable:
		out.Outcome = outNoEffect
	default:
		out.Outcome = outUnknown
	}
	return out
}

// readOutput is what a read of vol shows, in the model's terms.
func (h *history) readOutput(vol *structs.CSIVolume) claimOutput {
	out := claimOutput{Outcome: outOK}
	if vol == nil {
		// Volumes are never deregistered in the run: the model has no
		// state that shows none, so this is a violation.
		out.Mode = "missing"
		out.Detail = "volume not found"
		return out
	}
	out.Mode = vol.AccessMode
	for _, m := range []map[string]*structs.CSIVolumeClaim{vol.ReadClaims, vol.WriteClaims} {
		for id := range m {
			out.Claims = append(out.Claims, readClaim{
				Alloc: h.allocNum(id),
				Write: vol.WriteClaims[id] != nil,
				Past:  vol.PastClaims[id] != nil,
			})
		}
	}
	for id := range vol.PastClaims {
		if vol.ReadClaims[id] == nil && vol.WriteClaims[id] == nil {
			// A past claim whose live claim is gone: the model has no
			// such state, so the read cannot match it.
			out.Claims = append(out.Claims, readClaim{Alloc: h.allocNum(id), Past: true})
		}
	}
	sort.Slice(out.Claims, func(i, j int) bool { return out.Claims[i].Alloc < out.Claims[j].Alloc })
	var parts []string
	for _, c := range out.Claims {
		parts = append(parts, fmt.Sprintf("%+v", c))
	}
	out.Detail = fmt.Sprintf("index %d: %s", vol.ModifyIndex, strings.Join(parts, " "))
	return out
}
