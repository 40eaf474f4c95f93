package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/structs"
)

// BenchmarkApplyRegister applies one-volume register entries of new
// volumes, as every server does for each CSIVolume.Register, onto a store
// that already holds 10,000 volumes. batch=1 is FSM.Apply per entry; the
// larger batches are what Raft hands ApplyBatch under concurrent writers.
func BenchmarkApplyRegister(b *testing.B) {
	for _, batch := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			f, err := New(hclog.NewNullLogger())
			if err != nil {
				b.Fatal(err)
			}
			index := uint64(1)
			if err := f.State().UpsertNode(index, testNode("n1", "p")); err != nil {
				b.Fatal(err)
			}
			entry := func(n int) *raft.Log {
				v := testVolume(ns, fmt.Sprintf("vol-%08d", n), "p")
				buf, err := structs.Encode(structs.CSIVolumeRegisterRequestType,
					&structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{v}, Timestamp: 1700000000})
				if err != nil {
					b.Fatal(err)
				}
				index++
				return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: buf}
			}
			for n := range 10_000 {
				if resp := f.Apply(entry(n)); resp != nil {
					b.Fatal(resp)
				}
			}
			logs := make([]*raft.Log, 0, b.N)
			for n := range b.N {
				logs = append(logs, entry(10_000+n))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for len(logs) > 0 {
				n := min(batch, len(logs))
				for _, resp := range f.ApplyBatch(logs[:n]) {
					if resp != nil {
						b.Fatal(resp)
					}
				}
				logs = logs[n:]
			}
		})
	}
}
