package state

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// queued returns every event the subscription holds now, without waiting.
func queued(t *testing.T, sub *Subscription) []Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out []Event
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			must.ErrorIs(t, err, context.Canceled)
			return out
		}
		out = append(out, ev)
	}
}

// kinds renders events as "index topic type key" lines, for comparing
// sequences at a glance.
func kinds(events []Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = strings.Join([]string{strconv.FormatUint(ev.Index, 10), ev.Topic, ev.Type, ev.Key}, " ")
	}
	return out
}

func subscribe(t *testing.T, s *StateStore, from uint64, topics ...string) *Subscription {
	t.Helper()
	sub, err := s.Events().Subscribe(topics, from)
	must.NoError(t, err)
	t.Cleanup(sub.Close)
	return sub
}

// releaseStep writes a release checkpoint of the claim.
func releaseStep(t *testing.T, s *StateStore, index uint64, c *structs.CSIVolumeClaim, state structs.CSIVolumeClaimState) {
	t.Helper()
	c = c.Copy()
	c.State = state
	must.NoError(t, s.CSIVolumeClaim(index, int64(index)*1000, ns, "vol", c))
}

// claimLifecycle takes a claim of a1 on vol and releases it, with one failed
// attempt on the node step, at indexes 20 to 27.
func claimLifecycle(t *testing.T, s *StateStore) {
	t.Helper()
	must.NoError(t, s.UpsertAllocs(20, []*structs.Allocation{testAlloc("a1", "n1")}))
	c := writeClaim("a1", "n1")
	c.PublishContext = map[string]string{"device": "/dev/secret-device"}
	must.NoError(t, s.CSIVolumeClaim(21, 21000, ns, "vol", c))
	releaseStep(t, s, 22, c, structs.CSIVolumeClaimStateUnpublishing)
	failed := c.Copy()
	failed.Attempts, failed.LastError, failed.NextAttempt = 1, "node plugin unavailable", 99000
	releaseStep(t, s, 23, failed, structs.CSIVolumeClaimStateUnpublishing)
	releaseStep(t, s, 24, c, structs.CSIVolumeClaimStateNodeDetached)
	releaseStep(t, s, 25, c, structs.CSIVolumeClaimStateControllerDetached)
	releaseStep(t, s, 26, c, structs.CSIVolumeClaimStateReadyToFree)
	must.NoError(t, s.CSIVolumeDeregister(27, ns, []string{"vol"}, false))
}

func TestEvents_OrderTypesAndPayloads(t *testing.T) {
	s := TestStateStore(t)
	sub := subscribe(t, s, 0)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	claimLifecycle(t, s)

	got := queued(t, sub)
	must.Eq(t, []string{
		"10 CSIPlugin PluginUpdated p",
		"11 CSIVolume VolumeRegistered vol",
		"21 CSIVolume VolumeUpdated vol",
		"21 CSIClaim ClaimTaken vol",
		"22 CSIVolume VolumeUpdated vol",
		"22 CSIClaim ClaimReleasing vol",
		"23 CSIVolume VolumeUpdated vol",
		"23 CSIClaim ClaimReleaseFailed vol",
		"24 CSIVolume VolumeUpdated vol",
		"24 CSIClaim ClaimNodeDetached vol",
		"25 CSIVolume VolumeUpdated vol",
		"25 CSIClaim ClaimControllerDetached vol",
		"26 CSIVolume VolumeUpdated vol",
		"26 CSIClaim ClaimFreed vol",
		"27 CSIVolume VolumeDeregistered vol",
	}, kinds(got))

	plugin := got[0].Payload.(*structs.CSIPluginListStub)
	must.Eq(t, 1, plugin.NodesHealthy)

	reg := got[1].Payload.(*structs.CSIVolume)
	must.Eq(t, "vol", reg.ID)
	must.Eq(t, ns, got[1].Namespace)
	must.True(t, reg.Schedulable) // derived from the plugin, as the API shows it

	taken := got[3].Payload.(*CSIClaimEvent)
	must.Eq(t, CSIClaimEvent{VolumeID: "vol", Namespace: ns, AllocationID: "a1", NodeID: "n1",
		Mode: "write", State: "taken"}, *taken)

	failed := got[7].Payload.(*CSIClaimEvent)
	must.Eq(t, CSIClaimEvent{VolumeID: "vol", Namespace: ns, AllocationID: "a1", NodeID: "n1",
		Mode: "write", State: "unpublishing", Attempts: 1, LastError: "node plugin unavailable", NextAttempt: 99000}, *failed)

	freed := got[13].Payload.(*CSIClaimEvent)
	must.Eq(t, "ready-to-free", freed.State)
	must.Eq(t, "a1", freed.AllocationID)

	// The volume while releasing shows the claim on both sides, without its
	// publish context.
	releasing := got[4].Payload.(*structs.CSIVolume)
	must.MapContainsKey(t, releasing.PastClaims, "a1")
	must.MapEmpty(t, releasing.PastClaims["a1"].PublishContext)
}

