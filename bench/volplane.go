package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/tlsutil"
)

const (
	// clusterSize is the number of servers of both clusters.
	clusterSize = 3
	// benchPlugin is the CSI plugin the benchmark node fingerprints and
	// every volume uses.
	benchPlugin = "bench"
	// formTimeout bounds cluster formation and the first leader election,
	// which with production Raft timing take a few seconds.
	formTimeout = 60 * time.Second
	// callTimeout is the deadline of one benchmark RPC.
	callTimeout = 60 * time.Second
	// joinInterval paces the join protocol (not Raft): formation only.
	joinInterval = 200 * time.Millisecond
)

// volplane is an in-process 3-server cluster and a client of its leader,
// as a client agent or the CLI would be: msgpack RPC over a pooled yamux
// session on loopback TCP, and HTTP.
type volplane struct {
	servers []*server.Server
	leader  *server.Server
	pool    *rpc.ConnPool
	http    *http.Client

	// nextID numbers the benchmark's volumes.
	nextID atomic.Int64
	// registered are the IDs of the volumes created so far, removed before
	// the list phase counts volumes.
	registered []string
	// node is the benchmark node, whose secret the claims carry.
	node *structs.Node
	// token, when set (a cluster with ACLs on), is sent with every call
	// and list that carries none of its own.
	token string
	// provider and providerVersion are the benchmark plugin's, which the
	// leader copies into every volume it registers.
	provider, providerVersion string
	// entryBytes is the size of the Raft entry of a one-volume register
	// request, as the leader encodes it.
	entryBytes int

	// agents are the client agents standing in for nodes with a plugin
	// that has a controller (the release and scale phases); close closes
	// them before the servers.
	agents []*agent

	// The heartbeat loop keeps the benchmark node, and so its plugin,
	// alive, as its client agent would.
	logger        hclog.Logger
	heartbeatStop chan struct{}
	heartbeatWG   sync.WaitGroup
}

// startVolplane starts three servers that form a cluster through the join
// protocol, each with its Raft log (Config.RaftLogStore) in its own dir
// under dir and production Raft timing, and waits until the leader serves
// consistent reads. name tells the cluster apart from the others of the
// run, in the servers' names and logs and in the label instance of a CPU
// profile.
func startVolplane(ctx context.Context, cfg *Config, dir, name string, opts ...func(*server.Config)) (_ *volplane, err error) {
	return startVolplaneTLS(ctx, cfg, dir, name, nil, opts...)
}

// startVolplaneTLS is startVolplane with the servers' tls.rpc on when tc is
// not nil: each server has tc's server certificate, and the benchmark's own
// RPC client, which stands in for a server forwarding requests, has it too.
// opts change each server's configuration last.
func startVolplaneTLS(ctx context.Context, cfg *Config, dir, name string, tc *tlsutil.Configurator,
	opts ...func(*server.Config)) (_ *volplane, err error) {
	logger := cfg.Logger.Named(name + "-client")
	var outgoing func() *tls.Config
	if tc != nil {
		outgoing = tc.OutgoingRPC
	}
	vp := &volplane{
		logger:        logger,
		heartbeatStop: make(chan struct{}),
		pool:          rpc.NewPool(rpc.PoolConfig{Logger: logger, CallTimeout: callTimeout, TLS: outgoing}),
		http: &http.Client{
			Transport: &http.Transport{MaxIdleConnsPerHost: 4},
			Timeout:   callTimeout,
		},
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, vp.close())
		}
	}()

	var first string
	for i := range clusterSize {
		c := server.DefaultConfig()
		c.NodeName = fmt.Sprintf("%s-srv%d", name, i)
		c.DataDir = filepath.Join(dir, c.NodeName)
		c.RPCAddr = "127.0.0.1:0"
		c.HTTPAddr = "127.0.0.1:0"
		c.BootstrapExpect = clusterSize
		c.RetryJoinInterval = joinInterval
		if i > 0 {
			c.RetryJoin = []string{first}
		}
		c.Logger = cfg.Logger.Named(c.NodeName)
		c.RaftLogStore = cfg.RaftLogStore
		c.TLS = tc
		for _, o := range opts {
			o(c)
		}
		var s *server.Server
		// Every goroutine the server starts, and the ones they start,
		// inherit these labels, so a CPU profile can be split by cluster
		// and by server.
		pprof.Do(ctx, pprof.Labels("cluster", "volplane", "instance", name, "server", c.NodeName), func(context.Context) {
			s, err = server.NewServer(c)
		})
		if err != nil {
			return nil, fmt.Errorf("starting server %s: %w", c.NodeName, err)
		}
		vp.servers = append(vp.servers, s)
		if i == 0 {
			first = s.RPCAddr()
		}
	}
	if err := vp.waitForLeader(ctx); err != nil {
		return nil, err
	}
	return vp, nil
}

