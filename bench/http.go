package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"time"
)

// The http phase: a 3-server cluster of agent processes, driven over HTTP
// as an operator's tools drive it.
const (
	// PhaseHTTP lists volumes on the leader, on a follower (a default read,
	// answered after a read-index check) and on a follower with ?stale, at
	// each of Config.ListSizes volumes, and registers volumes over HTTP at
	// 1, 16 and 64 writers (PhaseHTTPList, PhaseHTTPRegister).
	PhaseHTTP         = "http"
	PhaseHTTPList     = "http-list"
	PhaseHTTPRegister = "http-register"
)

// Targets of the http phase.
const (
	// HTTPListSmallTarget is the p50 a list of up to 1,000 volumes must
	// stay within on any server, leader or follower.
	HTTPListSmallTarget = 2 * time.Millisecond
	// HTTPListLargeTarget is the p50 a list of up to 10,000 volumes must
	// stay within on the leader.
	HTTPListLargeTarget = 10 * time.Millisecond
)

// httpListTarget is the p50 target of a list of size volumes on where
// ("leader", "follower", "follower-stale", "leader-gzip",
// "leader-written"); 0 for none.
func httpListTarget(size int, where string) time.Duration {
	switch {
	case size <= 1_000 && (where == "leader" || where == "follower"):
		return HTTPListSmallTarget
	case size <= 10_000 && (where == "leader" || where == "leader-written"):
		return HTTPListLargeTarget
	}
	return 0
}

// httpRegisterWriters are the register levels of the http phase.
var httpRegisterWriters = []int{1, 16, 64}

// runHTTP runs the http phase on a cluster of its own.
func runHTTP(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	cfg.progress("http: starting 3 server agents as processes")
	pc, err := startProcCluster(ctx, cfg.Binary, filepath.Join(dir, "http"), clusterSize, cfg.serverHCL(0))
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var heartbeats sync.WaitGroup
	defer func() {
		close(stop)
		heartbeats.Wait()
		cfg.progress("http: stopping the agents")
		err = errors.Join(err, pc.close())
	}()
	leader, err := pc.waitLeader(ctx)
	if err != nil {
		return err
	}
	var follower *procServer
	for _, s := range pc.servers {
		if s != leader {
			follower = s
			break
		}
	}
	if err := pc.registerNode(leader, stop, &heartbeats); err != nil {
		return err
	}

	plain := &http.Client{Timeout: callTimeout, Transport: &http.Transport{DisableCompression: true}}
	gzipped := &http.Client{Timeout: callTimeout}
	have := 0
	for _, size := range cfg.ListSizes {
		cfg.progress("http: registering volumes %d to %d, %d per request", have+1, size, cfg.ListBatch)
		if err := pc.registerRange(ctx, leader, have+1, size, cfg.ListBatch); err != nil {
			return err
		}
		have = size
		// Every side lists every volume: the follower has them all.
		for _, s := range []*procServer{leader, follower} {
			var stubs []json.RawMessage
			if err := pc.get(ctx, s, "/v1/volumes?stale", &stubs); err != nil {
				return err
			}
			if len(stubs) != size {
				// A stale read may lag; a default read may not.
				if err := pc.get(ctx, s, "/v1/volumes", &stubs); err != nil {
					return err
				}
				if len(stubs) != size {
					return fmt.Errorf("server %s lists %d volumes, want %d", s.name, len(stubs), size)
				}
			}
		}
		sides := []*side{
			{name: "leader", run: listSide(ctx, plain, leader.httpAddr+"/v1/volumes")},
			{name: "follower", run: listSide(ctx, plain, follower.httpAddr+"/v1/volumes")},
			{name: "follower-stale", run: listSide(ctx, plain, follower.httpAddr+"/v1/volumes?stale")},
			{name: "leader-gzip", run: listSide(ctx, gzipped, leader.httpAddr+"/v1/volumes")},
			{name: "leader-written", run: listAfterWriteSide(ctx, plain, leader.httpAddr, leader.httpAddr+"/v1/volumes", size)},
		}
		if err := interleave(cfg, PhaseHTTPList, 1, cfg.ListRequests, cfg.Rounds, sides); err != nil {
			return err
		}
		plainBytes, gzBytes, err := listBytes(ctx, leader.httpAddr+"/v1/volumes")
		if err != nil {
			return err
		}
		for _, sd := range sides {
			st := sd.s.stats()
			res := newResult(PhaseHTTPList, 1, st)
			res.Volumes, res.Cluster = size, sd.name
			res.Detail = fmt.Sprintf("%d volumes, %d bytes of JSON", size, plainBytes)
			switch sd.name {
			case "leader-gzip":
				res.Detail = fmt.Sprintf("%d volumes, %d bytes gzipped (Accept-Encoding: gzip, decompressed by the client)", size, gzBytes)
			case "leader-written":
				res.Detail = fmt.Sprintf("%d volumes, each list after an update of one of them (not timed)", size)
			}
			if t := httpListTarget(size, sd.name); t > 0 {
				pass := st.p50 <= t
				res.Target = "p50 <= " + t.String()
				res.Pass = &pass
			}
			rep.Results = append(rep.Results, res)
			cfg.progress("http: list of %d volumes on the %s: p50 %v, p99 %v", size, sd.name, st.p50, st.p99)
		}
	}

	next := have + 1
	for _, writers := range httpRegisterWriters {
		ops := cfg.HTTPRegisterOps
		if writers == 1 {
			ops = max(1, ops/4)
		}
		cfg.progress("http: %d registers over HTTP with %d writers", ops, writers)
		first := next
		next += ops
		client := &http.Client{Timeout: callTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: writers}}
		samples, wall, err := drive(ctx, ops, writers, func(i int) error {
			return httpRegister(ctx, client, leader.httpAddr, first+i)
		})
		// Each level's connections go: they count against the server's
		// per-address limit.
		client.CloseIdleConnections()
		if err != nil {
			return fmt.Errorf("registering over HTTP with %d writers: %w", writers, err)
		}
		var s series
		s.add(samples, wall)
		res := newResult(PhaseHTTPRegister, writers, s.stats())
		res.Cluster = "leader"
		res.Detail = "PUT /v1/volume/csi/:id, one volume per request, to the leader"
		rep.Results = append(rep.Results, res)
	}
	if now, err := pc.agreedLeader(ctx); err != nil || now != leader {
		rep.Notes = append(rep.Notes, "the leader changed during the http phase: figures are skewed")
	}
	return nil
}

