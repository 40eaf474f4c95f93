// Package server is the server agent: Raft and its stores, cluster
// formation, leadership, the RPC endpoints and the HTTP API.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-connlimit"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/volplane/volplane/clientrpc"
	"github.com/volplane/volplane/fsm"
	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/server/httpapi"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/tlsutil"
	"github.com/volplane/volplane/volumewatcher"
)

// Server is one server agent.
type Server struct {
	config *Config
	logger hclog.Logger
	nodeID string
	tls    *tlsutil.Configurator

	fsm       *fsm.FSM
	keyring   *keyring
	raft      *raft.Raft
	raftLayer *rpc.RaftLayer
	// raftTransport's pooled outgoing connections are closed on shutdown;
	// raft closes only its listener.
	raftTransport *raft.NetworkTransport
	raftStore     raftStores

	rpcServer   *netrpc.Server
	rpcListener net.Listener
	rpcAddr     string // advertised
	mux         *rpc.Mux
	pool        *rpc.ConnPool
	// clientFwdPool carries calls for client agents forwarded to another
	// server; they may take as long as a CSI call.
	clientFwdPool *rpc.ConnPool

	httpServer   *http.Server
	httpListener net.Listener

	// leaderReady is set once this server is leader and has applied a
	// barrier, so its state reflects every committed write: only then does
	// it serve consistent reads.
	leaderNotify <-chan bool
	leaderMu     sync.Mutex
	leaderReady  bool
	leaderDone   chan struct{}
	leaderWG     sync.WaitGroup
	// leaderCheck confirms leadership for followers' read-index requests.
	leaderCheck leaderVerifier

	members *memberList
	// reconciles counts the leader's passes over the members (tests wait
	// on it).
	reconciles atomic.Int64
	heartbeats *heartbeats
	nodeConns  *nodeConns
	// clientRPC is the typed client for the calls made on client agents;
	// calls gives the ones another server forwards here their contexts.
	clientRPC *clientrpc.Client
	calls     *clientrpc.Calls
	// volumeWatcher releases past claims while this server leads.
	volumeWatcher *volumewatcher.Watcher
	// checkpoints writes the release checkpoints, many claims to an entry.
	checkpoints *checkpointBatcher
	// registers and claims are the group commits of volume registers and
	// claims.
	registers, claims *entryBatcher
	// entryTypes keeps which entry types every server applies.
	entryTypes entryTypeGate
	// leaders follows Raft's leader for the forwarding path.
	leaders *leaderWatch
	// gate freezes the connections of a pausable server (tests).
	gate     *connGate
	sessions sessionServers
	// acls resolves request tokens when ACLs are enabled.
	acls *aclResolver

	shutdownCtx    context.Context
	shutdownCancel context.CancelFunc
	// raftStopped is closed once Raft has shut down, at raftStoppedAt
	// (see waitFuture).
	raftStopped   chan struct{}
	raftStoppedAt time.Time
	shutdownOnce  sync.Once
	wg            sync.WaitGroup
}