// waitForLeader waits until every server knows the same leader, the leader
// has all servers as voters, and it answers a consistent read (which it
// does only after its post-election barrier).
func (vp *volplane) waitForLeader(ctx context.Context) error {
	deadline := time.Now().Add(formTimeout)
	var last error
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if last = vp.leaderReady(); last == nil {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the volplane cluster has no usable leader after %s: %w", formTimeout, last)
}

func (vp *volplane) leaderReady() error {
	var addr raft.ServerAddress
	vp.leader = nil
	for _, s := range vp.servers {
		a, _ := s.Raft().LeaderWithID()
		switch {
		case a == "":
			return fmt.Errorf("server %s knows no leader", s.RPCAddr())
		case addr != "" && a != addr:
			return fmt.Errorf("servers disagree on the leader (%s, %s)", addr, a)
		}
		addr = a
		if string(a) == s.RPCAddr() {
			vp.leader = s
		}
	}
	if vp.leader == nil {
		return fmt.Errorf("leader %s is none of the servers", addr)
	}
	f := vp.leader.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters != clusterSize {
		return fmt.Errorf("the leader has %d voters, want %d", voters, clusterSize)
	}
	// A consistent read, which the leader holds until its barrier, of an
	// endpoint that needs no ACL token.
	var leader string
	return vp.call("Status.Leader", &structs.GenericRequest{}, &leader)
}

// follower returns a server that is not the leader.
func (vp *volplane) follower() *server.Server {
	for _, s := range vp.servers {
		if s != vp.leader {
			return s
		}
	}
	return nil
}

// stillLeader reports whether the server found leader at the start still is.
func (vp *volplane) stillLeader() bool {
	return vp.leader.Raft().State() == raft.Leader
}

// call makes one RPC to the leader over the network.
func (vp *volplane) call(method string, args, reply any) error {
	if r, ok := args.(structs.RequestWithToken); ok && vp.token != "" && r.RequestToken() == "" {
		r.SetRequestToken(vp.token)
	}
	return vp.pool.RPC(vp.leader.RPCAddr(), method, args, reply)
}

// registerNode registers a node that fingerprints the benchmark plugin as
// a healthy node plugin, so volumes of that plugin are valid, starts its
// heartbeats, and computes the size of a register entry.
func (vp *volplane) registerNode() error {
	node := benchNode()
	vp.node = node
	var reply structs.NodeUpdateResponse
	if err := vp.call("Node.Register", &structs.NodeRegisterRequest{Node: node}, &reply); err != nil {
		return fmt.Errorf("registering the benchmark node: %w", err)
	}
	// Without heartbeats the leader marks the node down after its TTL and
	// grace period, and refuses volumes of its plugin from then on.
	vp.heartbeatWG.Add(1)
	go func() {
		defer vp.heartbeatWG.Done()
		heartbeat(vp.heartbeatStop, node, reply.HeartbeatTTL, vp.call, vp.logger, "benchmark node")
	}()
	info := node.CSINodePlugins[benchPlugin]
	vp.provider, vp.providerVersion = info.Provider, info.ProviderVersion
	buf, err := vp.encodeEntry(benchVolume(1))
	if err != nil {
		return err
	}
	vp.entryBytes = len(buf)
	return nil
}

// benchNode is a ready node whose only plugin is a node instance of the
// benchmark plugin that needs no controller. A plugin with a controller
// would make the leader ask it, through the node's client agent, to
// validate every volume registered; the benchmark has no agent, and
// measures the server core. The plugin has no max_volumes_per_node: the
// claim phase places thousands of allocations, each with a volume of its
// own, on this one node.
func benchNode() *structs.Node {
	n := mock.Node()
	info := mock.NodeInfo(benchPlugin, n.ID, true)
	info.RequiresControllerPlugin = false
	info.NodeInfo.MaxVolumes = 0
	n.CSIControllerPlugins = map[string]*structs.CSIInfo{}
	n.CSINodePlugins = map[string]*structs.CSIInfo{benchPlugin: info}
	return n
}

// heartbeat reports node ready through call every third of its TTL until
// stop is closed, as a client agent does; what names the sender in the
// warning a failed heartbeat logs. A heartbeat that changes nothing costs
// no Raft entry.
func heartbeat(stop <-chan struct{}, node *structs.Node, ttl time.Duration,
	call func(method string, args, reply any) error, logger hclog.Logger, what string) {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		args := &structs.NodeUpdateStatusRequest{NodeID: node.ID, SecretID: node.SecretID, Status: structs.NodeStatusReady}
		var reply structs.NodeUpdateResponse
		if err := call("Node.UpdateStatus", args, &reply); err != nil {
			logger.Warn(what+" heartbeat failed", "error", err)
		}
	}
}

// volume returns a new volume of the benchmark plugin: testutil's, which
// has several capabilities, mount options, secrets and parameters, under an
// ID of fixed width, so that every register entry has the same size.
func (vp *volplane) volume() *structs.CSIVolume {
	v := benchVolume(vp.nextID.Add(1))
	vp.registered = append(vp.registered, v.ID)
	return v
}

func benchVolume(n int64) *structs.CSIVolume {
	v := mock.CSIVolume(benchPlugin)
	v.ID = fmt.Sprintf("bench-%08d", n)
	v.Name = v.ID
	v.ExternalID = "ext-" + v.ID
	return v
}