// listAfterWriteSide lists the volumes at url, one request at a time,
// each after an update of one of the size volumes through the leader at
// addr, which is not timed: every list then sees a state written since the
// one before, as lists do under a stream of writes.
func listAfterWriteSide(ctx context.Context, client *http.Client, addr, url string, size int) func(n int) ([]time.Duration, time.Duration, error) {
	writes := 0
	return func(n int) ([]time.Duration, time.Duration, error) {
		samples := make([]time.Duration, 0, n)
		var wall time.Duration
		for range n {
			writes++
			if err := httpRegisterWith(ctx, client, addr, 1+writes%size, fmt.Sprint("fs", writes)); err != nil {
				return nil, 0, err
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return nil, 0, err
			}
			t0 := time.Now()
			if err := sendDiscard(client, req, "GET "+url); err != nil {
				return nil, 0, err
			}
			d := time.Since(t0)
			samples = append(samples, d)
			wall += d
		}
		return samples, wall, nil
	}
}

// listSide lists the volumes at url, one request at a time.
func listSide(ctx context.Context, client *http.Client, url string) func(n int) ([]time.Duration, time.Duration, error) {
	return func(n int) ([]time.Duration, time.Duration, error) {
		return drive(ctx, n, 1, func(int) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			return sendDiscard(client, req, "GET "+url)
		})
	}
}

// listBytes returns the size of the list at url, plain and gzipped.
func listBytes(ctx context.Context, url string) (plain, gz int64, err error) {
	for i, enc := range []string{"", "gzip"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, 0, err
		}
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		// A transport that leaves the body as sent.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		if i == 0 {
			plain = n
		} else {
			gz = n
		}
	}
	return plain, gz, nil
}

// httpRegister registers benchmark volume n with Nomad's request body.
func httpRegister(ctx context.Context, client *http.Client, addr string, n int) error {
	return httpRegisterWith(ctx, client, addr, n, "")
}

// httpRegisterWith registers benchmark volume n, with fsType as its mount
// options' file system type when it is not empty: registering a volume
// again with another one is an update of it.
func httpRegisterWith(ctx context.Context, client *http.Client, addr string, n int, fsType string) error {
	v := benchVolume(int64(n))
	vol := map[string]any{
		"ID": v.ID, "Name": v.Name, "ExternalID": v.ExternalID, "PluginID": v.PluginID,
		"RequestedCapabilities": v.RequestedCapabilities,
	}
	if fsType != "" {
		vol["MountOptions"] = map[string]any{"FSType": fsType}
	}
	body, err := json.Marshal(map[string]any{"Volumes": []map[string]any{vol}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, addr+"/v1/volume/csi/"+v.ID, bytes.NewReader(body))
	if err != nil {
		return err
	}
	// The same register sent twice is one register: the key lets the
	// transport send it again on a fresh connection when the server closed
	// the kept-alive one it went out on (net/http retries only requests
	// it may replay).
	req.Header.Set("Idempotency-Key", v.ID)
	return sendDiscard(client, req, "PUT /v1/volume/csi/"+v.ID)
}

// sendDiscard sends req and reads its whole answer, which must be a 200;
// what names the request in the error otherwise.
func sendDiscard(client *http.Client, req *http.Request, what string) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", what, resp.Status, msg)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