// NewServer starts a server agent: it binds its listeners, opens or creates
// its Raft state, and begins joining its peers. It returns once the server
// is serving; forming a cluster and electing a leader happen after.
func NewServer(cfg *Config) (*Server, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		config:         cfg,
		logger:         cfg.Logger.Named("server"),
		tls:            cfg.TLS,
		rpcServer:      netrpc.NewServer(),
		shutdownCtx:    ctx,
		shutdownCancel: cancel,
		raftStopped:    make(chan struct{}),
		acls:           newACLResolver(cfg.ACLTokenTTL, cfg.ACLPolicyTTL),
	}
	ok := false
	defer func() {
		if !ok {
			s.Shutdown()
		}
	}()

	id, err := loadOrCreateNodeID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s.nodeID = id

	s.fsm, err = fsm.New(cfg.Logger.Named("fsm"))
	if err != nil {
		return nil, fmt.Errorf("creating the state machine: %w", err)
	}
	// The gauge reads this server's state at scrape time; with several
	// servers in one process the last one started answers.
	metrics.SetPastClaimsFunc(func() map[string]int {
		counts, err := s.State().CSIPastClaimsByState()
		if err != nil {
			s.logger.Warn("counting past claims for metrics", "error", err)
			return nil
		}
		return counts
	})
	if s.keyring, err = openKeyring(cfg.DataDir, s.logger, s.State); err != nil {
		return nil, err
	}
	s.keyring.fetch = s.fetchKEK
	if err := s.setupRPC(); err != nil {
		return nil, err
	}
	s.members = newMemberList(s.selfMember())
	s.heartbeats = newHeartbeats(s)
	s.nodeConns = newNodeConns()
	s.calls = clientrpc.NewCalls(s.shutdownCtx)
	s.clientRPC = clientrpc.NewClient(clientrpc.New(s, cfg.ClientRPCTimeout, s.logger.Named("client_rpc")), s, s.logger.Named("client_rpc"))
	s.checkpoints = newCheckpointBatcher(s.raftApply, s.entryTypeApplied, maxCheckpointBatch)
	s.registers = newEntryBatcher(s, structs.CSIVolumeRegisterBatchRequestType)
	s.claims = newEntryBatcher(s, structs.CSIVolumeClaimBatchRequestType)
	s.leaders = newLeaderWatch()
	s.leaderCheck.wait = s.waitFuture
	s.volumeWatcher = volumewatcher.New(volumewatcher.Config{
		Backend:     watcherBackend{s},
		Logger:      s.logger,
		BaseDelay:   cfg.ReleaseBaseDelay,
		MaxDelay:    cfg.ReleaseMaxDelay,
		StepTimeout: cfg.CSICallTimeout,
		Settle:      50 * time.Millisecond,
		Hooks:       volumewatcher.Hooks{Attempt: metrics.ReleaseAttempt, Failure: metrics.ReleaseFailure},
	})
	metrics.SetQueueDepthFunc(s.volumeWatcher.QueueDepth)
	s.sessions.byID = map[*yamux.Session]*netrpc.Server{}
	if err := s.setupRaft(); err != nil {
		return nil, err
	}
	s.registerEndpoints()
	if err := s.setupHTTP(); err != nil {
		return nil, err
	}
	// Serve RPC only now: a connection (a peer's Status.Join over yamux)
	// accepted earlier would reach endpoints before raft and the session
	// map exist.
	s.goFunc(func() {
		if err := s.mux.Serve(s.rpcListener); err != nil && s.shutdownCtx.Err() == nil {
			s.logger.Error("RPC listener stopped", "error", err)
		}
	})

	for _, w := range s.securityStatus().Warnings {
		s.logger.Warn(w)
	}
	s.goFunc(s.monitorLeadership)
	s.goFunc(s.watchLeader)
	s.goFunc(s.watchKeyring)
	s.goFunc(s.joinLoop)
	s.logger.Info("server started", "node_id", s.nodeID, "name", cfg.NodeName,
		"rpc", s.rpcAddr, "http", s.HTTPAddr(), "bootstrap_expect", cfg.BootstrapExpect)
	ok = true
	return s, nil
}

