package command

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// The progress output of the commands that wait for the cluster, in the
// shape of Nomad's monitor: a headline per phase, then a line per change,
// each stamped with the time it was seen.
//
//	==> 2026-11-25T10:00:00Z: Monitoring job "web"
//	    2026-11-25T10:00:01Z: Group "app": 2 of 2 placed
//	    2026-11-25T10:00:01Z: Allocation "8c2f1a3e" created: node "5b1d9e07", group "app"
//	    2026-11-25T10:00:02Z: Allocation "8c2f1a3e" volume "data" ("vol[0]"): claiming -> published
//	    2026-11-25T10:00:02Z: Allocation "8c2f1a3e" status changed: "pending" -> "running"
//	==> 2026-11-25T10:00:02Z: Job "web": 2 running

// progress writes the lines of a monitor.
type progress struct {
	m     *Meta
	paint painter
	now   func() time.Time
}

func (p *progress) stamp() string { return p.now().Format(time.RFC3339) }

// headline prints a "==> time: text" line in bold.
func (p *progress) headline(text string) {
	p.m.Ui.Output(p.paint.paint(styleBold, "==> "+p.stamp()+": "+text))
}

// line prints one change, indented under its headline, in style (none
// when "").
func (p *progress) line(style, text string) {
	p.m.Ui.Output("    " + p.stamp() + ": " + p.paint.paint(style, text))
}

// jobMonitor follows a job after `job run` until every allocation it
// wants runs, failed or is blocked. It remembers what it saw, so each
// observation prints only what changed.
type jobMonitor struct {
	// since is the index of the registration: allocations created after
	// it are new.
	since  uint64
	groups map[string]groupSeen
	allocs map[string]*allocSeen
}

type groupSeen struct {
	placed, desired int
	blocked         bool
}

type allocSeen struct {
	status string
	// steps are the volume steps by alias, with the wait when there is one.
	steps map[string]string
}

func newJobMonitor(since uint64) *jobMonitor {
	return &jobMonitor{since: since, groups: map[string]groupSeen{}, allocs: map[string]*allocSeen{}}
}

// change is one line of a monitor, with its style.
type change struct {
	style, text string
}

// observe returns the changes between what was seen and job and allocs.
func (m *jobMonitor) observe(job *structs.Job, allocs []*structs.Allocation) []change {
	var out []change
	for _, tg := range job.TaskGroups {
		p := job.Placement[tg.Name]
		if tg == nil || p == nil {
			continue
		}
		now := groupSeen{placed: p.Placed, desired: p.Desired, blocked: p.Placed < p.Desired}
		if prev, ok := m.groups[tg.Name]; ok && prev == now {
			continue
		}
		m.groups[tg.Name] = now
		text := fmt.Sprintf("Group %q: %d of %d placed", tg.Name, p.Placed, p.Desired)
		style := ""
		if now.blocked {
			text += fmt.Sprintf(", blocked: %s", blockedSummary(p.Blocked))
			style = styleYellow
		}
		out = append(out, change{style, text})
	}
	slices.SortFunc(allocs, func(a, b *structs.Allocation) int { return strings.Compare(a.Name, b.Name) })
	for _, a := range allocs {
		if a == nil {
			continue
		}
		seen := m.allocs[a.ID]
		if seen == nil {
			if a.ServerTerminal() && a.CreateIndex <= m.since {
				// An earlier version's allocation, stopped already.
				continue
			}
			seen = &allocSeen{steps: map[string]string{}}
			m.allocs[a.ID] = seen
			if a.CreateIndex > m.since {
				out = append(out, change{"", fmt.Sprintf("Allocation %q created: node %q, group %q",
					shortID(a.ID, false), shortID(a.NodeID, false), a.TaskGroup)})
			}
			// A new allocation starts pending: how far it got already is
			// news. One known from before: only its changes are.
			seen.status = structs.AllocClientStatusPending
			if a.CreateIndex <= m.since {
				seen.status = a.ClientStatus
				for alias, st := range a.VolumeStates {
					if st != nil {
						seen.steps[alias] = volumeStepText(st)
					}
				}
			}
		}
		for _, alias := range slices.Sorted(maps.Keys(a.VolumeStates)) {
			st := a.VolumeStates[alias]
			if st == nil {
				continue
			}
			text := volumeStepText(st)
			prev, ok := seen.steps[alias]
			if ok && prev == text {
				continue
			}
			seen.steps[alias] = text
			what := fmt.Sprintf("Allocation %q volume %q", shortID(a.ID, false), alias)
			if st.VolumeID != "" && st.VolumeID != alias {
				what += fmt.Sprintf(" (%q)", st.VolumeID)
			}
			style := ""
			switch {
			case st.Step == structs.AllocVolumeStepFailed:
				style = styleRed
			case st.Waiting != "":
				style = styleYellow
			}
			out = append(out, change{style, what + ": " + text})
		}
		if seen.status != a.ClientStatus {
			text := fmt.Sprintf("Allocation %q status changed: %q -> %q", shortID(a.ID, false), seen.status, a.ClientStatus)
			if a.ClientDescription != "" {
				text += " (" + oneLine(a.ClientDescription) + ")"
			}
			seen.status = a.ClientStatus
			out = append(out, change{statusStyle(a.ClientStatus), text})
		}
	}
	return out
}

