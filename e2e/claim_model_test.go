package e2e

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/volplane/volplane/structs"
)

// The sequential specification of claims that the fault suite checks its
// histories against with porcupine: DESIGN.md's claim table, written here
// on its own rather than by calling structs.CheckClaim, so that the code
// is checked against the rules and not against itself.
//
// A history is partitioned by volume: every operation touches one volume
// (an allocation's job asks for exactly one), and linearizability is
// compositional, so each volume is checked on its own.
//
// The model is nondeterministic in one way. A claim whose allocation was
// stopped becomes a past claim in the stop's own write, then is freed by
// the servers' release at a moment no client observes: any such claim may
// vanish before any operation. Steps therefore free stopped claims only as
// far as the operation's outcome demands (a grant that needs the
// conflicting ones gone, a read that no longer shows them); freeing more
// than needed is always still possible later, except when freeing them all
// resets the volume's access mode, which is its own branch.

// opKind is what an operation of the history did.
type opKind int

const (
	opClaim opKind = iota // CSIVolume.Claim for an allocation
	opStop                // Job.Deregister of the allocation's job
	opRead                // CSIVolume.Get, a consistent read
)

func (k opKind) String() string {
	return [...]string{"claim", "stop", "read"}[k]
}

// modelVolume is what the model knows of a volume: its capabilities.
type modelVolume struct {
	ID   string
	Caps []structs.CSIVolumeAccessMode
}

// claimInput is one operation's input. Alloc numbers the allocations of
// the volume's partition in the order the recorder first saw them.
type claimInput struct {
	Kind   opKind
	Volume *modelVolume
	Alloc  int
	Write  bool
	Access structs.CSIVolumeAccessMode
}

// outcome is how an operation ended, as far as the caller can tell.
type outcome int

const (
	// outOK: a claim was granted, a stop or a read succeeded.
	outOK outcome = iota
	// outRefused: the servers refused the operation before writing
	// anything (a claim conflict, a terminal allocation, a job unknown).
	outRefused
	// outNoEffect: nothing can have been committed (no leader, retryable),
	// whatever the state.
	outNoEffect
	// outUnknown: the operation may or may not have taken effect, now or
	// later (a timeout, a broken connection, leadership lost mid-commit).
	// Its return time is infinite.
	outUnknown
)

func (o outcome) String() string {
	return [...]string{"ok", "refused", "no-effect", "unknown"}[o]
}

// readClaim is one claim a read showed.
type readClaim struct {
	Alloc int
	Write bool
	Past  bool
}

// claimOutput is one operation's output. A read's output is the volume's
// current access mode and claims; Detail keeps the error or the claims as
// text for failure reports.
type claimOutput struct {
	Outcome outcome
	Mode    structs.CSIVolumeAccessMode
	Claims  []readClaim
	Detail  string
}

// modelClaim is one live claim of the model.
type modelClaim struct {
	Alloc int
	Write bool
}

// modelState is one possible state of a volume: its current access mode,
// its claims (sorted by allocation) and the allocations whose stop took
// effect. Values are never changed once built; key identifies them.
type modelState struct {
	Mode    structs.CSIVolumeAccessMode
	Claims  []modelClaim
	Stopped []int // sorted
	key     string
}

func newModelState(mode structs.CSIVolumeAccessMode, claims []modelClaim, stopped []int) *modelState {
	if len(claims) == 0 {
		// The last claim freed resets the current modes.
		mode = structs.CSIVolumeAccessModeUnknown
	}
	s := &modelState{Mode: mode, Claims: claims, Stopped: stopped}
	var b strings.Builder
	fmt.Fprintf(&b, "%s|", mode)
	for _, c := range claims {
		fmt.Fprintf(&b, "%d:%t,", c.Alloc, c.Write)
	}
	b.WriteByte('|')
	for _, a := range stopped {
		fmt.Fprintf(&b, "%d,", a)
	}
	s.key = b.String()
	return s
}

func (s *modelState) stopped(alloc int) bool {
	_, found := slices.BinarySearch(s.Stopped, alloc)
	return found
}

func (s *modelState) claimOf(alloc int) (modelClaim, bool) {
	for _, c := range s.Claims {
		if c.Alloc == alloc {
			return c, true
		}
	}
	return modelClaim{}, false
}