// goFunc runs f in a goroutine the server owns and waits for on shutdown.
func (s *Server) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Server) setupRPC() error {
	ln, err := net.Listen("tcp", s.config.RPCAddr)
	if err != nil {
		return fmt.Errorf("binding the RPC address %s: %w", s.config.RPCAddr, err)
	}
	if s.config.pausable {
		s.gate = newConnGate()
		ln = gatedListener{Listener: ln, g: s.gate}
	}
	s.rpcListener = ln
	s.rpcAddr = s.config.RPCAdvertise
	if s.rpcAddr == "" {
		s.rpcAddr = ln.Addr().String()
	}
	adv, err := net.ResolveTCPAddr("tcp", s.rpcAddr)
	if err != nil {
		return fmt.Errorf("resolving the advertised RPC address %s: %w", s.rpcAddr, err)
	}
	s.raftLayer = rpc.NewRaftLayer(adv, s.tls.OutgoingRPC)
	s.pool = rpc.NewPool(rpc.PoolConfig{Logger: s.logger.Named("pool"), CallTimeout: s.config.ServerRPCTimeout,
		TLS: s.tls.OutgoingRPC})
	s.clientFwdPool = rpc.NewPool(rpc.PoolConfig{Logger: s.logger.Named("pool"),
		CallTimeout: s.config.ClientRPCTimeout + s.config.ServerRPCTimeout, TLS: s.tls.OutgoingRPC})
	s.mux = rpc.NewMux(rpc.MuxConfig{
		Logger: s.logger.Named("rpc"),
		Handlers: rpc.Handlers{
			RPC:     s.serveConn,
			Session: s.onSession,
			Raft:    s.serveRaft,
		},
		HandshakeTimeout:     s.config.RPCHandshakeTimeout,
		TLS:                  s.tls.IncomingRPC(),
		RequireTLS:           s.tls.RPCEnabled(),
		MaxConnsPerClient:    connLimit(s.config.RPCMaxConnsPerClient),
		MaxStreamsPerSession: s.config.RPCMaxStreamsPerSession,
		Refused:              func(reason string) { metrics.ConnRefused("rpc", reason) },
	})
	return nil
}

// serveRaft hands a Raft connection to Raft, only from a server when
// tls.rpc is on: a Raft stream can rewrite the log.
func (s *Server) serveRaft(conn net.Conn, peer rpc.Peer) {
	if s.tls.RPCEnabled() {
		if role := callerRole(peer, s.tls.Region()); role != tlsutil.RoleServer {
			metrics.ConnRefused("rpc", "raft_role")
			s.logger.Warn("refusing a Raft connection from a peer without a server certificate",
				"remote", peer.Addr, "role", role, "peer", tlsutil.DescribePeer(*peer.TLS))
			conn.Close()
			return
		}
	}
	if err := s.raftLayer.Handoff(conn); err != nil {
		conn.Close()
	}
}