// volumeStepText says where an allocation's volume is: its step, and what
// it waits for.
func volumeStepText(st *structs.AllocVolumeState) string {
	if st.Waiting == "" {
		return st.Step
	}
	return fmt.Sprintf("%s, waiting (attempt %d): %s", st.Step, st.Attempts, oneLine(st.Waiting))
}

func blockedSummary(reasons []string) string {
	switch len(reasons) {
	case 0:
		return "no reason given"
	case 1:
		return oneLine(reasons[0])
	}
	return fmt.Sprintf("%s (and %s)", oneLine(reasons[0]), plural(len(reasons)-1, "more reason"))
}

func statusStyle(status string) string {
	switch status {
	case structs.AllocClientStatusRunning, structs.AllocClientStatusComplete:
		return styleGreen
	case structs.AllocClientStatusFailed, structs.AllocClientStatusLost:
		return styleRed
	}
	return ""
}

// jobOutcome counts a job's allocations by how they ended up.
type jobOutcome struct {
	running, complete, failed, blocked int
}

func (o jobOutcome) String() string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{o.running, "running"}, {o.complete, "complete"}, {o.failed, "failed"}, {o.blocked, "blocked"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return "no allocations"
	}
	return strings.Join(parts, ", ")
}

// settled reports whether every allocation job wants has run, failed or
// is blocked: the placer placed every group (Placement is reset when the
// job is registered), every allocation it placed is seen, and none is
// still pending on its client (unless one of its volumes failed).
func settled(job *structs.Job, allocs []*structs.Allocation) (jobOutcome, bool) {
	var o jobOutcome
	live := map[string]int{}
	for _, a := range allocs {
		if a == nil || a.ServerTerminal() {
			continue
		}
		live[a.TaskGroup]++
		switch {
		case a.ClientStatus == structs.AllocClientStatusRunning:
			o.running++
		case a.ClientStatus == structs.AllocClientStatusComplete:
			o.complete++
		case a.ClientStatus == structs.AllocClientStatusFailed, a.ClientStatus == structs.AllocClientStatusLost,
			volumeFailed(a):
			o.failed++
		default:
			return o, false
		}
	}
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		p := job.Placement[tg.Name]
		if p == nil || live[tg.Name] < p.Placed {
			return o, false
		}
		o.blocked += max(p.Desired-p.Placed, 0)
	}
	return o, true
}

func volumeFailed(a *structs.Allocation) bool {
	for _, st := range a.VolumeStates {
		if st != nil && st.Step == structs.AllocVolumeStepFailed {
			return true
		}
	}
	return false
}

// monitorJob follows job (registered at index) until it settles, printing
// each change, and returns the exit code: 0 when everything runs (or
// completed), 2 when an allocation failed or is blocked, as Nomad's job
// run, and 1 when following failed.
func (m *Meta) monitorJob(ctx context.Context, client *api.Client, job *structs.Job, index uint64, p *progress) (int, *structs.Job) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.headline(fmt.Sprintf("Monitoring job %q", job.ID))
	type update struct {
		job    *structs.Job
		allocs []*structs.Allocation
		err    error
	}
	updates := make(chan update)
	send := func(u update) bool {
		select {
		case updates <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	// Two blocking queries, each woken by its own table: the job's
	// placement and its allocations.
	go func() {
		idx := index
		for {
			j, qm, err := client.Jobs().Info(job.ID, &api.QueryOptions{Namespace: job.Namespace, WaitIndex: idx, WaitTime: monitorWait, Context: ctx})
			if !send(update{job: j, err: err}) || err != nil {
				return
			}
			idx = max(qm.LastIndex, idx)
		}
	}()
	go func() {
		var idx uint64
		for {
			allocs, qm, err := client.Jobs().Allocations(job.ID, &api.QueryOptions{Namespace: job.Namespace, WaitIndex: idx, WaitTime: monitorWait, Context: ctx})
			if !send(update{allocs: allocs, err: err}) || err != nil {
				return
			}
			idx = max(qm.LastIndex, idx)
		}
	}()
	mon := newJobMonitor(index)
	var cur *structs.Job
	var allocs []*structs.Allocation
	haveAllocs := false
	for {
		var u update
		select {
		case u = <-updates:
		case <-ctx.Done():
			return 1, cur
		}
		if u.err != nil {
			m.Ui.Error(fmt.Sprintf("Error monitoring job %q: %s", job.ID, u.err))
			return 1, cur
		}
		if u.job != nil {
			cur = u.job
		} else {
			allocs, haveAllocs = u.allocs, true
		}
		if cur == nil || !haveAllocs {
			continue
		}
		for _, c := range mon.observe(cur, allocs) {
			p.line(c.style, c.text)
		}
		if o, done := settled(cur, allocs); done {
			style := styleGreen
			code := 0
			if o.failed > 0 || o.blocked > 0 {
				style, code = styleRed, 2
			}
			p.m.Ui.Output(p.paint.paint(styleBold, "==> "+p.stamp()+": ") +
				p.paint.paint(style, fmt.Sprintf("Job %q: %s", job.ID, o)))
			return code, cur
		}
	}
}

// monitorWait is how long each blocking query of a monitor waits before
// it asks again.
const monitorWait = 5 * time.Minute