// encodeEntry returns the Raft entry of a one-volume register request as
// the leader writes it: the volume with its namespace and the plugin's
// provider filled in, and the leader's timestamp.
func (vp *volplane) encodeEntry(v *structs.CSIVolume) ([]byte, error) {
	return encodeRegisterEntry(v, vp.provider, vp.providerVersion)
}

// registerEntryBytes is the size of the Raft entry of a one-volume register
// of the benchmark's plugin.
func registerEntryBytes() (int, error) {
	info := benchNode().CSINodePlugins[benchPlugin]
	buf, err := encodeRegisterEntry(benchVolume(1), info.Provider, info.ProviderVersion)
	return len(buf), err
}

// encodeRegisterEntry encodes the Raft entry the leader writes for a
// register of v.
func encodeRegisterEntry(v *structs.CSIVolume, provider, version string) ([]byte, error) {
	v.Namespace = structs.DefaultNamespace
	v.Provider, v.ProviderVersion = provider, version
	req := &structs.CSIVolumeRegisterRequest{
		Volumes:   []*structs.CSIVolume{v},
		Timestamp: time.Now().UnixNano(),
	}
	buf, err := structs.Encode(structs.CSIVolumeRegisterRequestType, req)
	if err != nil {
		return nil, fmt.Errorf("encoding a register request: %w", err)
	}
	return buf, nil
}

// applyEntries encodes n register entries of new volumes, outside the
// timed calls.
func (vp *volplane) applyEntries(n int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range out {
		buf, err := vp.encodeEntry(vp.volume())
		if err != nil {
			return nil, err
		}
		out[i] = buf
	}
	return out, nil
}

// apply commits one register entry with raft.Apply on the leader, as the
// endpoint does after its checks: Raft and the state machine without the
// RPC layers and the endpoint.
func (vp *volplane) apply(entry []byte) error {
	f := vp.leader.Raft().Apply(entry, applyTimeout)
	if err := f.Error(); err != nil {
		return err
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

// registerRequests builds n one-volume register requests, outside the
// timed calls.
func (vp *volplane) registerRequests(n int) []*structs.CSIVolumeRegisterRequest {
	out := make([]*structs.CSIVolumeRegisterRequest, n)
	for i := range out {
		out[i] = &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vp.volume()}}
	}
	return out
}

// register registers the volumes of one request.
func (vp *volplane) register(req *structs.CSIVolumeRegisterRequest) error {
	var reply structs.CSIVolumeRegisterResponse
	return vp.call("CSIVolume.Register", req, &reply)
}

// registerMany registers n new volumes, batch per request.
func (vp *volplane) registerMany(ctx context.Context, n, batch int) error {
	vols := make([]*structs.CSIVolume, n)
	for i := range vols {
		vols[i] = vp.volume()
	}
	return vp.registerVolumes(ctx, vols, batch)
}

// deregisterRegistered removes the volumes the register phase created, so
// the list phase knows how many volumes there are.
func (vp *volplane) deregisterRegistered(ctx context.Context, batch int) error {
	if err := vp.deregister(ctx, vp.registered, batch); err != nil {
		return err
	}
	vp.registered = nil
	return nil
}

// deregister removes the volumes ids, which hold no claims, batch per
// request.
func (vp *volplane) deregister(ctx context.Context, ids []string, batch int) error {
	for ids := range chunks(ids, batch) {
		if err := ctx.Err(); err != nil {
			return err
		}
		var reply structs.CSIVolumeDeregisterResponse
		req := &structs.CSIVolumeDeregisterRequest{VolumeIDs: ids}
		if err := vp.call("CSIVolume.Deregister", req, &reply); err != nil {
			return fmt.Errorf("deregistering %d volumes: %w", len(ids), err)
		}
	}
	return nil
}

func chunks(s []string, n int) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// listVolumes makes one GET /v1/volumes against the leader's HTTP API and
// reads the whole answer. When count is set, it decodes the answer and
// returns the number of volumes in it.
func (vp *volplane) listVolumes(ctx context.Context, count bool) (int, error) {
	url := "http://" + vp.leader.HTTPAddr() + "/v1/volumes?type=csi"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if vp.token != "" {
		req.Header.Set("X-Nomad-Token", vp.token)
	}
	resp, err := vp.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return 0, fmt.Errorf("GET /v1/volumes: %s: %s", resp.Status, msg)
	}
	if !count {
		_, err := io.Copy(io.Discard, resp.Body)
		return 0, err
	}
	var stubs []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&stubs); err != nil {
		return 0, fmt.Errorf("decoding the volume list: %w", err)
	}
	return len(stubs), nil
}

// close shuts the client and every server down; it waits for their
// goroutines.
func (vp *volplane) close() error {
	close(vp.heartbeatStop)
	vp.heartbeatWG.Wait()
	var errs []error
	for _, a := range vp.agents {
		errs = append(errs, a.close())
	}
	if vp.pool != nil {
		errs = append(errs, vp.pool.Close())
	}
	if vp.http != nil {
		vp.http.CloseIdleConnections()
	}
	for _, s := range vp.servers {
		errs = append(errs, s.Shutdown())
	}
	return errors.Join(errs...)
}
