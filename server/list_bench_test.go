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
func BenchmarkHTTPVolumeList(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := TestServer(b, nil)
			WaitForLeader(b, s)
			var nr structs.NodeUpdateResponse
			if err := s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: mock.Node("dev")}, &nr); err != nil {
				b.Fatal(err)
			}
			for first := 0; first < n; first += 500 {
				var vols []*structs.CSIVolume
				for i := first; i < min(n, first+500); i++ {
					v := mock.CSIVolume("dev")
					v.ID = fmt.Sprintf("vol-%06d", i)
					vols = append(vols, v)
				}
				var reply structs.CSIVolumeRegisterResponse
				if err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: vols}, &reply); err != nil {
					b.Fatal(err)
				}
			}
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			url := "http://" + s.HTTPAddr() + "/v1/volumes"
			// CPU per list (server and client share the process): on a
			// loaded machine the wall time says more about the neighbours.
			var before syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.ResetTimer()
			for b.Loop() {
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
			}
			var after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
