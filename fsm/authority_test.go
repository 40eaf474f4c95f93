package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// authorityFSM builds, through Apply as the leader would write it, an FSM
// where nodes n1 and n2 run plugin p, "vol" and "vol2" are volumes of it,
// jobs web1, web2 and web3 each ask for both and have allocations a1 (on
// n1), a2 (on n2) and a3 (on n1) running, and a1 holds a write claim on
// "vol". It returns the next free index.
func authorityFSM(t *testing.T) (*FSM, uint64) {
	t.Helper()
	f := testFSM(t)
	mustApply(t, f, 10, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")})
	mustApply(t, f, 11, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n2", "p")})
	mustApply(t, f, 12, structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
		Volumes: []*structs.CSIVolume{testVolume(ns, "vol", "p"), testVolume(ns, "vol2", "p")}, Timestamp: 12})
	next := uint64(13)
	for _, a := range [][3]string{{"web1", "a1", "n1"}, {"web2", "a2", "n2"}, {"web3", "a3", "n1"}} {
		next = placeRunning(t, f, next, volumeJob(ns, a[0], "vol", "vol2"), a[1], a[2])
	}
	mustApply(t, f, next, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "vol", Claim: claim("a1", "n1", structs.CSIVolumeClaimWrite), Timestamp: int64(next)})
	return f, next + 1
}

// entry is one log entry for the table below.
type entry struct {
	mt  structs.MessageType
	req any
}

func checkpointOf(c *structs.CSIVolumeClaim, st structs.CSIVolumeClaimState) *structs.CSIVolumeClaim {
	c.State = st
	return c
}

