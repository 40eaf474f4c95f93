package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
	"github.com/volplane/volplane/tlsutil"
)

// introSecret is the node introduction token of the secured cluster.
const introSecret = "e2e-node-intro-secret-8c1f2a9d"

// securedConfig: TLS (added by the harness), node introduction required,
// a low connection limit and a short body timeout, so the attacks below
// meet each bound quickly.
var securedConfig = fmt.Sprintf(`server {
  heartbeat_ttl       = %q
  node_grace_period   = %q
  node_intro_required = true
  node_intro_tokens   = [%q]
}
limits {
  rpc_max_conns_per_client = 40
  rpc_handshake_timeout    = "2s"
  http_body_timeout        = "2s"
}
`, clientHeartbeatTTL, clientNodeGrace, introSecret)

// TestE2E_SecurityBoundary runs a 3-server TLS cluster that requires node
// introduction, with 2 introduced client agents and the dev plugin; runs
// the per_alloc example through it; then tries, as an attacker on the same
// network would, each way in that the cluster must refuse. After each one
// the cluster is up, says who it refused and why, and its state is
// unchanged. Last, the servers' certificates are rotated by SIGHUP while
// volumes are written, and no acknowledged write is lost.
func TestE2E_SecurityBoundary(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, TLS: true, ServerConfig: securedConfig})
	e, s := newClientEnvWith(t, c, ClientConfig{IntroToken: introSecret})

	// The per_alloc example, end to end, over TLS.
	e.createVolumes(t, s, 3)
	res := e.cli(t, s, "job run", "-detach", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))
	allocs := e.waitJobAllocs(t, s, "web", structs.AllocClientStatusRunning)
	must.MapLen(t, 3, allocs)
	for i := range 3 {
		must.MapLen(t, 1, e.volume(t, s, volID(i)).WriteClaims)
	}
	res = e.cli(t, s, "node status")
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrNotContains(t, res.Stdout, "Security: OPEN")

	a := &attacker{t: t, c: c, e: e}
	a.baseline = a.state()
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"plaintext connections", a.plaintext},
		{"raft stream without a server certificate", a.forgedRaft},
		{"client certificate calls server-only endpoints", a.clientCertCalls},
		{"node without an introduction", a.unintroducedNode},
		{"second node claims a storage node ID", a.duplicateStorageNode},
		{"count over the limit", a.hugeCount},
		{"idle connections from one address", a.idleConnections},
		{"slow body", a.slowBody},
		{"bad certificates and garbage", a.badCertificates},
	} {
		ok := t.Run(step.name, func(t *testing.T) {
			a.t = t
			step.run(t)
			a.checkUnchanged(t)
		})
		if !ok {
			t.FailNow()
		}
	}
	a.t = t
	t.Run("certificate rotation under load", a.rotateUnderLoad)
	t.Run("no secret at rest", a.noSecretAtRest)
	e.checkSecrets(t)
}

// noSecretAtRest: no file of any server (the Raft log, snapshots, the
// keystore) holds a volume's secret in clear.
func (a *attacker) noSecretAtRest(t *testing.T) {
	for _, s := range a.c.Servers() {
		dir := filepath.Join(a.c.dir, s.Name())
		must.Positive(t, testutil.NoSecretInFiles(t, dir, a.e.secret))
		// The Raft log was among the files read: raft-wal's segments, the
		// servers' default store.
		segments, err := filepath.Glob(filepath.Join(dir, "raft", "wal", "*.wal"))
		must.NoError(t, err)
		must.SliceNotEmpty(t, segments, must.Sprint("the Raft log's segments were read"))
	}
}

type attacker struct {
	t        *testing.T
	c        *ProcessCluster
	e        *clientEnv
	baseline map[string]string
}

