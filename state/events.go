package state

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// Event topics. A subscriber names the topics it wants; none means all.
const (
	TopicCSIVolume = "CSIVolume"
	TopicCSIClaim  = "CSIClaim"
	TopicCSIPlugin = "CSIPlugin"
	TopicACLToken  = "ACLToken"
	TopicACLPolicy = "ACLPolicy"
)

// Event types. Volume and plugin events follow the row; claim events follow
// one allocation's claim on one volume through its states.
const (
	EventVolumeRegistered   = "VolumeRegistered"
	EventVolumeUpdated      = "VolumeUpdated"
	EventVolumeDeregistered = "VolumeDeregistered"

	EventClaimTaken = "ClaimTaken"
	// EventClaimWaitingForClient is a claim of an allocation the servers
	// stopped whose client still runs its tasks; ClaimReleasing follows
	// once the client reports them stopped.
	EventClaimWaitingForClient = "ClaimWaitingForClient"
	EventClaimReleasing        = "ClaimReleasing"
	EventClaimNodeDetached     = "ClaimNodeDetached"
	// EventClaimNodeDetachSkipped is a node step the release skipped
	// because the node is down or gone; the Note says which.
	EventClaimNodeDetachSkipped  = "ClaimNodeDetachSkipped"
	EventClaimControllerDetached = "ClaimControllerDetached"
	EventClaimFreed              = "ClaimFreed"
	EventClaimReleaseFailed      = "ClaimReleaseFailed"

	EventPluginUpdated = "PluginUpdated"
	EventPluginDeleted = "PluginDeleted"
)

// Topics lists every topic in a stable order.
func Topics() []string {
	return []string{TopicCSIVolume, TopicCSIClaim, TopicCSIPlugin, TopicACLToken, TopicACLPolicy}
}

// Event is one change to the replicated state, derived from a committed
// write. Events of one write share its Raft index and come in the order the
// write made its changes.
type Event struct {
	Index     uint64
	Topic     string
	Type      string
	Key       string
	Namespace string
	// Payload is, by topic: a sanitized *structs.CSIVolume (no secrets, no
	// mount flags, no publish contexts), a *CSIClaimEvent, a
	// *structs.CSIPluginListStub, a *structs.ACLToken without its secret's
	// hash, or a *structs.ACLPolicy. Payloads are shared by every subscriber
	// and must not be changed.
	Payload any
}

// volumePayload is the payload of a volume event until a subscriber reads
// it. Sanitizing copies the whole volume, claims included; publishing runs on
// every committed write on every server, mostly with nobody subscribed, so
// the ring keeps the stored row (immutable) and the plugin health as of the
// write, and the copy is made once, on first delivery, then shared.
type volumePayload struct {
	once   sync.Once
	row    *structs.CSIVolume // dropped once built
	health pluginHealth
	built  *structs.CSIVolume
}

func (p *volumePayload) volume() *structs.CSIVolume {
	p.once.Do(func() {
		p.built = p.row.Sanitize()
		p.health.setOn(p.built)
		p.row = nil
	})
	return p.built
}

// delivered is ev as a subscriber gets it, its payload built.
func (ev Event) delivered() Event {
	if p, ok := ev.Payload.(*volumePayload); ok {
		ev.Payload = p.volume()
	}
	return ev
}

// CSIClaimEvent is the payload of a CSIClaim event: one allocation's claim
// on one volume as it is after the write (as it was, for ClaimFreed).
type CSIClaimEvent struct {
	VolumeID     string
	Namespace    string
	AllocationID string
	NodeID       string
	Mode         string // "read" or "write"
	State        string // a claim state: taken, waiting-for-client, unpublishing, node-detached, controller-detached, ready-to-free
	Attempts     int
	LastError    string
	NextAttempt  int64 // Unix nanoseconds, stamped by the leader
	// Note says what the release did that is worth knowing, such as a
	// node step skipped because the node is down.
	Note string
}

