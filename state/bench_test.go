package state

import (
	"fmt"
	"testing"

	"github.com/volplane/volplane/structs"
)

// BenchmarkCSIVolumeStubs lists every volume, as the volume list endpoint
// does without paging. Ten plugins, so each list reads ten plugin rows.
func BenchmarkCSIVolumeStubs(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
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
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				stubs, _, err := s.CSIVolumeStubs(nil, structs.DefaultNamespace, "", "", "", 0)
				if err != nil || len(stubs) != n {
					b.Fatalf("got %d stubs, err %v", len(stubs), err)
				}
			}
		})
	}
}