// refusedEntries are log entries that no leader check stood in front of,
// each breaking one rule, with the code of the refusal. Several are
// malformed in ways msgpack decodes happily (nil elements, empty requests):
// the FSM must refuse them, not panic.
func refusedEntries() map[string]struct {
	e    entry
	code structs.ErrorCode
} {
	vol := func(edit func(v *structs.CSIVolume)) *structs.CSIVolumeRegisterRequest {
		v := testVolume(ns, "vol", "p")
		edit(v)
		return &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{v}, Timestamp: 99}
	}
	claimReq := func(volID string, c *structs.CSIVolumeClaim) *structs.CSIVolumeClaimRequest {
		return &structs.CSIVolumeClaimRequest{VolumeID: volID, Claim: c, Timestamp: 99}
	}
	report := func(edit func(a *structs.Allocation)) *structs.AllocUpdateRequest {
		a := running(volumeJob(ns, "web3", "vol", "vol2"), "a3", "n1")
		edit(a)
		return &structs.AllocUpdateRequest{Allocs: []*structs.Allocation{a}, Timestamp: 99}
	}
	web1 := volumeJob(ns, "web1", "vol", "vol2")
	plan := func(allocs ...*structs.Allocation) *structs.PlanApplyRequest {
		// web1 was registered at index 13 (authorityFSM).
		return &structs.PlanApplyRequest{Namespace: ns, JobID: "web1", JobModifyIndex: 13, Allocs: allocs, Timestamp: 99}
	}
	badJob := volumeJob(ns, "web9", "vol")
	badJob.TaskGroups[0].Count = 2 // two writers of a single-writer volume
	secretless := testNode("n1", "p")
	secretless.SecretID = "another"
	hashed := func(mend func(n *structs.Node)) *structs.NodeRegisterRequest {
		n := testNode("n1", "p")
		n.HashSecret()
		mend(n)
		return &structs.NodeRegisterRequest{Node: n}
	}
	type want = struct {
		e    entry
		code structs.ErrorCode
	}
	return map[string]want{
		"volume update drops the capability in use": {entry{structs.CSIVolumeRegisterRequestType,
			vol(func(v *structs.CSIVolume) { v.RequestedCapabilities = v.RequestedCapabilities[1:] })}, structs.ErrCodeConflict},
		"volume update changes mount options in use": {entry{structs.CSIVolumeRegisterRequestType,
			vol(func(v *structs.CSIVolume) { v.MountOptions = &structs.CSIMountOptions{FSType: "xfs"} })}, structs.ErrCodeConflict},
		"volume update changes the external ID": {entry{structs.CSIVolumeRegisterRequestType,
			vol(func(v *structs.CSIVolume) { v.ExternalID = "other" })}, structs.ErrCodeInvalid},
		"volume register with an empty volume": {entry{structs.CSIVolumeRegisterRequestType,
			&structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{nil}}}, structs.ErrCodeInvalid},
		"volume deregister in use": {entry{structs.CSIVolumeDeregisterRequestType,
			&structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{"vol2", "vol"}}}, structs.ErrCodeConflict},
		"volume deregister of nothing": {entry{structs.CSIVolumeDeregisterRequestType,
			&structs.CSIVolumeDeregisterRequest{}}, structs.ErrCodeInvalid},
		"second writer": {entry{structs.CSIVolumeClaimRequestType,
			claimReq("vol", claim("a2", "n2", structs.CSIVolumeClaimWrite))}, structs.ErrCodeMaxClaims},
		"claim for another node than its allocation's": {entry{structs.CSIVolumeClaimRequestType,
			claimReq("vol2", claim("a2", "n1", structs.CSIVolumeClaimWrite))}, structs.ErrCodePermissionDenied},
		"claim without a claim": {entry{structs.CSIVolumeClaimRequestType,
			claimReq("vol2", nil)}, structs.ErrCodeInvalid},
		"release skipping the node step": {entry{structs.CSIVolumeClaimRequestType,
			claimReq("vol", checkpointOf(claim("a1", "n1", structs.CSIVolumeClaimWrite), structs.CSIVolumeClaimStateControllerDetached))},
			structs.ErrCodeConflict},
		"release of a claim nobody holds": {entry{structs.CSIVolumeClaimRequestType,
			claimReq("vol", checkpointOf(claim("a2", "n2", structs.CSIVolumeClaimWrite), structs.CSIVolumeClaimStateUnpublishing))},
			structs.ErrCodeNotFound},
		"client reports lost": {entry{structs.AllocUpsertRequestType,
			report(func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusLost })}, structs.ErrCodeInvalid},
		"client report moves the allocation": {entry{structs.AllocUpsertRequestType,
			report(func(a *structs.Allocation) { a.NodeID = "n2" })}, structs.ErrCodeInvalid},
		"client report of an unknown allocation": {entry{structs.AllocUpsertRequestType,
			report(func(a *structs.Allocation) { a.ID = "ghost" })}, structs.ErrCodeNotFound},
		"client report with an empty volume state": {entry{structs.AllocUpsertRequestType,
			report(func(a *structs.Allocation) { a.VolumeStates = map[string]*structs.AllocVolumeState{"w-vol": nil} })},
			structs.ErrCodeInvalid},
		"client report with an empty allocation": {entry{structs.AllocUpsertRequestType,
			&structs.AllocUpdateRequest{Allocs: []*structs.Allocation{nil}}}, structs.ErrCodeInvalid},
		"plan places a second allocation in a live slot": {entry{structs.PlanApplyRequestType,
			plan(newAlloc(web1, "a9", "n2"))}, structs.ErrCodeConflict},
		"plan places an allocation on an unknown node": {entry{structs.PlanApplyRequestType,
			plan(func() *structs.Allocation {
				a := newAlloc(web1, "a9", "n9")
				a.Name = structs.AllocName("web1", "app", 0)
				return a
			}())}, structs.ErrCodeConflict},
		"plan with an empty allocation": {entry{structs.PlanApplyRequestType, plan(nil)}, structs.ErrCodeInvalid},
		"plan with an empty placement": {entry{structs.PlanApplyRequestType, func() *structs.PlanApplyRequest {
			p := plan()
			p.Placement = map[string]*structs.GroupPlacement{"app": nil}
			return p
		}()}, structs.ErrCodeInvalid},
		"plan for no job": {entry{structs.PlanApplyRequestType, &structs.PlanApplyRequest{}}, structs.ErrCodeConflict},
		"job that fails validation": {entry{structs.JobRegisterRequestType,
			&structs.JobRegisterRequest{Job: badJob}}, structs.ErrCodeInvalid},
		"job register without a job": {entry{structs.JobRegisterRequestType,
			&structs.JobRegisterRequest{}}, structs.ErrCodeInvalid},
		"job deregister of an unknown job": {entry{structs.JobDeregisterRequestType,
			&structs.JobDeregisterRequest{JobID: "nope"}}, structs.ErrCodeNotFound},
		"node re-registered with another secret": {entry{structs.NodeRegisterRequestType,
			&structs.NodeRegisterRequest{Node: secretless}}, structs.ErrCodePermissionDenied},
		"node register without a node": {entry{structs.NodeRegisterRequestType,
			&structs.NodeRegisterRequest{}}, structs.ErrCodeInvalid},
		"hashed node register with another secret's hash": {entry{structs.NodeRegisterHashedRequestType,
			hashed(func(n *structs.Node) { n.SecretHash = structs.HashACLSecret("another") })}, structs.ErrCodePermissionDenied},
		"hashed node register carrying the secret": {entry{structs.NodeRegisterHashedRequestType,
			hashed(func(n *structs.Node) { n.SecretID = "s-n1" })}, structs.ErrCodeInvalid},
		"hashed node register without a hash": {entry{structs.NodeRegisterHashedRequestType,
			hashed(func(n *structs.Node) { n.SecretHash = nil })}, structs.ErrCodeInvalid},
		"hashed node register with a short hash": {entry{structs.NodeRegisterHashedRequestType,
			hashed(func(n *structs.Node) { n.SecretHash = n.SecretHash[:5] })}, structs.ErrCodeInvalid},
		"node status nobody knows": {entry{structs.NodeUpdateStatusRequestType,
			&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: "sleepy"}}, structs.ErrCodeInvalid},
		"heartbeat with an empty fingerprint": {entry{structs.NodeUpdateStatusRequestType,
			&structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady,
				CSINodePlugins: map[string]*structs.CSIInfo{"p": nil}}}, structs.ErrCodeInvalid},
		"node deregister of an unknown node": {entry{structs.NodeDeregisterRequestType,
			&structs.NodeDeregisterRequest{NodeIDs: []string{"n1", "nope"}}}, structs.ErrCodeNotFound},
		"policy that does not parse": {entry{structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{
			Policies: []*structs.ACLPolicy{{Name: "p", Rules: `namespace "default" { policy = "admin" }`}}}}, structs.ErrCodeInvalid},
		"policy upsert with an empty policy": {entry{structs.ACLPolicyUpsertRequestType,
			&structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{nil}}}, structs.ErrCodeInvalid},
		"token with its secret": {entry{structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{
			Tokens: []*structs.ACLToken{{AccessorID: "t", SecretID: "s", Type: structs.ACLManagementToken,
				SecretHash: structs.HashACLSecret("s")}}}}, structs.ErrCodeInvalid},
		"token naming an unknown policy": {entry{structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{
			Tokens: []*structs.ACLToken{{AccessorID: "t", Type: structs.ACLClientToken, Policies: []string{"nope"},
				SecretHash: structs.HashACLSecret("s")}}}}, structs.ErrCodeInvalid},
		"token upsert with an empty token": {entry{structs.ACLTokenUpsertRequestType,
			&structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{nil}}}, structs.ErrCodeInvalid},
		"bootstrap carrying the operator's secret": {entry{structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{
			BootstrapSecret: "a0d4ba33-5a5e-4d14-8d3e-4f7d4b2f9c10", Token: &structs.ACLToken{AccessorID: "b",
				Type: structs.ACLManagementToken, SecretHash: structs.HashACLSecret("a0d4ba33-5a5e-4d14-8d3e-4f7d4b2f9c10")}}},
			structs.ErrCodeInvalid},
		"namespace upsert with an empty namespace": {entry{structs.NamespaceUpsertRequestType,
			&structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{nil}}}, structs.ErrCodeInvalid},
		"delete of the default namespace": {entry{structs.NamespaceDeleteRequestType,
			&structs.NamespaceDeleteRequest{Namespaces: []string{structs.DefaultNamespace}}}, structs.ErrCodeInvalid},
		"volume in a namespace that does not exist": {entry{structs.CSIVolumeRegisterRequestType,
			&structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{testVolume("nope", "vol9", "p")}}}, structs.ErrCodeInvalid},
		"job in a namespace that does not exist": {entry{structs.JobRegisterRequestType,
			&structs.JobRegisterRequest{Job: volumeJob("nope", "web9", "vol")}}, structs.ErrCodeInvalid},

		"node gc of a ready node": {entry{structs.NodeGCRequestType,
			&structs.NodeGCRequest{NodeIDs: []string{"n2"}, Timestamp: 99}}, structs.ErrCodeConflict},
		"node gc of nothing": {entry{structs.NodeGCRequestType, &structs.NodeGCRequest{}}, structs.ErrCodeInvalid},
		"plugin gc of a plugin nodes run": {entry{structs.CSIPluginGCRequestType,
			&structs.CSIPluginGCRequest{PluginIDs: []string{"gone", "p"}}}, structs.ErrCodeConflict},
		"plugin gc of nothing": {entry{structs.CSIPluginGCRequestType, &structs.CSIPluginGCRequest{}}, structs.ErrCodeInvalid},
	}
}