// Limits of the broker: events kept for replay, and writes queued per
// subscriber. A subscriber whose buffer fills is dropped rather than
// slowing the FSM; the ring lets it resubscribe from the last index it
// saw without missing anything, as long as it comes back quickly.
const (
	defaultEventRingSize   = 4096
	defaultSubscriberQueue = 2048
)

// Errors that end a subscription. They carry the retryable code: the
// subscriber should subscribe again.
var (
	// ErrEventsRestored ends the subscriptions of a store replaced by a
	// snapshot restore: the new store has no event history from before.
	ErrEventsRestored = &structs.Error{Code: structs.ErrCodeRetryable,
		Message: "event stream ended: this server's state was replaced by a snapshot restore; read the current state and subscribe again"}
	// ErrSubscriberTooSlow ends a subscription whose buffer filled up.
	ErrSubscriberTooSlow = &structs.Error{Code: structs.ErrCodeRetryable,
		Message: "event stream ended: the subscriber fell too far behind; subscribe again with index set to the last index received"}
	// ErrSubscriptionClosed is what Next returns after Close.
	ErrSubscriptionClosed = &structs.Error{Code: structs.ErrCodeRetryable, Message: "event subscription closed"}
)

// EventBroker fans the events of one store out to subscribers. Publishing
// runs inside the FSM's apply and never blocks: every send is non-blocking,
// and a subscriber that cannot take an event is dropped.
type EventBroker struct {
	store *StateStore

	mu sync.Mutex
	// ring holds the most recent events, oldest at head, for replay. It
	// grows up to ringSize, then wraps.
	ring []Event
	head int
	// horizon is the highest index whose events may be missing: below it
	// history was evicted from the ring or predates this store (a snapshot
	// restore). A replay must start at or above it.
	horizon uint64
	started bool
	subs    map[*Subscription]struct{}

	ringSize  int
	queueSize int
}

func newEventBroker(s *StateStore) *EventBroker {
	return &EventBroker{
		store:     s,
		subs:      map[*Subscription]struct{}{},
		ringSize:  defaultEventRingSize,
		queueSize: defaultSubscriberQueue,
	}
}

// Events returns the store's event broker. A store read through Snapshot has
// none (nil): it never changes.
func (s *StateStore) Events() *EventBroker { return s.events }

// Subscription is one subscriber's stream of events. Next and Close may be
// called from different goroutines, but Next from one at a time.
type Subscription struct {
	broker *EventBroker
	topics map[string]bool
	// replay holds the buffered events the subscriber asked for, delivered
	// before anything published after it subscribed.
	replay []Event
	// ch carries the events of one write at a time, so that a reader that
	// has one of a write's events can have the rest without waiting
	// (pending holds them); its capacity counts writes.
	ch      chan []Event
	pending []Event
	done    chan struct{} // closed when the broker drops it or it is closed
	err     error         // set before done is closed
}

