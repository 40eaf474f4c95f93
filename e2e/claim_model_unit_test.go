package e2e

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// The model is what decides that a fault run had no violation, so it must
// be seen to find them: each history here is one the servers could have
// produced, or one they must never produce.

const (
	snr  = structs.CSIVolumeAccessModeSingleNodeReader
	snw  = structs.CSIVolumeAccessModeSingleNodeWriter
	mnr  = structs.CSIVolumeAccessModeMultiNodeReader
	mnsw = structs.CSIVolumeAccessModeMultiNodeSingleWriter
	mnmw = structs.CSIVolumeAccessModeMultiNodeMultiWriter
)

// historyBuilder writes operations one after the other (each returns
// before the next is invoked) unless told they overlap.
type historyBuilder struct {
	vol *modelVolume
	ops []porcupine.Operation
	now int64
}

func newModelHistory(caps ...structs.CSIVolumeAccessMode) *historyBuilder {
	return &historyBuilder{vol: &modelVolume{ID: "v", Caps: caps}}
}

func (h *historyBuilder) add(in claimInput, out claimOutput) *historyBuilder {
	in.Volume = h.vol
	ret := h.now + 1
	if out.Outcome == outUnknown {
		ret = math.MaxInt64
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: len(h.ops), Input: in, Call: h.now, Output: out, Return: ret})
	h.now += 2
	return h
}

func (h *historyBuilder) claim(alloc int, write bool, access structs.CSIVolumeAccessMode, o outcome) *historyBuilder {
	return h.add(claimInput{Kind: opClaim, Alloc: alloc, Write: write, Access: access}, claimOutput{Outcome: o})
}

func (h *historyBuilder) stop(alloc int, o outcome) *historyBuilder {
	return h.add(claimInput{Kind: opStop, Alloc: alloc}, claimOutput{Outcome: o})
}

func (h *historyBuilder) read(mode structs.CSIVolumeAccessMode, claims ...readClaim) *historyBuilder {
	return h.add(claimInput{Kind: opRead}, claimOutput{Outcome: outOK, Mode: mode, Claims: claims})
}

func (h *historyBuilder) check(t *testing.T) porcupine.CheckResult {
	t.Helper()
	res, _ := porcupine.CheckOperationsVerbose(claimModel, h.ops, 10*time.Second)
	return res
}

func w(alloc int) readClaim     { return readClaim{Alloc: alloc, Write: true} }
func r(alloc int) readClaim     { return readClaim{Alloc: alloc} }
func pastW(alloc int) readClaim { return readClaim{Alloc: alloc, Write: true, Past: true} }

func TestClaimModel_Linearizable(t *testing.T) {
	cases := map[string]*historyBuilder{
		"single writer handed over": newModelHistory(snw).
			claim(1, true, snw, outOK).
			claim(2, true, snw, outRefused).
			claim(1, true, snw, outOK). // a repeat
			read(snw, w(1)).
			stop(1, outOK).
			read(snw, pastW(1)).
			claim(2, true, snw, outRefused). // not freed yet
			claim(2, true, snw, outOK).      // freed meanwhile
			read(snw, w(2)),
		"a stopped claim vanishes from one read to the next": newModelHistory(mnsw).
			claim(1, true, mnsw, outOK).
			claim(2, false, mnsw, outOK).
			stop(1, outOK).
			read(mnsw, pastW(1), r(2)).
			read(mnsw, r(2)).
			stop(2, outOK).
			read(""),
		"readers and one writer": newModelHistory(mnsw).
			claim(1, false, mnsw, outOK).
			claim(2, false, mnsw, outOK).
			claim(3, true, mnsw, outOK).
			claim(4, true, mnsw, outRefused).
			read(mnsw, r(1), r(2), w(3)),
		"single-node reader takes one reader": newModelHistory(snr).
			claim(1, false, snr, outOK).
			claim(2, false, snr, outRefused).
			claim(3, true, snr, outRefused),
		"an unknown claim may land late": newModelHistory(snw).
			claim(1, true, snw, outUnknown).
			read("").
			read(snw, w(1)),
		"an unknown claim may never land": newModelHistory(snw).
			claim(1, true, snw, outUnknown).
			claim(2, true, snw, outOK).
			read(snw, w(2)),
		"a claim that cannot have committed": newModelHistory(snw).
			claim(1, true, snw, outNoEffect).
			read(""),
		"an unknown stop": newModelHistory(snw).
			claim(1, true, snw, outOK).
			stop(1, outUnknown).
			read(snw, pastW(1)),
		"the first claim sets the mode": newModelHistory(snw, mnmw).
			claim(1, true, mnmw, outOK).
			claim(2, true, snw, outOK). // checked against multi-node-multi-writer
			read(mnmw, w(1), w(2)).
			stop(1, outOK).
			stop(2, outOK).
			claim(3, true, snw, outOK). // both freed: the mode starts over
			claim(4, true, mnmw, outRefused).
			read(snw, w(3)),
		"a claim after its stop is refused": newModelHistory(mnmw).
			claim(1, true, mnmw, outOK).
			stop(1, outOK).
			claim(1, true, mnmw, outRefused),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			must.Eq(t, porcupine.Ok, h.check(t))
		})
	}
}

func TestClaimModel_Violations(t *testing.T) {
	cases := map[string]*historyBuilder{
		"two single-node writers": newModelHistory(snw).
			claim(1, true, snw, outOK).
			claim(2, true, snw, outOK),
		"two multi-node writers of a single-writer volume": newModelHistory(mnsw).
			claim(1, true, mnsw, outOK).
			claim(2, false, mnsw, outOK).
			claim(3, true, mnsw, outOK),
		"two single-node readers": newModelHistory(snr).
			claim(1, false, snr, outOK).
			claim(2, false, snr, outOK),
		"a writer on a reader-only volume": newModelHistory(mnr).
			claim(1, true, mnr, outOK),
		"a refusal with nothing in the way": newModelHistory(snw).
			claim(1, true, snw, outRefused),
		"a refusal by a claim already freed": newModelHistory(snw).
			claim(1, true, snw, outOK).
			stop(1, outOK).
			read(""). // freed
			claim(2, true, snw, outRefused),
		"a claim granted after its allocation stopped": newModelHistory(mnmw).
			claim(1, true, mnmw, outOK).
			stop(1, outOK).
			read("").
			claim(1, true, mnmw, outOK),
		"a live claim vanishes": newModelHistory(snw).
			claim(1, true, snw, outOK).
			read(""),
		"a live claim shown as being released": newModelHistory(snw).
			claim(1, true, snw, outOK).
			read(snw, pastW(1)),
		"a stopped claim not shown as being released": newModelHistory(snw).
			claim(1, true, snw, outOK).
			stop(1, outOK).
			read(snw, w(1)),
		"a claim nobody took": newModelHistory(mnmw).
			read(mnmw, w(7)),
		"a freed claim comes back": newModelHistory(snw).
			claim(1, true, snw, outOK).
			stop(1, outOK).
			read("").
			read(snw, pastW(1)),
		"the wrong mode": newModelHistory(snw, mnmw).
			claim(1, true, mnmw, outOK).
			read(snw, w(1)),
		"the job of a placed allocation not found": newModelHistory(snw).
			claim(1, true, snw, outOK).
			stop(1, outRefused),
		"a refusal that cannot have committed": newModelHistory(snw).
			claim(1, true, snw, outNoEffect).
			read(snw, w(1)),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			must.Eq(t, porcupine.Illegal, h.check(t))
		})
	}
}
