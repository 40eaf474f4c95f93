//go:build unix

package server

import (
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

// BenchmarkHTTPVolumeList lists 1,000 and 10,000 volumes over HTTP from
// the leader of a one-server cluster, as a client that does not ask for
// gzip: what the server spends on a list, without the client's decoding.
// "unchanged" lists a state that did not change since the last list (the
// state store's list memo and the handler's last body answer); "written"
// updates one volume before each list (outside the timing), so every list
// scans the store and assembles its body from the stub cache, as lists do
// under a steady stream of writes.
func BenchmarkHTTPVolumeList(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		for _, written := range []bool{false, true} {
			name := fmt.Sprintf("%d/unchanged", n)
			if written {
				name = fmt.Sprintf("%d/written", n)
			}
			b.Run(name, func(b *testing.B) { benchHTTPVolumeList(b, n, written) })
		}
	}
}

func benchHTTPVolumeList(b *testing.B, n int, written bool) {
	s := TestServer(b, nil)
	WaitForLeader(b, s)
	var nr structs.NodeUpdateResponse
	if err := s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: mock.Node("dev")}, &nr); err != nil {
		b.Fatal(err)
	}
	var vols []*structs.CSIVolume
	for first := 0; first < n; first += 500 {
		var batch []*structs.CSIVolume
		for i := first; i < min(n, first+500); i++ {
			v := mock.CSIVolume("dev")
			v.ID = fmt.Sprintf("vol-%06d", i)
			batch = append(batch, v)
		}
		var reply structs.CSIVolumeRegisterResponse
		if err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: batch}, &reply); err != nil {
			b.Fatal(err)
		}
		vols = append(vols, batch...)
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	url := "http://" + s.HTTPAddr() + "/v1/volumes"
	// CPU per list (server and client share the process): on a loaded
	// machine the wall time says more about the neighbours. Only the
	// lists' CPU counts, not the writes'.
	var cpu time.Duration
	writes := 0
	b.ResetTimer()
	for b.Loop() {
		if written {
			b.StopTimer()
			writes++
			v := vols[writes%n].Copy()
			v.MountOptions = &structs.CSIMountOptions{FSType: fmt.Sprint("fs", writes)}
			var reply structs.CSIVolumeRegisterResponse
			if err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{v}}, &reply); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu += time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