// Subscribe starts a subscription to topics (none: all). With fromIndex > 0
// it first replays the buffered events with a higher index; when some of
// those are no longer buffered it fails with an invalid error, and the
// caller should read the current state and subscribe without an index.
func (b *EventBroker) Subscribe(topics []string, fromIndex uint64) (*Subscription, error) {
	want := map[string]bool{}
	for _, t := range topics {
		if !slices.Contains(Topics(), t) {
			return nil, structs.ErrInvalid("unknown event topic %q: want one of %s", t, strings.Join(Topics(), ", "))
		}
		want[t] = true
	}
	if len(want) == 0 {
		for _, t := range Topics() {
			want[t] = true
		}
	}
	select {
	case <-b.store.AbandonCh():
		return nil, ErrEventsRestored
	default:
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started {
		// Nothing committed since this store was filled: everything in it
		// predates the broker.
		latest, err := b.store.LatestIndex()
		if err != nil {
			return nil, err
		}
		b.start(latest)
	}
	sub := &Subscription{
		broker: b,
		topics: want,
		ch:     make(chan []Event, b.queueSize),
		done:   make(chan struct{}),
	}
	if fromIndex > 0 {
		if fromIndex < b.horizon {
			return nil, structs.ErrInvalid("events after index %d are no longer buffered (history starts after index %d): read the current state and subscribe without an index",
				fromIndex, b.horizon)
		}
		for i := range b.ring {
			ev := b.ring[(b.head+i)%len(b.ring)]
			if ev.Index > fromIndex && want[ev.Topic] {
				sub.replay = append(sub.replay, ev)
			}
		}
	}
	b.subs[sub] = struct{}{}
	return sub, nil
}

// Subscribers returns the number of live subscriptions.
func (b *EventBroker) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Next returns the next event. It blocks until there is one, the context
// ends, or the subscription ends: closed (ErrSubscriptionClosed), dropped
// for falling behind (ErrSubscriberTooSlow) or its store replaced by a
// snapshot restore (ErrEventsRestored). Events published before the end are
// still delivered first.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	if len(s.replay) > 0 {
		ev := s.replay[0]
		s.replay = s.replay[1:]
		return ev.delivered(), nil
	}
	if len(s.pending) > 0 {
		return s.take(nil), nil
	}
	select {
	case evs := <-s.ch:
		return s.take(evs), nil
	default:
	}
	select {
	case evs := <-s.ch:
		return s.take(evs), nil
	case <-s.done:
		return s.drain(s.err)
	case <-s.broker.store.AbandonCh():
		s.broker.drop(s, ErrEventsRestored)
		return s.drain(ErrEventsRestored)
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// drain returns an event still queued before the end, or err.
func (s *Subscription) drain(err error) (Event, error) {
	if len(s.pending) > 0 {
		return s.take(nil), nil
	}
	select {
	case evs := <-s.ch:
		return s.take(evs), nil
	default:
		return Event{}, err
	}
}

// take returns the first of the pending events after queueing evs (a
// write's events, never empty) behind them.
func (s *Subscription) take(evs []Event) Event {
	s.pending = append(s.pending, evs...)
	ev := s.pending[0]
	s.pending = s.pending[1:]
	return ev.delivered()
}

// Close ends the subscription. It may be called more than once.
func (s *Subscription) Close() { s.broker.drop(s, ErrSubscriptionClosed) }

// drop removes a subscription with the error its Next will return.
func (b *EventBroker) drop(s *Subscription, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(s, err)
}

func (b *EventBroker) dropLocked(s *Subscription, err error) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	s.err = err
	close(s.done)
}

func (b *EventBroker) start(horizon uint64) {
	b.started = true
	b.horizon = horizon
}

// publish records the events of one committed write and hands them to the
// subscribers that want them. prior is the highest index the store held
// before the write, which bounds the history of a broker that has not seen
// a write yet.
func (b *EventBroker) publish(events []Event, prior uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started {
		b.start(prior)
	}
	for _, ev := range events {
		switch {
		case len(b.ring) < b.ringSize:
			b.ring = append(b.ring, ev)
		default:
			// Full: the oldest event makes room, and a replay can no
			// longer start below its index.
			b.horizon = max(b.horizon, b.ring[b.head].Index)
			b.ring[b.head] = ev
			b.head = (b.head + 1) % len(b.ring)
		}
	}
	// Each subscriber gets the write's events it asked for in one send.
	for sub := range b.subs {
		var mine []Event
		for _, ev := range events {
			if sub.topics[ev.Topic] {
				mine = append(mine, ev)
			}
		}
		if len(mine) == 0 {
			continue
		}
		select {
		case sub.ch <- mine:
		default:
			b.dropLocked(sub, ErrSubscriberTooSlow)
		}
	}
}