func TestEvents_NoSecretInAnyPayload(t *testing.T) {
	s := TestStateStore(t)
	sub := subscribe(t, s, 0)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	vol := testVolume("vol", "p")
	vol.Secrets = structs.CSISecrets{"token": "s3cr3t-token"}
	vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"password=hunter2"}}
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{vol}))
	claimLifecycle(t, s)

	got := queued(t, sub)
	must.SliceNotEmpty(t, got)
	for _, ev := range got {
		b, err := json.Marshal(ev)
		must.NoError(t, err)
		for _, secret := range []string{"s3cr3t-token", "hunter2", "secret-device"} {
			must.StrNotContains(t, string(b), secret, must.Sprintf("event %s %s", ev.Type, b))
		}
	}
}

func TestEvents_TopicsFilter(t *testing.T) {
	s := TestStateStore(t)
	claims := subscribe(t, s, 0, TopicCSIClaim)
	plugins := subscribe(t, s, 0, TopicCSIPlugin, TopicCSIVolume)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	claimLifecycle(t, s)

	for _, ev := range queued(t, claims) {
		must.Eq(t, TopicCSIClaim, ev.Topic)
	}
	other := queued(t, plugins)
	must.Len(t, 9, other) // 1 plugin + 8 volume events
	for _, ev := range other {
		must.NotEq(t, TopicCSIClaim, ev.Topic)
	}

	_, err := s.Events().Subscribe([]string{"CSIVolume", "Jobs"}, 0)
	mustCode(t, err, structs.ErrCodeInvalid)
	must.StrContains(t, err.Error(), `"Jobs"`)
}

func TestEvents_ReplayFromIndex(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	claimLifecycle(t, s)

	// Everything after 24, then what comes next, with nothing in between
	// lost or repeated.
	sub := subscribe(t, s, 24, TopicCSIClaim)
	must.NoError(t, s.UpsertCSIVolume(30, []*structs.CSIVolume{testVolume("vol", "p")}))
	must.NoError(t, s.UpsertAllocs(31, []*structs.Allocation{testAlloc("a2", "n1")}))
	must.NoError(t, s.CSIVolumeClaim(32, 32000, ns, "vol", readClaim("a2", "n1")))
	must.Eq(t, []string{
		"25 CSIClaim ClaimControllerDetached vol",
		"26 CSIClaim ClaimFreed vol",
		"32 CSIClaim ClaimTaken vol",
	}, kinds(queued(t, sub)))

	// Without an index: only what comes next.
	now := subscribe(t, s, 0)
	must.SliceEmpty(t, queued(t, now))
}

func TestEvents_ReplayBeyondTheRingIsRefused(t *testing.T) {
	s := TestStateStore(t)
	s.Events().ringSize = 3
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	must.NoError(t, s.UpsertAllocs(20, []*structs.Allocation{testAlloc("a1", "n1")}))
	must.NoError(t, s.CSIVolumeClaim(21, 21000, ns, "vol", writeClaim("a1", "n1")))
	// The ring holds 11 VolumeRegistered, 21 VolumeUpdated, 21 ClaimTaken:
	// the plugin event at 10 was evicted.

	_, err := s.Events().Subscribe(nil, 9)
	mustCode(t, err, structs.ErrCodeInvalid)
	must.StrContains(t, err.Error(), "no longer buffered")

	sub := subscribe(t, s, 10)
	must.Eq(t, []string{
		"11 CSIVolume VolumeRegistered vol",
		"21 CSIVolume VolumeUpdated vol",
		"21 CSIClaim ClaimTaken vol",
	}, kinds(queued(t, sub)))
}

func TestEvents_SlowSubscriberDroppedOthersNot(t *testing.T) {
	s := TestStateStore(t)
	s.Events().queueSize = 2
	slow := subscribe(t, s, 0)
	fast := subscribe(t, s, 0)

	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.Len(t, 1, queued(t, fast))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	must.Len(t, 1, queued(t, fast))
	// slow holds two events; the third does not fit, and the write still
	// goes through.
	must.NoError(t, s.UpsertCSIVolume(12, []*structs.CSIVolume{testVolume("vol2", "p")}))
	must.Len(t, 1, queued(t, fast))
	must.Eq(t, 1, s.Events().Subscribers())

	// What was queued before the drop still arrives, then the error.
	ctx := context.Background()
	for _, want := range []uint64{10, 11} {
		ev, err := slow.Next(ctx)
		must.NoError(t, err)
		must.Eq(t, want, ev.Index)
	}
	_, err := slow.Next(ctx)
	must.ErrorIs(t, err, ErrSubscriberTooSlow)
	mustCode(t, err, structs.ErrCodeRetryable)

	// It can come back from the last index it saw without a gap.
	again := subscribe(t, s, 11)
	must.Eq(t, []string{"12 CSIVolume VolumeRegistered vol2"}, kinds(queued(t, again)))
}