// without returns the state with the given allocations' claims freed.
func (s *modelState) without(free map[int]bool) *modelState {
	if len(free) == 0 {
		return s
	}
	var claims []modelClaim
	for _, c := range s.Claims {
		if !free[c.Alloc] {
			claims = append(claims, c)
		}
	}
	return newModelState(s.Mode, claims, s.Stopped)
}

func (s *modelState) String() string {
	var parts []string
	for _, c := range s.Claims {
		kind := "read"
		if c.Write {
			kind = "write"
		}
		past := ""
		if s.stopped(c.Alloc) {
			past = " (stopped)"
		}
		parts = append(parts, fmt.Sprintf("a%d %s%s", c.Alloc, kind, past))
	}
	mode := string(s.Mode)
	if mode == "" {
		mode = "unclaimed"
	}
	return fmt.Sprintf("%s [%s]", mode, strings.Join(parts, ", "))
}

// conflicts reports whether, under the current access mode mode, another
// allocation's claim other stands in the way of a new claim that writes
// or reads (the claim table of DESIGN.md). A write under a reader-only
// mode conflicts with every claim: it is refused while the volume is
// claimed at all.
func conflicts(mode structs.CSIVolumeAccessMode, write bool, other modelClaim) bool {
	switch mode {
	case structs.CSIVolumeAccessModeSingleNodeReader:
		return write || !other.Write
	case structs.CSIVolumeAccessModeSingleNodeWriter:
		return true
	case structs.CSIVolumeAccessModeMultiNodeReader:
		return write
	case structs.CSIVolumeAccessModeMultiNodeSingleWriter:
		return write && other.Write
	}
	return false
}

// validClaim is whether a claim's own shape passes: its access mode is one
// of the volume's, and only a writer mode writes.
func validClaim(in claimInput) bool {
	if !slices.Contains(in.Volume.Caps, in.Access) {
		return false
	}
	if in.Write {
		switch in.Access {
		case structs.CSIVolumeAccessModeSingleNodeReader, structs.CSIVolumeAccessModeMultiNodeReader:
			return false
		}
	}
	return true
}

// grants returns the states a granted claim can leave, each reached by
// freeing as few stopped claims as the grant needs; none when it cannot be
// granted from s.
func grants(s *modelState, in claimInput) []*modelState {
	if s.stopped(in.Alloc) || !validClaim(in) {
		return nil
	}
	if held, ok := s.claimOf(in.Alloc); ok && (held.Write || !in.Write) {
		// A repeat (clients retry) keeps what the allocation holds.
		return []*modelState{s}
	}
	var out []*modelState
	// Free the stopped claims in the way, if nothing live is.
	free := map[int]bool{}
	possible := true
	for _, c := range s.Claims {
		if c.Alloc == in.Alloc || !conflicts(s.Mode, in.Write, c) {
			continue
		}
		if !s.stopped(c.Alloc) {
			possible = false
			break
		}
		free[c.Alloc] = true
	}
	if possible {
		out = append(out, take(s.without(free), in))
	}
	// Or every claim was stopped and freed, which resets the access mode.
	allStopped := len(s.Claims) > 0
	for _, c := range s.Claims {
		if c.Alloc != in.Alloc && !s.stopped(c.Alloc) {
			allStopped = false
		}
	}
	if allStopped {
		all := map[int]bool{}
		for _, c := range s.Claims {
			all[c.Alloc] = true
		}
		out = append(out, take(s.without(all), in))
	}
	return out
}

// take records the claim on s, whose conflicts are gone.
func take(s *modelState, in claimInput) *modelState {
	mode := s.Mode
	if len(s.Claims) == 0 {
		mode = in.Access
	}
	claims := slices.DeleteFunc(slices.Clone(s.Claims), func(c modelClaim) bool { return c.Alloc == in.Alloc })
	claims = append(claims, modelClaim{Alloc: in.Alloc, Write: in.Write})
	sort.Slice(claims, func(i, j int) bool { return claims[i].Alloc < claims[j].Alloc })
	return newModelState(mode, claims, s.Stopped)
}

// stop records that the allocation's stop took effect: its claim, if any,
// is a past claim from now on, free to vanish.
func stop(s *modelState, alloc int) *modelState {
	if s.stopped(alloc) {
		return s
	}
	stopped := slices.Clone(s.Stopped)
	i, _ := slices.BinarySearch(stopped, alloc)
	stopped = slices.Insert(stopped, i, alloc)
	return newModelState(s.Mode, s.Claims, stopped)
}

