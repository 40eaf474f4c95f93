package fsm

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

var drainT0 = time.Unix(1700000000, 0).UTC()

func drainReq(nodeID string, spec *structs.DrainSpec) *structs.NodeUpdateDrainRequest {
	req := &structs.NodeUpdateDrainRequest{NodeID: nodeID, UpdatedAt: drainT0, Status: structs.DrainStatusCanceled,
		AccessorID: "op-1", Meta: map[string]string{"message": "kernel upgrade"}}
	if spec != nil {
		req.DrainStrategy = &structs.DrainStrategy{DrainSpec: *spec, StartedAt: drainT0}
		if spec.Deadline > 0 {
			req.DrainStrategy.ForceDeadline = drainT0.Add(spec.Deadline)
		}
		req.Status = structs.DrainStatusDraining
	}
	return req
}

// TestFSM_NodeDrain_Table applies drain, eligibility and drain-stop
// entries to a state with nodes n1 and n2 (a1 running on n1) and checks
// the result or the refusal; a refused entry changes nothing.
func TestFSM_NodeDrain_Table(t *testing.T) {
	type entry struct {
		mt  structs.MessageType
		req any
	}
	drainN1 := entry{structs.NodeUpdateDrainRequestType, drainReq("n1", &structs.DrainSpec{Deadline: time.Hour})}
	cases := map[string]struct {
		before []entry
		apply  entry
		code   structs.ErrorCode // "" when the entry applies
		check  func(t *testing.T, st *state.StateStore)
	}{
		"drain starts: strategy, ineligible, last drain draining": {
			apply: drainN1,
			check: func(t *testing.T, st *state.StateStore) {
				n, _ := st.NodeByID(nil, "n1")
				must.NotNil(t, n.DrainStrategy)
				must.Eq(t, drainT0.Add(time.Hour), n.DrainStrategy.ForceDeadline)
				must.Eq(t, structs.NodeSchedulingIneligible, n.SchedulingEligibility)
				must.Eq(t, &structs.DrainMetadata{StartedAt: drainT0, UpdatedAt: drainT0, Status: structs.DrainStatusDraining,
					AccessorID: "op-1", Meta: map[string]string{"message": "kernel upgrade"}}, n.LastDrain)
			},
		},
		"drain of an unknown node": {
			apply: entry{structs.NodeUpdateDrainRequestType, drainReq("nope", &structs.DrainSpec{})},
			code:  structs.ErrCodeNotFound,
		},
		"drain strategy with a terminal status": {
			apply: entry{structs.NodeUpdateDrainRequestType, func() *structs.NodeUpdateDrainRequest {
				r := drainReq("n1", &structs.DrainSpec{})
				r.Status = structs.DrainStatusComplete
				return r
			}()},
			code: structs.ErrCodeInvalid,
		},
		"drain without the leader's time": {
			apply: entry{structs.NodeUpdateDrainRequestType, func() *structs.NodeUpdateDrainRequest {
				r := drainReq("n1", &structs.DrainSpec{})
				r.UpdatedAt = time.Time{}
				return r
			}()},
			code: structs.ErrCodeInvalid,
		},
		"cancel keeps the node ineligible without MarkEligible": {
			before: []entry{drainN1},
			apply:  entry{structs.NodeUpdateDrainRequestType, drainReq("n1", nil)},
			check: func(t *testing.T, st *state.StateStore) {
				n, _ := st.NodeByID(nil, "n1")
				must.Nil(t, n.DrainStrategy)
				must.Eq(t, structs.NodeSchedulingIneligible, n.SchedulingEligibility)
				must.Eq(t, structs.DrainStatusCanceled, n.LastDrain.Status)
				must.Eq(t, drainT0, n.LastDrain.StartedAt)
			},
		},
		"cancel with MarkEligible": {
			before: []entry{drainN1},
			apply: entry{structs.NodeUpdateDrainRequestType, func() *structs.NodeUpdateDrainRequest {
				r := drainReq("n1", nil)
				r.MarkEligible = true
				return r
			}()},
			check: func(t *testing.T, st *state.StateStore) {
				n, _ := st.NodeByID(nil, "n1")
				must.Eq(t, structs.NodeSchedulingEligible, n.SchedulingEligibility)
			},
		},
		"eligibility off and on": {
			before: []entry{{structs.NodeUpdateEligibilityRequestType, &structs.NodeUpdateEligibilityRequest{
				NodeID: "n2", Eligibility: structs.NodeSchedulingIneligible, UpdatedAt: drainT0}}},
			apply: entry{structs.NodeUpdateEligibilityRequestType, &structs.NodeUpdateEligibilityRequest{
				NodeID: "n2", Eligibility: structs.NodeSchedulingEligible, UpdatedAt: drainT0}},
			check: func(t *testing.T, st *state.StateStore) {
				n, _ := st.NodeByID(nil, "n2")
				must.Eq(t, structs.NodeSchedulingEligible, n.SchedulingEligibility)
			},
		},
		"eligibility of an unknown node": {
			apply: entry{structs.NodeUpdateEligibilityRequestType, &structs.NodeUpdateEligibilityRequest{
				NodeID: "nope", Eligibility: structs.NodeSchedulingIneligible, UpdatedAt: drainT0}},
			code: structs.ErrCodeNotFound,
		},
		"unknown eligibility": {
			apply: entry{structs.NodeUpdateEligibilityRequestType, &structs.NodeUpdateEligibilityRequest{
				NodeID: "n1", Eligibility: "maybe", UpdatedAt: drainT0}},
			code: structs.ErrCodeInvalid,
		},
		"eligible while draining": {
			before: []entry{drainN1},
			apply: entry{structs.NodeUpdateEligibilityRequestType, &structs.NodeUpdateEligibilityRequest{
				NodeID: "n1", Eligibility: structs.NodeSchedulingEligible, UpdatedAt: drainT0}},
			code: structs.ErrCodeConflict,
		},
		"re-registration keeps drain and eligibility": {
			before: []entry{drainN1},
			apply:  entry{structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")}},
			check: func(t *testing.T, st *state.StateStore) {
				n, _ := st.NodeByID(nil, "n1")
				must.NotNil(t, n.DrainStrategy)
				must.Eq(t, structs.NodeSchedulingIneligible, n.SchedulingEligibility)
				must.Eq(t, structs.DrainStatusDraining, n.LastDrain.Status)
			},
		},
		"drain stop of a running allocation": {
			before: []entry{drainN1},
			apply: entry{structs.AllocDrainStopRequestType, &structs.AllocDrainStopRequest{
				NodeID: "n1", AllocIDs: []string{"a1"}, Description: structs.AllocDrainDescription, Timestamp: 77}},
			check: func(t *testing.T, st *state.StateStore) {
				a, _ := st.AllocByID(nil, "a1")
				must.Eq(t, structs.AllocDesiredStatusStop, a.DesiredStatus)
				must.Eq(t, structs.AllocDrainDescription, a.DesiredDescription)
				must.Eq(t, int64(77), a.ModifyTime)
				must.Eq(t, structs.AllocClientStatusRunning, a.ClientStatus)
			},
		},
		"drain stop on a node that is not draining": {
			apply: entry{structs.AllocDrainStopRequestType, &structs.AllocDrainStopRequest{
				NodeID: "n1", AllocIDs: []string{"a1"}, Timestamp: 77}},
			code: structs.ErrCodeConflict,
		},
		"drain stop of an allocation on another node": {
			before: []entry{{structs.NodeUpdateDrainRequestType, drainReq("n2", &structs.DrainSpec{})}},
			apply: entry{structs.AllocDrainStopRequestType, &structs.AllocDrainStopRequest{
				NodeID: "n2", AllocIDs: []string{"a1"}, Timestamp: 77}},
			code: structs.ErrCodeInvalid,
		},
		"drain stop of an unknown allocation": {
			before: []entry{drainN1},
			apply: entry{structs.AllocDrainStopRequestType, &structs.AllocDrainStopRequest{
				NodeID: "n1", AllocIDs: []string{"a1", "nope"}, Timestamp: 77}},
			code: structs.ErrCodeNotFound,
		},
		"drain stop of an unknown node": {
			apply: entry{structs.AllocDrainStopRequestType, &structs.AllocDrainStopRequest{
				NodeID: "nope", AllocIDs: []string{"a1"}, Timestamp: 77}},
			code: structs.ErrCodeNotFound,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := testFSM(t)
			mustApply(t, f, 1, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")})
			mustApply(t, f, 2, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n2", "p")})
			index := placeRunning(t, f, 3, volumeJob(ns, "web"), "a1", "n1")
			for _, e := range tc.before {
				mustApply(t, f, index, e.mt, e.req)
				index++
			}
			before := dump(t, f.State())
			resp := apply(t, f, index, tc.apply.mt, tc.apply.req)
			if tc.code != "" {
				mustRespCode(t, resp, tc.code)
				must.Eq(t, before, dump(t, f.State()), must.Sprint("a refused entry changed the state"))
				return
			}
			must.Nil(t, resp, must.Sprintf("%v", resp))
			if tc.check != nil {
				tc.check(t, f.State())
			}
		})
	}
}

// TestFSM_NodeDrain_Snapshot: a draining node's strategy, eligibility and
// last drain, and an ineligible node, come back whole from a snapshot.
func TestFSM_NodeDrain_Snapshot(t *testing.T) {
	src := testFSM(t)
	mustApply(t, src, 1, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")})
	mustApply(t, src, 2, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n2", "p")})
	mustApply(t, src, 3, structs.NodeUpdateDrainRequestType, drainReq("n1", &structs.DrainSpec{Deadline: time.Hour, IgnoreSystemJobs: true}))
	mustApply(t, src, 4, structs.NodeUpdateEligibilityRequestType, &structs.NodeUpdateEligibilityRequest{
		NodeID: "n2", Eligibility: structs.NodeSchedulingIneligible, UpdatedAt: drainT0})

	dst := testFSM(t)
	must.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(persist(t, src)))))
	must.Eq(t, dump(t, src.State()), dump(t, dst.State()))
	n1, err := dst.State().NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, &structs.DrainStrategy{DrainSpec: structs.DrainSpec{Deadline: time.Hour, IgnoreSystemJobs: true},
		StartedAt: drainT0, ForceDeadline: drainT0.Add(time.Hour)}, n1.DrainStrategy)
	must.Eq(t, structs.DrainStatusDraining, n1.LastDrain.Status)
	must.Eq(t, map[string]string{"message": "kernel upgrade"}, n1.LastDrain.Meta)
	n2, err := dst.State().NodeByID(nil, "n2")
	must.NoError(t, err)
	must.Eq(t, structs.NodeSchedulingIneligible, n2.SchedulingEligibility)
	must.Nil(t, n2.DrainStrategy)
}
