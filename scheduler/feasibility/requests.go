package feasibility

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/volplane/volplane/structs"
)

// Request is one CSI volume request of a task group, resolved for one
// allocation: per_alloc sources become the allocation's own volume.
type Request struct {
	// Alias is the name the group's tasks mount the volume by.
	Alias   string
	Request *structs.VolumeRequest
	// ID is the volume this allocation uses (structs.VolumeIDForAlloc).
	ID string
	// Volume is as the state has it, plugin health derived; nil when it does
	// not exist. Shared with the run's cache: never change it.
	Volume *structs.CSIVolume
}

// ResolveRequests resolves a task group's CSI volume requests for the
// allocation named allocName, in alias order. Requests of other types are
// not the CSI checkers' business and are left out.
func ResolveRequests(ctx *Context, tg *structs.TaskGroup, allocName string) []*Request {
	var out []*Request
	for _, alias := range sortedAliases(tg) {
		req := tg.Volumes[alias]
		if req.Type != structs.VolumeTypeCSI {
			continue
		}
		id := req.VolumeID(allocName)
		out = append(out, &Request{Alias: alias, Request: req, ID: id, Volume: ctx.volume(ctx.job.Namespace, id)})
	}
	return out
}

// Missing lists, sorted and once each, the volumes of requests that do not
// exist. An allocation with any cannot run anywhere until they are
// registered.
func Missing(reqs []*Request) []string {
	var out []string
	for _, r := range reqs {
		if r.Volume == nil && !slices.Contains(out, r.ID) {
			out = append(out, r.ID)
		}
	}
	slices.Sort(out)
	return out
}

// MissingReason is how a missing volume is reported.
func MissingReason(id string) string { return fmt.Sprintf("volume %q does not exist", id) }

func sortedAliases(tg *structs.TaskGroup) []string {
	return slices.Sorted(maps.Keys(tg.Volumes))
}

// pluginsOf lists, sorted, the plugins of the requests' existing volumes.
func pluginsOf(reqs []*Request) []string {
	var out []string
	for _, r := range reqs {
		if r.Volume != nil && !slices.Contains(out, r.Volume.PluginID) {
			out = append(out, r.Volume.PluginID)
		}
	}
	slices.Sort(out)
	return out
}

// formatTopology prints segments sorted, e.g. {rack=r1,zone=a}.
func formatTopology(t *structs.CSITopology) string {
	if t == nil {
		return "{}"
	}
	parts := make([]string, 0, len(t.Segments))
	for _, k := range slices.Sorted(maps.Keys(t.Segments)) {
		parts = append(parts, k+"="+t.Segments[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}