// read returns the state a read's output shows, or nil when no state
// reachable from s by freeing stopped claims shows exactly that.
func read(s *modelState, out claimOutput) *modelState {
	shown := map[int]readClaim{}
	for _, c := range out.Claims {
		if _, dup := shown[c.Alloc]; dup {
			return nil
		}
		shown[c.Alloc] = c
	}
	free := map[int]bool{}
	for _, c := range s.Claims {
		r, ok := shown[c.Alloc]
		switch {
		case !ok && s.stopped(c.Alloc):
			free[c.Alloc] = true
		case !ok:
			return nil // a live claim is missing
		case r.Write != c.Write || r.Past != s.stopped(c.Alloc):
			return nil
		}
		delete(shown, c.Alloc)
	}
	if len(shown) > 0 {
		return nil // a claim the model does not have
	}
	next := s.without(free)
	if next.Mode != out.Mode {
		return nil
	}
	return next
}

// stepClaims is the model's step: every state s can move to on the
// operation.
func stepClaims(state, input, output any) []any {
	s := state.(*modelState)
	in := input.(claimInput)
	out := output.(claimOutput)
	switch in.Kind {
	case opClaim:
		switch out.Outcome {
		case outOK:
			return asAny(grants(s, in))
		case outRefused:
			if !allowedAsIs(s, in) {
				return []any{s}
			}
			return nil
		case outNoEffect:
			return []any{s}
		default:
			return append([]any{s}, asAny(grants(s, in))...)
		}
	case opStop:
		switch out.Outcome {
		case outOK:
			return []any{stop(s, in.Alloc)}
		case outRefused:
			// A stop is recorded only for a job whose allocation was seen,
			// and jobs are never purged: "job not found" is a stale answer.
			return nil
		case outNoEffect:
			return []any{s}
		default:
			return []any{s, stop(s, in.Alloc)}
		}
	case opRead:
		if out.Outcome != outOK {
			return []any{s}
		}
		if next := read(s, out); next != nil {
			return []any{next}
		}
		return nil
	}
	return nil
}

// allowedAsIs reports whether s, without freeing anything, lets the claim
// be granted. Freeing claims only removes conflicts (or empties the
// volume, which lets any valid claim in), so a refusal is right exactly
// when this is false.
func allowedAsIs(s *modelState, in claimInput) bool {
	if s.stopped(in.Alloc) || !validClaim(in) {
		return false
	}
	if held, ok := s.claimOf(in.Alloc); ok && (held.Write || !in.Write) {
		return true
	}
	for _, c := range s.Claims {
		if c.Alloc != in.Alloc && conflicts(s.Mode, in.Write, c) {
			return false
		}
	}
	return true
}

func asAny(states []*modelState) []any {
	out := make([]any, len(states))
	for i, s := range states {
		out[i] = s
	}
	return out
}

// claimModel is the porcupine model of a volume's claims.
var claimModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byVolume := map[string][]porcupine.Operation{}
		for _, op := range history {
			id := op.Input.(claimInput).Volume.ID
			byVolume[id] = append(byVolume[id], op)
		}
		var out [][]porcupine.Operation
		for _, id := range slices.Sorted(maps.Keys(byVolume)) {
			out = append(out, byVolume[id])
		}
		return out
	},
	Init: func() []any { return []any{newModelState("", nil, nil)} },
	Step: stepClaims,
	Equal: func(a, b any) bool {
		return a.(*modelState).key == b.(*modelState).key
	},
	Hash: func(s any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s.(*modelState).key))
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(claimInput), output.(claimOutput)
		switch in.Kind {
		case opClaim:
			kind := "read"
			if in.Write {
				kind = "write"
			}
			return fmt.Sprintf("claim a%d %s %s -> %s %s", in.Alloc, kind, in.Access, out.Outcome, out.Detail)
		case opStop:
			return fmt.Sprintf("stop a%d -> %s %s", in.Alloc, out.Outcome, out.Detail)
		}
		return fmt.Sprintf("read -> %s %s", out.Outcome, out.Detail)
	},
	DescribeState: func(s any) string { return s.(*modelState).String() },
}).ToModel()
