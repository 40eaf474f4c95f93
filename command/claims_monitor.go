package command

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// claimRef names one allocation's claim on one volume.
type claimRef struct {
	namespace, volumeID, allocID string
}

// claimEvent is a claim event from the stream, decoded.
type claimEvent struct {
	Type  string
	Index uint64
	state.CSIClaimEvent
}

// decodeClaimEvent decodes ev when it is a claim event.
func decodeClaimEvent(ev *api.Event) (*claimEvent, bool) {
	if ev.Topic != state.TopicCSIClaim {
		return nil, false
	}
	out := &claimEvent{Type: ev.Type, Index: ev.Index}
	if err := json.Unmarshal(ev.Payload, &out.CSIClaimEvent); err != nil {
		return nil, false
	}
	return out, true
}

func (e *claimEvent) ref() claimRef {
	return claimRef{namespace: e.Namespace, volumeID: e.VolumeID, allocID: e.AllocationID}
}

// claimEventLine says what a claim event means for its release, with the
// style to print it in.
func claimEventLine(e *claimEvent) change {
	what := fmt.Sprintf("Volume %q, allocation %q", e.VolumeID, shortID(e.AllocationID, false))
	switch e.Type {
	case state.EventClaimTaken:
		return change{"", fmt.Sprintf("%s: claimed (%s) on node %q", what, e.Mode, shortID(e.NodeID, false))}
	case state.EventClaimWaitingForClient:
		return change{styleYellow, what + ": waiting for the client to stop the allocation's tasks"}
	case state.EventClaimReleasing:
		return change{"", what + ": releasing"}
	case state.EventClaimNodeDetached:
		return change{"", fmt.Sprintf("%s: unpublished from node %q", what, shortID(e.NodeID, false))}
	case state.EventClaimNodeDetachSkipped:
		return change{styleYellow, fmt.Sprintf("%s: node step skipped (%s)", what, oneLine(e.Note))}
	case state.EventClaimControllerDetached:
		return change{"", what + ": unpublished by the controller"}
	case state.EventClaimFreed:
		return change{styleGreen, what + ": freed"}
	case state.EventClaimReleaseFailed:
		text := fmt.Sprintf("%s: release failed (attempt %d): %s", what, e.Attempts, oneLine(e.LastError))
		if e.NextAttempt > 0 {
			text += "; next attempt at " + time.Unix(0, e.NextAttempt).Format(time.RFC3339)
		}
		return change{styleRed, text}
	}
	return change{"", fmt.Sprintf("%s: %s (%s)", what, e.Type, e.State)}
}

// openClaimEvents subscribes to claim events after index (0: from now).
func openClaimEvents(ctx context.Context, client *api.Client, index uint64) (*api.EventStream, error) {
	return client.Events().Stream([]string{state.TopicCSIClaim}, index, &api.QueryOptions{Context: ctx})
}

// nextClaimEvents reads the stream in the background and delivers its
// claim events; the channel closes when the stream ends, after the error
// (if any, and unless ctx ended) is put on errc.
func nextClaimEvents(ctx context.Context, stream *api.EventStream) (<-chan *claimEvent, <-chan error) {
	out := make(chan *claimEvent)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			ev, err := stream.Next()
			if err != nil {
				if ctx.Err() == nil {
					errc <- err
				}
				return
			}
			ce, ok := decodeClaimEvent(ev)
			if !ok {
				continue
			}
			select {
			case out <- ce:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc
}

// jobClaims returns the claims the allocations hold on the volumes the
// job's groups request, as the volumes report them now.
func jobClaims(client *api.Client, job *structs.Job, allocs []*structs.Allocation) (map[claimRef]string, error) {
	out := map[claimRef]string{}
	ids := map[string]bool{}
	for _, a := range allocs {
		if a != nil {
			ids[a.ID] = true
		}
	}
	volumes := map[string]bool{}
	for _, a := range allocs {
		if a == nil {
			continue
		}
		tg := job.LookupTaskGroup(a.TaskGroup)
		if tg == nil {
			continue
		}
		for _, req := range tg.Volumes {
			if req != nil && req.Type == "csi" {
				volumes[structs.VolumeIDForAlloc(req.Source, req.PerAlloc, a.Name)] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(volumes)) {
		vol, _, err := client.Volumes().Info(id, &api.QueryOptions{Namespace: job.Namespace})
		if api.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, m := range []map[string]*structs.CSIVolumeClaim{vol.ReadClaims, vol.WriteClaims, vol.PastClaims} {
			for allocID, c := range m {
				if ids[allocID] && c != nil {
					out[claimRef{namespace: vol.Namespace, volumeID: vol.ID, allocID: allocID}] = c.State.String()
				}
			}
		}
	}
	return out, nil
}

// followRelease prints the claim events of the claims in pending until
// each is freed, or ctx ends. It returns false when the stream failed.
func (p *progress) followRelease(ctx context.Context, events <-chan *claimEvent, errc <-chan error, pending map[claimRef]string) bool {
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-events:
			if !ok {
				select {
				case err := <-errc:
					p.m.Ui.Error(fmt.Sprintf("Error following the release: %s", err))
				case <-ctx.Done():
				}
				return false
			}
			ref := ev.ref()
			if _, tracked := pending[ref]; !tracked {
				continue
			}
			c := claimEventLine(ev)
			p.line(c.style, c.text)
			if ev.Type == state.EventClaimFreed {
				delete(pending, ref)
			}
		}
	}
	return true
}

// plural is "1 thing" or "N things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