// TestAuthority_RefusedEntriesChangeNothing applies each refused entry to
// the FSM, alone through Apply and inside a batch through ApplyBatch, and
// finds the typed refusal as the entry's response and every row and index
// row as before. In the batch, the entries around it are applied.
func TestAuthority_RefusedEntriesChangeNothing(t *testing.T) {
	for name, tc := range refusedEntries() {
		t.Run(name, func(t *testing.T) {
			f, next := authorityFSM(t)
			before := dump(t, f.State())
			resp := apply(t, f, next, tc.e.mt, tc.e.req)
			err, ok := resp.(*structs.Error)
			must.True(t, ok, must.Sprintf("response %#v is not a *structs.Error", resp))
			must.Eq(t, tc.code, err.Code, must.Sprint(err))
			must.Eq(t, before, dump(t, f.State()))

			// The same entry between two writes of one batch: it alone is
			// refused, with the same response.
			f, next = authorityFSM(t)
			buf, encErr := structs.Encode(tc.e.mt, tc.e.req)
			must.NoError(t, encErr)
			around := func(index uint64, id string) *raft.Log {
				b, err := structs.Encode(structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
					Volumes: []*structs.CSIVolume{testVolume(ns, id, "p")}, Timestamp: int64(index)})
				must.NoError(t, err)
				return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}
			}
			resps := f.ApplyBatch([]*raft.Log{
				around(next, "before"),
				{Index: next + 1, Term: 1, Type: raft.LogCommand, Data: buf},
				around(next+2, "after"),
			})
			must.Nil(t, resps[0])
			must.Eq(t, fmt.Sprint(resp), fmt.Sprint(resps[1]))
			must.Nil(t, resps[2])
			for _, id := range []string{"before", "after"} {
				v, err := f.State().CSIVolumeByID(nil, ns, id)
				must.NoError(t, err)
				must.NotNil(t, v)
			}
		})
	}
}