// publishCommitted derives the events of a committed write transaction and
// publishes them. writeTxn defers it to the commit, so it runs only for
// transactions that committed, after commit bumped their index rows.
func (s *StateStore) publishCommitted(changes memdb.Changes) {
	if s.events == nil {
		return
	}
	if len(changes) == 0 {
		return
	}
	read := s.db.Txn(false)
	index, prior := committedIndexes(read, changes)
	var events []Event
	for _, ch := range changes {
		switch ch.Table {
		case TableCSIVolumes:
			before, _ := ch.Before.(*structs.CSIVolume)
			after, _ := ch.After.(*structs.CSIVolume)
			events = append(events, volumeEvent(read, index, before, after))
			events = append(events, claimEvents(index, before, after)...)
		case TableCSIPlugins:
			events = append(events, pluginEvent(index, ch))
		case TableACLTokens, TableACLPolicies:
			events = append(events, aclEvent(index, ch))
		}
	}
	s.events.publish(events, prior)
}

// committedIndexes returns the Raft index of a committed transaction, from
// the index rows it bumped, and the highest index of the store before it.
// A write at an index some earlier write of the same log entry already
// bumped leaves no index change; the rows of its tables then hold the index.
func committedIndexes(read *memdb.Txn, changes memdb.Changes) (index, prior uint64) {
	bumped := map[string]bool{}
	var tables []string
	for _, ch := range changes {
		if ch.Table != TableIndex {
			tables = append(tables, ch.Table)
			continue
		}
		if e, ok := ch.After.(*IndexEntry); ok {
			index = max(index, e.Value)
			bumped[e.Key] = true
		}
		if e, ok := ch.Before.(*IndexEntry); ok {
			prior = max(prior, e.Value)
		}
	}
	iter, err := read.Get(TableIndex, indexID)
	if err != nil {
		return index, prior
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		e := raw.(*IndexEntry)
		if !bumped[e.Key] {
			prior = max(prior, e.Value)
		}
		if index == 0 && slices.Contains(tables, e.Key) {
			index = max(index, e.Value)
		}
	}
	return index, min(prior, index)
}

// volumeEvent is the event of one changed volume row; its payload, built on
// delivery, is the volume sanitized, with its plugin health as of the write
// derived as the API shows it.
func volumeEvent(read *memdb.Txn, index uint64, before, after *structs.CSIVolume) Event {
	typ, v := EventVolumeUpdated, after
	switch {
	case before == nil:
		typ = EventVolumeRegistered
	case after == nil:
		typ, v = EventVolumeDeregistered, before
	}
	// The health, not the plugin row: a row lists every instance of the
	// plugin, and the ring would keep thousands of versions of it.
	var health pluginHealth
	if p, err := pluginByIDTxn(read, nil, v.PluginID); err == nil {
		health = healthOf(p)
	}
	return Event{Index: index, Topic: TopicCSIVolume, Type: typ, Key: v.ID, Namespace: v.Namespace,
		Payload: &volumePayload{row: v, health: health}}
}

// claimView is where one allocation's claim on a volume stands: a claim
// being released is in PastClaims (its live claim stays until it is freed),
// so the past claim, with its release bookkeeping, wins.
type claimView struct {
	claim *structs.CSIVolumeClaim
	state structs.CSIVolumeClaimState
}

func claimViews(v *structs.CSIVolume) map[string]claimView {
	out := map[string]claimView{}
	if v == nil {
		return out
	}
	for _, m := range []map[string]*structs.CSIVolumeClaim{v.ReadClaims, v.WriteClaims} {
		for id, c := range m {
			out[id] = claimView{c, structs.CSIVolumeClaimStateTaken}
		}
	}
	for id, c := range v.PastClaims {
		out[id] = claimView{c, c.State}
	}
	return out
}

// claimTypes names the event of a claim arriving in a state.
var claimTypes = map[structs.CSIVolumeClaimState]string{
	structs.CSIVolumeClaimStateTaken:              EventClaimTaken,
	structs.CSIVolumeClaimStateWaitingForClient:   EventClaimWaitingForClient,
	structs.CSIVolumeClaimStateUnpublishing:       EventClaimReleasing,
	structs.CSIVolumeClaimStateNodeDetached:       EventClaimNodeDetached,
	structs.CSIVolumeClaimStateControllerDetached: EventClaimControllerDetached,
	structs.CSIVolumeClaimStateReadyToFree:        EventClaimFreed,
}