func TestEvents_RestoreEndsSubscriptions(t *testing.T) {
	old := TestStateStore(t)
	must.NoError(t, old.UpsertNode(10, healthyNodePlugin("n1", "p")))
	sub := subscribe(t, old, 0)
	must.NoError(t, old.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))

	// The FSM fills a fresh store from the snapshot, swaps it in and
	// abandons the old one.
	fresh := TestStateStore(t)
	r, err := fresh.Restore()
	must.NoError(t, err)
	must.NoError(t, r.IndexRestore(&IndexEntry{Key: TableCSIVolumes, Value: 11}))
	must.NoError(t, r.Commit())
	old.Abandon()

	ctx := context.Background()
	ev, err := sub.Next(ctx) // queued before the restore
	must.NoError(t, err)
	must.Eq(t, uint64(11), ev.Index)
	_, err = sub.Next(ctx)
	must.ErrorIs(t, err, ErrEventsRestored)
	must.StrContains(t, err.Error(), "subscribe again")
	must.Eq(t, 0, old.Events().Subscribers())

	_, err = old.Events().Subscribe(nil, 0)
	must.ErrorIs(t, err, ErrEventsRestored)

	// The new store has no history before the snapshot's index.
	_, err = fresh.Events().Subscribe(nil, 5)
	mustCode(t, err, structs.ErrCodeInvalid)
	next := subscribe(t, fresh, 11)
	must.NoError(t, fresh.UpsertNode(12, healthyNodePlugin("n1", "p")))
	must.Eq(t, []string{"12 CSIPlugin PluginUpdated p"}, kinds(queued(t, next)))
}

func TestEvents_HistoryOfARestoredStoreStartsAtItsFirstWrite(t *testing.T) {
	// A store restored at index 50 whose first write (51) comes before any
	// subscriber: replay from below 50 is refused, from 50 is complete.
	s := TestStateStore(t)
	r, err := s.Restore()
	must.NoError(t, err)
	must.NoError(t, r.IndexRestore(&IndexEntry{Key: TableNodes, Value: 50}))
	must.NoError(t, r.Commit())
	must.NoError(t, s.UpsertNode(51, healthyNodePlugin("n1", "p")))

	_, err = s.Events().Subscribe(nil, 49)
	mustCode(t, err, structs.ErrCodeInvalid)
	sub := subscribe(t, s, 50)
	must.Eq(t, []string{"51 CSIPlugin PluginUpdated p"}, kinds(queued(t, sub)))
}

func TestEvents_CloseEndsNext(t *testing.T) {
	s := TestStateStore(t)
	sub := subscribe(t, s, 0)
	sub.Close()
	sub.Close()
	_, err := sub.Next(context.Background())
	must.ErrorIs(t, err, ErrSubscriptionClosed)
	must.Eq(t, 0, s.Events().Subscribers())
	// A write after the close has nobody to go to and does not block.
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
}

func TestEvents_NoOpWritePublishesNothing(t *testing.T) {
	s := setupVolume(t)
	sub := subscribe(t, s, 0)
	must.NoError(t, s.UpsertCSIVolume(12, []*structs.CSIVolume{testVolume("vol", "p")}))
	must.SliceEmpty(t, queued(t, sub))
}

func TestEvents_VolumePayloadIsAsOfTheWrite(t *testing.T) {
	// The payload is built when a subscriber reads it, from the row and
	// the plugin health of the write, not from what came after.
	s := TestStateStore(t)
	sub := subscribe(t, s, 0, TopicCSIVolume)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	must.NoError(t, s.UpdateNodeStatus(12, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown, UpdatedAt: 12000}))
	upd := testVolume("vol", "p")
	upd.Context = map[string]string{"k": "v"}
	must.NoError(t, s.UpsertCSIVolume(13, []*structs.CSIVolume{upd}))

	got := queued(t, sub)
	must.Eq(t, []string{"11 CSIVolume VolumeRegistered vol", "13 CSIVolume VolumeUpdated vol"}, kinds(got))
	reg := got[0].Payload.(*structs.CSIVolume)
	must.True(t, reg.Schedulable)
	must.Eq(t, 1, reg.NodesHealthy)
	must.MapEmpty(t, reg.Context)
	updated := got[1].Payload.(*structs.CSIVolume)
	must.False(t, updated.Schedulable)
	must.Eq(t, map[string]string{"k": "v"}, updated.Context)

	// The payload is built once: a replay gets the very same one.
	again := queued(t, subscribe(t, s, 10, TopicCSIVolume))
	must.True(t, reg == again[0].Payload.(*structs.CSIVolume), must.Sprint("payloads are shared, not rebuilt"))
}

