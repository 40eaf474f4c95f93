package allocrunner

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// reportBatch bounds the allocations one Node.UpdateAlloc carries.
const reportBatch = 64

// allocReporter sends what the allocation runners report to the servers
// with Node.UpdateAlloc. Only the latest update of each allocation is kept,
// so a server that is away for a while gets one update per allocation when
// it is back, and nothing is lost: an update stays pending until a server
// accepted it.
type allocReporter struct {
	cfg    *Config
	logger hclog.Logger
	// acked is told of every update a server accepted; gone is set when the
	// servers no longer know the allocation.
	acked func(u *structs.AllocClientUpdate, gone bool)

	mu      sync.Mutex
	pending map[string]*pendingUpdate
	seq     uint64
	wake    chan struct{}
}

type pendingUpdate struct {
	u   *structs.AllocClientUpdate
	seq uint64
}

func newAllocReporter(cfg *Config, logger hclog.Logger, acked func(*structs.AllocClientUpdate, bool)) *allocReporter {
	return &allocReporter{
		cfg: cfg, logger: logger, acked: acked,
		pending: map[string]*pendingUpdate{}, wake: make(chan struct{}, 1),
	}
}

// update queues an allocation's latest state for the servers.
func (r *allocReporter) update(u *structs.AllocClientUpdate) {
	r.mu.Lock()
	r.seq++
	r.pending[u.ID] = &pendingUpdate{u: u, seq: r.seq}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take returns up to reportBatch pending updates, oldest first.
func (r *allocReporter) take() []*pendingUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Collect(maps.Values(r.pending))
	slices.SortFunc(out, func(a, b *pendingUpdate) int { return cmp.Compare(a.seq, b.seq) })
	if len(out) > reportBatch {
		out = out[:reportBatch]
	}
	return out
}

// done drops the updates a server accepted, unless a newer one replaced
// them meanwhile, and tells the runners.
func (r *allocReporter) done(batch []*pendingUpdate, gone bool) {
	r.mu.Lock()
	for _, p := range batch {
		if cur := r.pending[p.u.ID]; cur != nil && cur.seq == p.seq {
			delete(r.pending, p.u.ID)
		}
	}
	r.mu.Unlock()
	for _, p := range batch {
		r.acked(p.u, gone)
	}
}

// run sends updates until ctx ends. It starts once the node is registered:
// the servers authenticate the updates by the node's secret.
func (r *allocReporter) run(ctx context.Context) {
	select {
	case <-r.cfg.Registered:
	case <-ctx.Done():
		return
	}
	retry := r.cfg.ServerRetryMin
	var lastErr string
	for {
		batch := r.take()
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		err := r.send(batch)
		switch {
		case err == nil:
			r.done(batch, false)
			retry, lastErr = r.cfg.ServerRetryMin, ""
			continue
		case ctx.Err() != nil:
			return
		case updateRefused(err):
			// One of the allocations is unknown or the update invalid:
			// send them one by one, so the others get through.
			if r.sendEach(batch) {
				retry, lastErr = r.cfg.ServerRetryMin, ""
				continue
			}
		default:
			if err.Error() != lastErr {
				r.logger.Warn("reporting allocation status failed; retrying", "allocs", len(batch), "error", err)
				lastErr = err.Error()
			} else {
				r.logger.Debug("reporting allocation status failed again", "error", err)
			}
		}
		if !pause(ctx, retry) {
			return
		}
		retry = min(retry*2, r.cfg.ServerRetryMax)
	}
}

// sendEach sends the updates one at a time, dropping those the servers
// refuse for good; it reports whether every one was settled.
func (r *allocReporter) sendEach(batch []*pendingUpdate) bool {
	for _, p := range batch {
		err := r.send([]*pendingUpdate{p})
		switch {
		case err == nil:
			r.done([]*pendingUpdate{p}, false)
		case updateRefused(err):
			r.logger.Warn("servers refused an allocation's status; dropping it", "alloc_id", p.u.ID,
				"status", p.u.ClientStatus, "error", err)
			r.done([]*pendingUpdate{p}, structs.CodeOf(err) == structs.ErrCodeNotFound)
		default:
			return false
		}
	}
	return true
}

func (r *allocReporter) send(batch []*pendingUpdate) error {
	args := &structs.NodeUpdateAllocRequest{NodeID: r.cfg.NodeID, SecretID: r.cfg.SecretID}
	for _, p := range batch {
		args.Allocs = append(args.Allocs, p.u)
	}
	var reply structs.GenericResponse
	return r.cfg.Servers.NodeUpdateAlloc(args, &reply)
}

// updateRefused reports whether the servers refused an update for what it
// says, so that sending it again cannot help.
func updateRefused(err error) bool {
	if rpc.IsConnError(err) {
		return false
	}
	switch structs.CodeOf(err) {
	case structs.ErrCodeNotFound, structs.ErrCodeInvalid:
		return true
	}
	return false
}