// claimEvents compares the claims of a volume before and after a write: one
// event per claim that appeared, moved to another state or went away, and a
// ClaimReleaseFailed for a claim that stayed where it was with more
// attempts. Events come by allocation ID, so replicas agree on the order.
func claimEvents(index uint64, before, after *structs.CSIVolume) []Event {
	b, a := claimViews(before), claimViews(after)
	vol := after
	if vol == nil {
		vol = before
	}
	union := maps.Clone(b)
	maps.Copy(union, a)
	ids := slices.Sorted(maps.Keys(union))
	var events []Event
	for _, id := range ids {
		was, hadIt := b[id]
		now, hasIt := a[id]
		var typ string
		switch {
		case !hasIt:
			if was.state == structs.CSIVolumeClaimStateReadyToFree {
				continue // already announced as freed
			}
			if after != nil && was.state.ReleaseOrder() < structs.CSIVolumeClaimStateNodeDetached.ReleaseOrder() {
				// Freed from before the node step: the watcher writes a
				// node step it made (never one it skipped) together with
				// the controller step and the free. Each step is
				// announced as it was when it had a write of its own.
				events = append(events, claimEvent(index, vol, id, EventClaimNodeDetached,
					claimView{was.claim, structs.CSIVolumeClaimStateNodeDetached}))
				was.state = structs.CSIVolumeClaimStateNodeDetached
			}
			if after != nil && was.state == structs.CSIVolumeClaimStateNodeDetached {
				// The release's controller step and its free are one
				// write: the step is announced as it was when it had a
				// write of its own. A volume deregistered (after == nil)
				// made no step: its claims are only gone.
				events = append(events, claimEvent(index, vol, id, EventClaimControllerDetached,
					claimView{was.claim, structs.CSIVolumeClaimStateControllerDetached}))
			}
			typ, now = EventClaimFreed, claimView{was.claim, structs.CSIVolumeClaimStateReadyToFree}
		case !hadIt || was.state != now.state:
			typ = claimTypes[now.state]
			if now.state == structs.CSIVolumeClaimStateNodeDetached && now.claim.Note != "" {
				typ = EventClaimNodeDetachSkipped
			}
			if hadIt && now.claim.Attempts > was.claim.Attempts {
				// A step done and the next one failed, in one write (a
				// node step, then its controller step): both are told.
				events = append(events, claimEvent(index, vol, id, typ, now))
				typ = EventClaimReleaseFailed
			}
		case now.claim.Attempts > was.claim.Attempts:
			typ = EventClaimReleaseFailed
		}
		if typ == "" {
			continue
		}
		events = append(events, claimEvent(index, vol, id, typ, now))
	}
	return events
}

// claimEvent is the event of type typ for an allocation's claim on vol.
func claimEvent(index uint64, vol *structs.CSIVolume, allocID, typ string, now claimView) Event {
	c := now.claim
	return Event{
		Index: index, Topic: TopicCSIClaim, Type: typ, Key: vol.ID, Namespace: vol.Namespace,
		Payload: &CSIClaimEvent{
			VolumeID:     vol.ID,
			Namespace:    vol.Namespace,
			AllocationID: allocID,
			NodeID:       c.NodeID,
			Mode:         c.Mode.String(),
			State:        now.state.String(),
			Attempts:     c.Attempts,
			LastError:    c.LastError,
			NextAttempt:  c.NextAttempt,
			Note:         c.Note,
		},
	}
}

func pluginEvent(index uint64, ch memdb.Change) Event {
	if ch.Deleted() {
		p := ch.Before.(*structs.CSIPlugin)
		return Event{Index: index, Topic: TopicCSIPlugin, Type: EventPluginDeleted, Key: p.ID, Payload: p.Stub()}
	}
	p := ch.After.(*structs.CSIPlugin)
	return Event{Index: index, Topic: TopicCSIPlugin, Type: EventPluginUpdated, Key: p.ID, Payload: p.Stub()}
}
