package state

import (
	"fmt"
	"testing"

	"github.com/volplane/volplane/structs"
)

// BenchmarkCSIVolumeStubs lists every volume, as the volume list endpoint
// does without paging. Ten plugins, so each list reads ten plugin rows.
// "unchanged" lists a state that did not change since the last list (the
// list memo answers); "written" writes one volume before each list, so
// every list scans the store, as lists do under a steady stream of writes.
func BenchmarkCSIVolumeStubs(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		for _, written := range []bool{false, true} {
			name := fmt.Sprintf("volumes=%d/unchanged", n)
			if written {
				name = fmt.Sprintf("volumes=%d/written", n)
			}
			b.Run(name, func(b *testing.B) {
				s := TestStateStore(b)
				for i := range 10 {
					node := healthyNodePlugin(fmt.Sprintf("node-%d", i), fmt.Sprintf("plugin-%d", i))
					if err := s.UpsertNode(uint64(i+1), node); err != nil {
						b.Fatal(err)
					}
				}
				vols := make([]*structs.CSIVolume, n)
				for i := range vols {
					vols[i] = testVolume(fmt.Sprintf("vol-%05d", i), fmt.Sprintf("plugin-%d", i%10))
					vols[i].Topologies = []*structs.CSITopology{{Segments: map[string]string{"zone": "a"}}}
				}
				if err := s.UpsertCSIVolume(100, vols); err != nil {
					b.Fatal(err)
				}
				index := uint64(100)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if written {
						b.StopTimer()
						index++
						v := vols[int(index)%n].Copy()
						v.MountOptions = &structs.CSIMountOptions{FSType: fmt.Sprint("fs-", index)}
						if err := s.UpsertCSIVolume(index, []*structs.CSIVolume{v}); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					stubs, _, err := s.CSIVolumeStubs(nil, structs.DefaultNamespace, "", "", "", 0)
					if err != nil || len(stubs) != n {
						b.Fatalf("got %d stubs, err %v", len(stubs), err)
					}
				}
			})
		}
	}
}

// BenchmarkCSIVolumeWrite updates one volume that eight allocations read,
// as every committed write does on every server, with the event broker as
// the store has it (nobody subscribed) and without one, to show what
// publishing the events costs.
func BenchmarkCSIVolumeWrite(b *testing.B) {
	for _, broker := range []bool{true, false} {
		b.Run(fmt.Sprintf("events=%t", broker), func(b *testing.B) {
			s := TestStateStore(b)
			if !broker {
				s.events = nil
			}
			if err := s.UpsertNode(1, healthyNodePlugin("n1", "p")); err != nil {
				b.Fatal(err)
			}
			if err := s.UpsertCSIVolume(2, []*structs.CSIVolume{testVolume("vol", "p")}); err != nil {
				b.Fatal(err)
			}
			for i := range 8 {
				id := fmt.Sprintf("a%d", i)
				if err := s.UpsertAllocs(uint64(10+2*i), []*structs.Allocation{testAlloc(id, "n1")}); err != nil {
					b.Fatal(err)
				}
				c := readClaim(id, "n1")
				c.PublishContext = map[string]string{"device": "/dev/xvdb"}
				if err := s.CSIVolumeClaim(uint64(11+2*i), 1, ns, "vol", c); err != nil {
					b.Fatal(err)
				}
			}
			vol := testVolume("vol", "p")
			index := uint64(100)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				index++
				vol.Context = map[string]string{"generation": fmt.Sprint(index)}
				if err := s.UpsertCSIVolume(index, []*structs.CSIVolume{vol}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimRelease takes one claim through the state writes of its
// release, as each server applies them: the allocation stopped, its client
// reporting the tasks stopped, the node step's checkpoint and the free.
// The store holds the other claims being released.
func BenchmarkClaimRelease(b *testing.B) {
	s := TestStateStore(b)
	if err := s.UpsertNode(1, healthyNodePlugin("n1", "p")); err != nil {
		b.Fatal(err)
	}
	index := uint64(10)
	allocs := make([]*structs.Allocation, b.N)
	for i := range b.N {
		vol := testVolume(fmt.Sprintf("vol-%06d", i), "p")
		vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
		vol.Context = map[string]string{"zone": "a"}
		a := testAlloc(fmt.Sprintf("alloc-%06d", i), "n1")
		c := writeClaim(a.ID, "n1")
		c.PublishContext = map[string]string{"device": "/dev/xvdb"}
		index += 3
		if err := s.UpsertCSIVolume(index, []*structs.CSIVolume{vol}); err != nil {
			b.Fatal(err)
		}
		if err := s.UpsertAllocs(index+1, []*structs.Allocation{a}); err != nil {
			b.Fatal(err)
		}
		if err := s.CSIVolumeClaim(index+2, 1, ns, vol.ID, c); err != nil {
			b.Fatal(err)
		}
		allocs[i] = a
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i, a := range allocs {
		volID := fmt.Sprintf("vol-%06d", i)
		stopped := a.Copy()
		stopped.DesiredStatus = structs.AllocDesiredStatusStop
		index++
		if err := s.UpsertAllocs(index, []*structs.Allocation{stopped}); err != nil {
			b.Fatal(err)
		}
		done := stopped.Copy()
		done.ClientStatus = structs.AllocClientStatusComplete
		index++
		if err := s.UpdateAllocsFromClient(index, []*structs.Allocation{done}); err != nil {
			b.Fatal(err)
		}
		c := writeClaim(a.ID, "n1")
		for _, st := range []structs.CSIVolumeClaimState{structs.CSIVolumeClaimStateNodeDetached, structs.CSIVolumeClaimStateReadyToFree} {
			c.State = st
			index++
			refused, err := s.CSIVolumeCheckpoints(index, 2, ns, []structs.CSIVolumeCheckpoint{{VolumeID: volID, Claim: c}})
			if err != nil || refused[0] != nil {
				b.Fatal(err, refused[0])
			}
		}
	}
}

// BenchmarkCSIVolumeClaimBatch applies claims as a server's FSM applies the
// leader's claim entries at 64 callers: 64 claims to one transaction, each
// a write claim by its own allocation on a volume of its own, in a store
// that holds 10,000 other volumes.
func BenchmarkCSIVolumeClaimBatch(b *testing.B) {
	const batch, others = 64, 10000
	s := TestStateStore(b)
	if err := s.UpsertNode(1, healthyNodePlugin("n1", "p")); err != nil {
		b.Fatal(err)
	}
	index := uint64(10)
	var vols []*structs.CSIVolume
	for i := range others {
		vols = append(vols, testVolume(fmt.Sprintf("other-%06d", i), "p"))
	}
	n := b.N
	allocs := make([]*structs.Allocation, n)
	for i := range n {
		vols = append(vols, testVolume(fmt.Sprintf("vol-%06d", i), "p"))
		allocs[i] = testAlloc(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), "n1")
	}
	index++
	if err := s.UpsertCSIVolume(index, vols); err != nil {
		b.Fatal(err)
	}
	index++
	if err := s.UpsertAllocs(index, allocs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for start := 0; start < n; start += batch {
		end := min(start+batch, n)
		first := index + 1
		index += uint64(end - start)
		err := s.WriteBatch(index, func(bt *Batch) error {
			for i := start; i < end; i++ {
				c := writeClaim(allocs[i].ID, "n1")
				if err := bt.CSIVolumeClaim(first+uint64(i-start), 1, ns, fmt.Sprintf("vol-%06d", i), c); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
