package httpapitest

import (
	"net/http"
	"slices"
	"testing"
	"time"

	nomad "github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// nodeDrain drains the fixture's node and ends the drain, and toggles its
// eligibility, with Nomad's client: Nodes().UpdateDrainOpts and
// ToggleEligibility. The node runs nothing, so a real cluster's drainer may
// finish the drain at once: either the drain is on, or it completed.
// The node is left eligible.
func (c *compat) nodeDrain(t *testing.T) {
	id := c.fx.Node.ID
	nodes := c.client.Nodes()
	resp, err := nodes.UpdateDrainOpts(id, &nomad.DrainOptions{
		DrainSpec: &nomad.DrainSpec{Deadline: time.Hour, IgnoreSystemJobs: true},
		Meta:      map[string]string{"message": "compat drain"},
	}, nil)
	must.NoError(t, err)
	must.Positive(t, resp.NodeModifyIndex)
	must.Positive(t, resp.LastIndex)

	node, _, err := nodes.Info(id, nil)
	must.NoError(t, err)
	must.Eq(t, nomad.NodeSchedulingIneligible, node.SchedulingEligibility)
	must.NotNil(t, node.LastDrain)
	must.False(t, node.LastDrain.StartedAt.IsZero())
	must.Eq(t, map[string]string{"message": "compat drain"}, node.LastDrain.Meta)
	if node.DrainStrategy != nil {
		must.Eq(t, nomad.DrainStatus("draining"), node.LastDrain.Status)
		must.Eq(t, time.Hour, node.DrainStrategy.Deadline)
		must.True(t, node.DrainStrategy.IgnoreSystemJobs)
		must.Eq(t, node.DrainStrategy.StartedAt.Add(time.Hour), node.DrainStrategy.ForceDeadline)

		// A draining node cannot be made eligible. The drainer may complete
		// the drain between the read above and the toggle; then the toggle
		// is allowed, and the node says the drain is complete.
		_, err = nodes.ToggleEligibility(id, true, nil)
		if err != nil {
			mustStatus(t, http.StatusConflict, err)
		} else {
			node, _, err = nodes.Info(id, nil)
			must.NoError(t, err)
			must.Nil(t, node.DrainStrategy, must.Sprint("made eligible only once the drain completed"))
			must.Eq(t, nomad.DrainStatus("complete"), node.LastDrain.Status)
			must.Eq(t, nomad.NodeSchedulingEligible, node.SchedulingEligibility)
		}
	} else {
		must.Eq(t, nomad.DrainStatus("complete"), node.LastDrain.Status)
	}
	stubs, _, err := nodes.List(nil)
	must.NoError(t, err)
	i := slices.IndexFunc(stubs, func(s *nomad.NodeListStub) bool { return s.ID == id })
	must.NonNegative(t, i)
	// The list is read after the node: a drain on then may have completed
	// since, but not the other way round.
	must.True(t, node.DrainStrategy != nil || !stubs[i].Drain)
	must.Eq(t, node.SchedulingEligibility, stubs[i].SchedulingEligibility)

	// Ending the drain with MarkEligible makes the node eligible.
	_, err = nodes.UpdateDrainOpts(id, &nomad.DrainOptions{MarkEligible: true}, nil)
	must.NoError(t, err)
	node, _, err = nodes.Info(id, nil)
	must.NoError(t, err)
	must.Nil(t, node.DrainStrategy)
	must.Eq(t, nomad.NodeSchedulingEligible, node.SchedulingEligibility)

	er, err := nodes.ToggleEligibility(id, false, nil)
	must.NoError(t, err)
	must.Positive(t, er.NodeModifyIndex)
	node, _, err = nodes.Info(id, nil)
	must.NoError(t, err)
	must.Eq(t, nomad.NodeSchedulingIneligible, node.SchedulingEligibility)
	_, err = nodes.ToggleEligibility(id, true, nil)
	must.NoError(t, err)
	node, _, err = nodes.Info(id, nil)
	must.NoError(t, err)
	must.Eq(t, nomad.NodeSchedulingEligible, node.SchedulingEligibility)

	_, err = nodes.ToggleEligibility("nomad-compat-node-missing", false, nil)
	mustStatus(t, http.StatusNotFound, err)
	_, err = nodes.UpdateDrainOpts("nomad-compat-node-missing", &nomad.DrainOptions{DrainSpec: &nomad.DrainSpec{}}, nil)
	mustStatus(t, http.StatusNotFound, err)
}