// TestAuthority_ConflictingClaimsOneGrant: claims that each pass the
// leader's check against the same snapshot, applied in sequence through the
// FSM (one by one, or together in one batch), yield exactly one grant; the
// others get the claim rules' typed refusal.
func TestAuthority_ConflictingClaimsOneGrant(t *testing.T) {
	claimants := [][2]string{{"a1", "n1"}, {"a2", "n2"}, {"a3", "n1"}}
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			f, next := authorityFSM(t)
			snap, err := f.State().Snapshot()
			must.NoError(t, err)
			var logs []*raft.Log
			for i, c := range claimants {
				cl := claim(c[0], c[1], structs.CSIVolumeClaimWrite)
				_, err := snap.CheckCSIVolumeClaim(ns, "vol2", cl)
				must.NoError(t, err, must.Sprintf("%s passes the leader's check", c[0]))
				buf, err := structs.Encode(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
					VolumeID: "vol2", Claim: cl, Timestamp: int64(next) + int64(i)})
				must.NoError(t, err)
				logs = append(logs, &raft.Log{Index: next + uint64(i), Term: 1, Type: raft.LogCommand, Data: buf})
			}
			var resps []any
			if batched {
				resps = f.ApplyBatch(logs)
			} else {
				for _, l := range logs {
					resps = append(resps, f.Apply(l))
				}
			}
			grants := 0
			for i, r := range resps {
				if r == nil {
					grants++
					continue
				}
				must.Eq(t, structs.ErrCodeMaxClaims, structs.CodeOf(r.(error)), must.Sprintf("entry %d: %v", i, r))
			}
			must.Eq(t, 1, grants)
			must.Nil(t, resps[0], must.Sprint("the first in the log wins"))
			v, err := f.State().CSIVolumeByID(nil, ns, "vol2")
			must.NoError(t, err)
			must.MapLen(t, 1, v.WriteClaims)
			must.MapContainsKey(t, v.WriteClaims, "a1")
		})
	}
}

// TestAuthority_EmptyRequestsDoNotPanic: every message type with an empty
// request body is refused or applied, never a panic that would stop every
// replica at the same entry.
func TestAuthority_EmptyRequestsDoNotPanic(t *testing.T) {
	for _, mt := range structs.MessageTypes() {
		// A message type added later needs its request in newRequest.
		req := newRequest(mt)
		must.NotNil(t, req, must.Sprintf("no empty request for %s", mt))
		t.Run(mt.String(), func(t *testing.T) {
			f, next := authorityFSM(t)
			before := dump(t, f.State())
			resp := apply(t, f, next, mt, req)
			if resp == nil {
				return
			}
			_, ok := resp.(*structs.Error)
			must.True(t, ok, must.Sprintf("response %#v is not a *structs.Error", resp))
			must.Eq(t, before, dump(t, f.State()))
		})
	}
}