// state is every server's own (stale) view of the volumes and their
// claims, by server.
func (a *attacker) state() map[string]string {
	out := map[string]string{}
	for _, s := range a.c.Servers() {
		var stubs []*structs.CSIVolListStub
		must.NoError(a.t, getJSON(s.HTTPAddr()+"/v1/volumes?stale", &stubs))
		var rows []string
		for _, v := range stubs {
			rows = append(rows, fmt.Sprintf("%s r=%d w=%d past=%d mod=%d", v.ID, v.CurrentReaders, v.CurrentWriters, v.PastClaims, v.ModifyIndex))
		}
		slices.Sort(rows)
		out[s.Name()] = strings.Join(rows, "\n")
	}
	return out
}

// checkUnchanged: every server still answers, with the state it had.
func (a *attacker) checkUnchanged(t *testing.T) {
	t.Helper()
	for _, s := range a.c.Servers() {
		must.True(t, a.c.Alive(s), must.Sprintf("%s is still running", s.Name()))
	}
	must.Eq(t, a.baseline, a.state())
}

// serverLogged waits until some server's log has a line with every part.
func (a *attacker) serverLogged(t *testing.T, parts ...string) {
	t.Helper()
	testutil.WaitForResult(t, requestTimeout, func() (bool, error) {
		for _, s := range a.c.Servers() {
			for _, line := range strings.Split(a.c.Logs(t)[s.Name()], "\n") {
				if containsAll(line, parts) {
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("no server logged a line with %q", parts)
	})
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func (a *attacker) configurator(t *testing.T, c certFiles) *tlsutil.Configurator {
	t.Helper()
	cfg, err := tlsutil.NewConfigurator(tlsutil.Config{EnableRPC: true, CAFile: a.c.tls.ca,
		CertFile: c.cert, KeyFile: c.key, VerifyServerHostname: true})
	must.NoError(t, err)
	return cfg
}

func (a *attacker) pool(t *testing.T, c *tlsutil.Configurator) *rpc.ConnPool {
	p := rpc.NewPool(rpc.PoolConfig{Logger: hclog.NewNullLogger(), DialTimeout: requestTimeout,
		CallTimeout: requestTimeout, TLS: c.OutgoingRPC})
	t.Cleanup(func() { p.Close() })
	return p
}

func (a *attacker) leader(t *testing.T) Server { return WaitForLeader(t, a.c) }

func (a *attacker) plaintext(t *testing.T) {
	s := a.leader(t)
	for _, p := range rpcProbes() {
		expectClosed(t, s.RPCAddr(), p.payload)
	}
	a.serverLogged(t, "refusing a plaintext connection", "remote=127.0.0.1:")
	// The plaintext HTTP API is not served either.
	res, err := (&http.Client{Timeout: requestTimeout}).Get(strings.Replace(s.HTTPAddr(), "https://", "http://", 1) + "/v1/volumes")
	if err == nil {
		res.Body.Close()
		must.Eq(t, http.StatusBadRequest, res.StatusCode)
	}
}

func (a *attacker) forgedRaft(t *testing.T) {
	s := Followers(a.c, a.leader(t))[0]
	for name, cert := range map[string]certFiles{"client": a.c.tls.client, "cli": a.c.tls.cli} {
		layer := rpc.NewRaftLayer(&net.TCPAddr{}, a.configurator(t, cert).OutgoingRPC)
		conn, err := layer.Dial(raft.ServerAddress(s.RPCAddr()), requestTimeout)
		must.NoError(t, err, must.Sprint(name))
		// Anything raft would send: the server has closed the stream.
		must.NoError(t, conn.SetDeadline(time.Now().Add(requestTimeout)))
		_, _ = conn.Write([]byte{0, 1, 2, 3})
		_, err = conn.Read(make([]byte, 1))
		must.Error(t, err, must.Sprintf("%s: the Raft stream is closed", name))
		must.False(t, isTimeout(err), must.Sprintf("%s: the Raft stream was left open", name))
		conn.Close()
	}
	a.serverLogged(t, "refusing a Raft connection from a peer without a server certificate", "role=client")
	a.serverLogged(t, "refusing a Raft connection from a peer without a server certificate", "role=cli")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func (a *attacker) clientCertCalls(t *testing.T) {
	s := a.leader(t)
	p := a.pool(t, a.configurator(t, a.c.tls.client))
	vol := a.e.volume(t, s, volID(0))
	var claim *structs.CSIVolumeClaim
	for _, cl := range vol.WriteClaims {
		claim = cl
	}
	must.NotNil(t, claim)
	for method, args := range map[string]any{
		"ClientCSI.ControllerDetachVolume": &structs.ClientCSIControllerDetachVolumeRequest{PluginID: pluginID,
			VolumeID: vol.ExternalID, ClientCSINodeID: claim.ExternalNodeID},
		"ClientCSI.NodeDetachVolume": &structs.ClientCSINodeDetachVolumeRequest{ClientCSITarget: structs.ClientCSITarget{NodeID: claim.NodeID},
			AllocID: claim.AllocationID, VolumeID: vol.ID, ExternalID: vol.ExternalID, PluginID: pluginID},
		"Operator.RaftRemovePeer": &structs.RaftPeerRequest{Address: Followers(a.c, s)[0].RPCAddr()},
		"CSIVolume.Deregister":    &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{vol.ID}, Force: true},
	} {
		err := p.RPC(s.RPCAddr(), method, args, &struct{}{})
		must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprintf("%s: %v", method, err))
	}
	a.serverLogged(t, "refusing an RPC call the caller's certificate does not allow", "method=ClientCSI.ControllerDetachVolume", "role=client")
	must.SliceEmpty(t, a.e.callsOf(t, "ControllerUnpublishVolume", vol.ExternalID, 0))
}

func (a *attacker) unintroducedNode(t *testing.T) {
	s := a.leader(t)
	p := a.pool(t, a.configurator(t, a.c.tls.client))
	n := mock.Node(pluginID)
	err := p.RPC(s.RPCAddr(), "Node.Register", &structs.NodeRegisterRequest{Node: n}, &structs.NodeUpdateResponse{})
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
	must.StrContains(t, err.Error(), "requires a node introduction token")
	err = p.RPC(s.RPCAddr(), "Node.Register", &structs.NodeRegisterRequest{Node: n, IntroToken: "guessed"}, &structs.NodeUpdateResponse{})
	must.StrContains(t, err.Error(), "unknown node introduction token")
	a.serverLogged(t, "refusing the registration of a new node", "node_id="+n.ID)
}

func (a *attacker) duplicateStorageNode(t *testing.T) {
	s := a.leader(t)
	p := a.pool(t, a.configurator(t, a.c.tls.client))
	n := mock.Node(pluginID)
	// The storage node ID the plugin behind c1 reports.
	n.CSINodePlugins[pluginID].NodeInfo.ID = "storage-a"
	err := p.RPC(s.RPCAddr(), "Node.Register", &structs.NodeRegisterRequest{Node: n, IntroToken: introSecret}, &structs.NodeUpdateResponse{})
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err), must.Sprint(err))
	must.StrContains(t, err.Error(), a.e.nodeIDs["c1"])
}

func (a *attacker) hugeCount(t *testing.T) {
	s := a.leader(t)
	job := `{"Job":{"ID":"huge","Type":"service","TaskGroups":[{"Name":"g","Count":2000000000,
	  "Tasks":[{"Name":"t","Driver":"exec","Config":{"Command":"/bin/true"}}]}]}}`
	res, err := doHTTP(http.MethodPut, s.HTTPAddr()+"/v1/jobs", strings.NewReader(job))
	must.NoError(t, err)
	must.Eq(t, http.StatusBadRequest, res.Status, must.Sprint(string(res.Body)))
	must.StrContains(t, string(res.Body), "count 2000000000 is over the limit")
}

func (a *attacker) idleConnections(t *testing.T) {
	s := a.leader(t)
	before := a.metric(t, s, `volplane_conns_refused_total{listener="rpc",reason="conn_limit"}`)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 300 {
		conn, err := net.DialTimeout("tcp", s.RPCAddr(), requestTimeout)
		must.NoError(t, err)
		_, _ = conn.Write([]byte{rpc.RPCTLS})
		conns = append(conns, conn)
	}
	// Beyond the limit of 40 they are refused at once; the rest are closed
	// when their handshake does not come within 2s.
	testutil.WaitForResult(t, requestTimeout, func() (bool, error) {
		got := a.metric(t, s, `volplane_conns_refused_total{listener="rpc",reason="conn_limit"}`)
		return got-before >= 200, fmt.Errorf("%v connections refused over the limit", got-before)
	})
	for _, conn := range conns {
		must.NoError(t, conn.SetReadDeadline(time.Now().Add(requestTimeout)))
		_, err := conn.Read(make([]byte, 1))
		must.False(t, isTimeout(err), must.Sprint("an idle connection was held past the handshake timeout"))
	}
	a.serverLogged(t, "refusing connection: too many connections from this address")
}

// metric reads one sample of the server's Prometheus metrics.
func (a *attacker) metric(t *testing.T, s Server, series string) float64 {
	t.Helper()
	res, err := doHTTP(http.MethodGet, s.HTTPAddr()+"/v1/metrics?format=prometheus", nil)
	must.NoError(t, err)
	sc := bufio.NewScanner(strings.NewReader(string(res.Body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			must.NoError(t, err)
			return f
		}
	}
	return 0
}

func (a *attacker) slowBody(t *testing.T) {
	s := a.leader(t)
	host := strings.TrimPrefix(s.HTTPAddr(), "https://")
	conn, err := tls.Dial("tcp", host, httpClient.Transport.(*http.Transport).TLSClientConfig)
	must.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "PUT /v1/volume/csi/slow HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{", host)
	must.NoError(t, err)
	start := time.Now()
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(conn).ReadString('\n')
		answered <- line
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	timeout := time.After(requestTimeout)
	for {
		select {
		case line := <-answered:
			must.StrContains(t, line, "400", must.Sprintf("answer to a slow body: %q", line))
			must.Less(t, requestTimeout, time.Since(start))
			return
		case <-tick.C:
			// One byte a second, as a slowloris would send.
			_, _ = conn.Write([]byte(" "))
		case <-timeout:
			t.Fatal("a body sent a byte a second was not cut off")
		}
	}
}

func (a *attacker) badCertificates(t *testing.T) {
	s := a.leader(t)
	dir := t.TempDir()
	other, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	must.NoError(t, err)
	stranger := &tlsFiles{dir: dir, caCertPEM: other.Cert, caKeyPEM: other.Key, ca: filepath.Join(dir, "ca.pem")}
	must.NoError(t, writeFiles(map[string][]byte{stranger.ca: other.Cert}))
	wrongCA, err := stranger.issue("wrong-ca", tlsutil.CertOptions{Role: tlsutil.RoleServer})
	must.NoError(t, err)
	expired, err := a.c.tls.issue("expired", tlsutil.CertOptions{Role: tlsutil.RoleClient, Days: 1, Now: time.Now().Add(-72 * time.Hour)})
	must.NoError(t, err)
	for name, cert := range map[string]certFiles{"wrong CA": wrongCA, "expired": expired} {
		cfg, err := tlsutil.NewConfigurator(tlsutil.Config{EnableRPC: true, CAFile: a.c.tls.ca, CertFile: cert.cert, KeyFile: cert.key})
		must.NoError(t, err)
		err = a.pool(t, cfg).RPC(s.RPCAddr(), "Status.Ping", &structs.GenericRequest{}, &struct{}{})
		must.Error(t, err, must.Sprint(name))
		must.StrContains(t, err.Error(), "TLS handshake", must.Sprint(name))
	}
	// Garbage after the TLS byte: closed, and the log says who and why.
	expectClosed(t, s.RPCAddr(), append([]byte{rpc.RPCTLS}, []byte("GET / HTTP/1.1\r\n\r\n")...))
	a.serverLogged(t, "refusing connection: TLS handshake failed", "remote=127.0.0.1:", "does not look like a TLS handshake")
	// A certificate of another CA is not even sent: the server names the
	// CAs it accepts.
	a.serverLogged(t, "refusing connection: TLS handshake failed", "client didn't provide a certificate")
	a.serverLogged(t, "refusing connection: TLS handshake failed", "expired")
}

// rotateUnderLoad issues new server certificates, writes them over the
// files the servers were started with and SIGHUPs every server while a
// writer keeps making Raft writes (node introduction tokens) through the
// leader; every new TLS connection then meets the new certificate, and
// every acknowledged write is on every server.
func (a *attacker) rotateUnderLoad(t *testing.T) {
	s := a.leader(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	var mu sync.Mutex
	var acked []string
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("rot-%d", i)
			res, err := doHTTP(http.MethodPut, s.HTTPAddr()+"/v1/operator/node-intro", strings.NewReader(fmt.Sprintf(`{"Name":%q}`, name)))
			if err == nil && res.Status == http.StatusOK {
				mu.Lock()
				acked = append(acked, name)
				mu.Unlock()
			}
		}
	}()
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitAcked := func(n int) {
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			return ackedCount() >= n, fmt.Errorf("%d writes acknowledged, want %d", ackedCount(), n)
		})
	}
	waitAcked(5)

	fresh, err := a.c.tls.issue("server-rotated", tlsutil.CertOptions{Role: tlsutil.RoleServer})
	must.NoError(t, err)
	must.NoError(t, copyFile(fresh.cert, a.c.tls.server.cert))
	must.NoError(t, copyFile(fresh.key, a.c.tls.server.key))
	want := certSerial(t, fresh.cert)
	for _, srv := range a.c.Servers() {
		a.c.signal(t, srv.(*procServer).process, syscall.SIGHUP, false)
	}
	cfg := a.configurator(t, a.c.tls.client)
	for _, srv := range a.c.Servers() {
		testutil.WaitForResult(t, requestTimeout, func() (bool, error) {
			got, err := presentedSerial(srv.RPCAddr(), cfg.OutgoingRPC())
			return err == nil && got == want, fmt.Errorf("%s presents serial %s (%v), want %s", srv.Name(), got, err, want)
		})
	}
	a.serverLogged(t, "reloaded TLS certificates")
	waitAcked(ackedCount() + 5)
	close(stop)
	<-done
	t.Logf("%d writes acknowledged across the rotation", len(acked))
	for _, srv := range a.c.Servers() {
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			var tokens []*structs.NodeIntroToken
			if err := getJSON(srv.HTTPAddr()+"/v1/operator/node-intro?stale", &tokens); err != nil {
				return false, err
			}
			names := map[string]bool{}
			for _, tok := range tokens {
				names[tok.Name] = true
			}
			for _, name := range acked {
				if !names[name] {
					return false, fmt.Errorf("%s lacks acknowledged write %s", srv.Name(), name)
				}
			}
			return true, nil
		})
	}
}

// presentedSerial dials addr's RPC port with TLS and returns the serial of
// the certificate the server presents.
func presentedSerial(addr string, cfg *tls.Config) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, requestTimeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{rpc.RPCTLS}); err != nil {
		return "", err
	}
	tc := tls.Client(conn, cfg)
	if err := tc.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return "", err
	}
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// certSerial is the serial number of the PEM certificate at path.
func certSerial(t *testing.T, path string) string {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".pem")+"-key.pem")
	must.NoError(t, err)
	return pair.Leaf.SerialNumber.String()
}