// TestEvents_FreeFromNodeDetachedAnnouncesTheControllerStep: the watcher
// writes a release's controller step and its free as one checkpoint; the
// stream still shows ClaimControllerDetached, then ClaimFreed, at that
// write's index.
func TestEvents_FreeFromNodeDetachedAnnouncesTheControllerStep(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	must.NoError(t, s.UpsertAllocs(20, []*structs.Allocation{testAlloc("a1", "n1")}))
	c := writeClaim("a1", "n1")
	must.NoError(t, s.CSIVolumeClaim(21, 21000, ns, "vol", c))
	sub := subscribe(t, s, 0, TopicCSIClaim)
	releaseStep(t, s, 22, c, structs.CSIVolumeClaimStateUnpublishing)
	releaseStep(t, s, 23, c, structs.CSIVolumeClaimStateNodeDetached)
	releaseStep(t, s, 24, c, structs.CSIVolumeClaimStateReadyToFree)
	got := queued(t, sub)
	must.Eq(t, []string{
		"22 CSIClaim ClaimReleasing vol",
		"23 CSIClaim ClaimNodeDetached vol",
		"24 CSIClaim ClaimControllerDetached vol",
		"24 CSIClaim ClaimFreed vol",
	}, kinds(got))
	must.Eq(t, "controller-detached", got[2].Payload.(*CSIClaimEvent).State)
}

// TestEvents_NodeStepSharedWithTheNextWrite: the watcher writes a node step
// it made together with what follows it: the free (controller step done or
// skipped), or the controller step's failure. The stream still shows each
// step at that write's index, and the failure. A volume deregistered with
// a claim being released announces no step that was not made: only that
// the claim is gone.
func TestEvents_NodeStepSharedWithTheNextWrite(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	vols := []*structs.CSIVolume{testVolume("vol", "p"), testVolume("vol2", "p")}
	must.NoError(t, s.UpsertCSIVolume(11, vols))
	must.NoError(t, s.UpsertAllocs(20, []*structs.Allocation{testAlloc("a1", "n1"), testAlloc("a2", "n1")}))
	c1, c2 := writeClaim("a1", "n1"), writeClaim("a2", "n1")
	must.NoError(t, s.CSIVolumeClaim(21, 21000, ns, "vol", c1))
	must.NoError(t, s.CSIVolumeClaim(22, 22000, ns, "vol2", c2))
	sub := subscribe(t, s, 0, TopicCSIClaim)

	releaseStep(t, s, 23, c1, structs.CSIVolumeClaimStateUnpublishing)
	releaseStep(t, s, 24, c1, structs.CSIVolumeClaimStateReadyToFree)

	c2.State = structs.CSIVolumeClaimStateUnpublishing
	must.NoError(t, s.CSIVolumeClaim(25, 25000, ns, "vol2", c2))
	failed := c2.Copy()
	failed.Attempts, failed.LastError, failed.NextAttempt = 1, "controller detach: busy", 99000
	failed.State = structs.CSIVolumeClaimStateNodeDetached
	must.NoError(t, s.CSIVolumeClaim(26, 26000, ns, "vol2", failed))
	done := testAlloc("a2", "n1")
	done.DesiredStatus, done.ClientStatus = structs.AllocDesiredStatusStop, structs.AllocClientStatusComplete
	must.NoError(t, s.UpsertAllocs(27, []*structs.Allocation{done}))
	must.NoError(t, s.CSIVolumeDeregister(28, ns, []string{"vol2"}, true))

	got := queued(t, sub)
	must.Eq(t, []string{
		"23 CSIClaim ClaimReleasing vol",
		"24 CSIClaim ClaimNodeDetached vol",
		"24 CSIClaim ClaimControllerDetached vol",
		"24 CSIClaim ClaimFreed vol",
		"25 CSIClaim ClaimReleasing vol2",
		"26 CSIClaim ClaimNodeDetached vol2",
		"26 CSIClaim ClaimReleaseFailed vol2",
		"28 CSIClaim ClaimFreed vol2",
	}, kinds(got))
	must.Eq(t, "node-detached", got[1].Payload.(*CSIClaimEvent).State)
	failure := got[6].Payload.(*CSIClaimEvent)
	must.Eq(t, "node-detached", failure.State)
	must.Eq(t, 1, failure.Attempts)
	must.Eq(t, "controller detach: busy", failure.LastError)
}