// newRequest returns an empty request of the type a message type's entries
// carry.
func newRequest(mt structs.MessageType) any {
	switch mt {
	case structs.NodeRegisterRequestType, structs.NodeRegisterHashedRequestType:
		return &structs.NodeRegisterRequest{}
	case structs.NodeDeregisterRequestType:
		return &structs.NodeDeregisterRequest{}
	case structs.NodeUpdateStatusRequestType:
		return &structs.NodeUpdateStatusRequest{}
	case structs.CSIVolumeRegisterRequestType:
		return &structs.CSIVolumeRegisterRequest{}
	case structs.CSIVolumeDeregisterRequestType:
		return &structs.CSIVolumeDeregisterRequest{}
	case structs.CSIVolumeClaimRequestType:
		return &structs.CSIVolumeClaimRequest{}
	case structs.AllocUpsertRequestType:
		return &structs.AllocUpdateRequest{}
	case structs.JobRegisterRequestType:
		return &structs.JobRegisterRequest{}
	case structs.JobDeregisterRequestType:
		return &structs.JobDeregisterRequest{}
	case structs.PlanApplyRequestType:
		return &structs.PlanApplyRequest{}
	case structs.NodeIntroUpsertRequestType:
		return &structs.NodeIntroCreateRequest{}
	case structs.NodeIntroDeleteRequestType:
		return &structs.NodeIntroDeleteRequest{}
	case structs.RootKeyUpsertRequestType:
		return &structs.RootKeyUpsertRequest{}
	case structs.CSIVolumeResealRequestType:
		return &structs.CSIVolumeResealRequest{}
	case structs.ACLPolicyUpsertRequestType:
		return &structs.ACLPolicyUpsertRequest{}
	case structs.ACLPolicyDeleteRequestType:
		return &structs.ACLPolicyDeleteRequest{}
	case structs.ACLTokenUpsertRequestType:
		return &structs.ACLTokenUpsertRequest{}
	case structs.ACLTokenDeleteRequestType:
		return &structs.ACLTokenDeleteRequest{}
	case structs.ACLTokenBootstrapRequestType:
		return &structs.ACLTokenBootstrapRequest{}
	case structs.NamespaceUpsertRequestType:
		return &structs.NamespaceUpsertRequest{}
	case structs.NamespaceDeleteRequestType:
		return &structs.NamespaceDeleteRequest{}

	case structs.NodeGCRequestType:
		return &structs.NodeGCRequest{}
	case structs.CSIPluginGCRequestType:
		return &structs.CSIPluginGCRequest{}

	case structs.NodeUpdateDrainRequestType:
		return &structs.NodeUpdateDrainRequest{}
	case structs.NodeUpdateEligibilityRequestType:
		return &structs.NodeUpdateEligibilityRequest{}
	case structs.AllocDrainStopRequestType:
		return &structs.AllocDrainStopRequest{}
	case structs.CSIVolumeCheckpointBatchRequestType:
		return &structs.CSIVolumeCheckpointBatchRequest{}
	case structs.CSIVolumeRegisterBatchRequestType, structs.CSIVolumeClaimBatchRequestType:
		return &structs.EntryBatchRequest{}
	}
	return nil
}

// FuzzApplyRefused applies arbitrary entries that decode to an FSM holding claims,
// releases and placed allocations: whatever an entry says, the FSM answers
// nil or a typed refusal, never a panic, and a refused entry changes
// nothing. (Entries that do not decode stop the FSM by design; they are
// left out.)
func FuzzApplyRefused(f *testing.F) {
	for _, tc := range refusedEntries() {
		buf, err := structs.Encode(tc.e.mt, tc.e.req)
		must.NoError(f, err)
		f.Add(buf)
	}
	for _, mt := range structs.MessageTypes() {
		buf, err := structs.Encode(mt, newRequest(mt))
		must.NoError(f, err)
		f.Add(buf)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		req := newRequest(structs.MessageType(data[0]))
		if req == nil || structs.Decode(data[1:], req) != nil {
			return
		}
		fsm, next := authorityFSM(t)
		before := dump(t, fsm.State())
		resp := fsm.Apply(&raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data})
		if resp == nil {
			return
		}
		if refused, ok := resp.([]error); ok {
			// A checkpoint batch answers for each checkpoint: applied, or
			// refused with a typed error.
			for _, err := range refused {
				if err != nil {
					_, ok := err.(*structs.Error)
					must.True(t, ok, must.Sprintf("refusal %#v is not a *structs.Error", err))
				}
			}
			return
		}
		_, ok := resp.(*structs.Error)
		must.True(t, ok, must.Sprintf("response %#v is not a *structs.Error", resp))
		must.Eq(t, before, dump(t, fsm.State()))
	})
}