func (s *Server) setupHTTP() error {
	if s.config.HTTPAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.config.HTTPAddr)
	if err != nil {
		return fmt.Errorf("binding the HTTP address %s: %w", s.config.HTTPAddr, err)
	}
	if tc := s.tls.IncomingHTTP(); tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	s.httpListener = ln
	limiter := connlimit.NewLimiter(connlimit.Config{MaxConnsPerClientIP: connLimit(s.config.HTTPMaxConnsPerClient)})
	s.httpServer = &http.Server{
		Handler: httpapi.NewHandler(httpapi.Config{
			Backend:      s,
			Logger:       s.logger.Named("http"),
			MaxBodyBytes: s.config.MaxRequestBytes,
			// Each server streams the events of its own state.
			Events:      func() *state.EventBroker { return s.State().Events() },
			ShutdownCh:  s.shutdownCtx.Done(),
			Metrics:     metrics.Handler(),
			EventFilter: s.eventFilter,
			BodyTimeout: s.config.HTTPBodyTimeout,
			WritesReady: s.config.HTTPWritesReady,
			Agent:       s.agentInfo,
			Authorize:   s.authorizeRoute,
			// Profiling: agent write with ACLs, enable_debug without.
			AuthorizeDebug: s.authorizeDebug,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		// Idle keep-alive connections count against the per-client limit.
		IdleTimeout: 2 * time.Minute,
		ConnState: limiter.HTTPConnStateFuncWithErrorHandler(func(err error, conn net.Conn) {
			metrics.ConnRefused("http", "conn_limit")
			s.logger.Warn("refusing HTTP connection: too many connections from this address",
				"remote", conn.RemoteAddr(), "error", err)
			conn.Close()
		}),
		ErrorLog: s.logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	s.goFunc(func() {
		if err := s.httpServer.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("HTTP server stopped", "error", err)
		}
	})
	return nil
}

// RPC makes an in-process call to an endpoint, through the same forwarding
// and validation as a call from the network.
func (s *Server) RPC(method string, args, reply any) error {
	return rpc.InmemCall(s.rpcServer, method, args, reply)
}

// NodeID is the server's Raft ID, persisted in its data dir.
func (s *Server) NodeID() string { return s.nodeID }

// RPCAddr is the server's advertised RPC (and Raft) address.
func (s *Server) RPCAddr() string { return s.rpcAddr }

// HTTPAddr is the address the HTTP API listens on, or "" when disabled.
func (s *Server) HTTPAddr() string {
	if s.httpListener == nil {
		return ""
	}
	return s.httpListener.Addr().String()
}

// State returns the current state store. It is replaced when a snapshot is
// restored, so callers must not hold it across long waits.
func (s *Server) State() *state.StateStore { return s.fsm.State() }

// Raft exposes the Raft instance, for operator commands and tests.
func (s *Server) Raft() *raft.Raft { return s.raft }

// slowShutdownStep is how long a step of Shutdown may take before it is
// logged.
const slowShutdownStep = time.Second

// Shutdown stops the server: leadership work, listeners, Raft and stores.
// It is safe to call more than once.
func (s *Server) Shutdown() error {
	var errs []error
	s.shutdownOnce.Do(func() {
		s.logger.Info("shutting down")
		start := time.Now()
		// Each step that waits says so when it took long, so that a slow
		// shutdown names what held it.
		step := start
		waited := func(what string) {
			if d := time.Since(step); d >= slowShutdownStep {
				s.logger.Warn("shutdown: slow step", "step", what, "took", d)
			}
			step = time.Now()
		}
		s.shutdownCancel()
		// A paused server's held connections must not hold its shutdown.
		s.resume()
		if s.httpServer != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.httpServer.Shutdown(ctx); err != nil {
				s.httpServer.Close()
			}
			cancel()
			waited("HTTP requests")
		}
		if s.raft != nil {
			if err := s.raft.Shutdown().Error(); err != nil {
				errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
			}
			waited("raft")
		}
		s.raftStoppedAt = time.Now()
		close(s.raftStopped)
		if s.raftTransport != nil {
			// The pooled streams and the handlers' contexts, then the
			// transport itself: a peer still replicating to this server
			// waits for answers on the connections it dialed here, and
			// only the transport's shutdown ends handlers that wait for a
			// Raft that has stopped, so the peer's own shutdown is not
			// held up.
			s.raftTransport.CloseStreams()
			s.raftTransport.Close()
		}
		if s.raftLayer != nil {
			s.raftLayer.Close()
			// Before the stores close: a heartbeat being answered when Raft
			// shut down still writes the term (Raft panics if it cannot).
			if !s.raftLayer.Drain(raftDrainTimeout) {
				s.logger.Warn("Raft connections still served after shutdown", "waited", raftDrainTimeout)
			}
			waited("raft connections")
		}
		// The pools first: an endpoint forwarding a blocking query to
		// another server is waiting on them, and the mux waits for it.
		if s.pool != nil {
			s.pool.Close()
		}
		if s.clientFwdPool != nil {
			s.clientFwdPool.Close()
		}
		if s.mux != nil {
			// Handlers still running after its bound are left to the
			// process's exit, and said so.
			if err := s.mux.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		// The mux closes only listeners it serves; NewServer may have
		// failed before serving.
		if s.rpcListener != nil {
			s.rpcListener.Close()
		}
		waited("connections")
		s.wg.Wait()
		waited("server goroutines")
		if err := s.raftStore.Close(); err != nil {
			errs = append(errs, err)
		}
		s.logger.Info("shut down", "took", time.Since(start))
	})
	return errors.Join(errs...)
}
