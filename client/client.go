package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	netrpc "net/rpc"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/client/allocrunner"
	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/client/serverconn"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/clientrpc"
	"github.com/volplane/volplane/rpc"
)

// Client is one client agent.
type Client struct {
	config *Config
	logger hclog.Logger
	id     *identity
	paths  state.CSIPaths
	usage  *state.UsageRegistry

	plugins   *csimanager.Manager
	rpcServer *netrpc.Server
	// calls gives the calls servers make on this client their contexts,
	// which end when the server stops waiting.
	calls   *clientrpc.Calls
	servers *serverconn.List
	// server is the session with the server in use.
	server *serverconn.Conn
	// state is the allocations' state file; allocs runs them.
	state  *state.DB
	allocs *allocrunner.Manager
	// volumeLocks serialises, per volume, the allocation runners' stage
	// and publish with the servers' node detaches, so that a detach never
	// unstages a volume another allocation is being published from.
	volumeLocks volumeLocks
	// sweepNow asks the orphan sweep to run (see sweepSoon).
	sweepNow chan struct{}

	// heartbeatNow wakes the heartbeat loop early (a fingerprint changed).
	heartbeatNow chan struct{}
	registered   chan struct{}
	regOnce      sync.Once

	ctx          context.Context
	cancel       context.CancelFunc
	wgMu         sync.Mutex
	stopping     bool
	wg           sync.WaitGroup
	shutdownOnce sync.Once
}

// NewClient starts a client agent: it loads (or creates) the node's
// identity, starts fingerprinting its plugins and registering with the
// servers, and returns. Registration goes on in the background until a
// server accepts it; Registered tells when.
func NewClient(cfg *Config) (*Client, error) {
	c := *cfg
	cfg = &c
	if err := cfg.normalize(); err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the client data dir %s: %w", cfg.DataDir, err)
	}
	id, err := loadOrCreateIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	usage, err := state.OpenUsageRegistry(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := &Client{
		config:       cfg,
		logger:       cfg.Logger.Named("client"),
		id:           id,
		paths:        state.NewCSIPaths(cfg.DataDir),
		usage:        usage,
		servers:      serverconn.NewList(cfg.Servers),
		heartbeatNow: make(chan struct{}, 1),
		registered:   make(chan struct{}),
		sweepNow:     make(chan struct{}, 1),
		ctx:          ctx,
		cancel:       cancel,
		calls:        clientrpc.NewCalls(ctx),
	}
	if cl.rpcServer, err = cl.newRPCServer(); err != nil {
		cancel()
		return nil, err
	}
	var tlsConfig func() *tls.Config
	if cfg.TLS != nil {
		tlsConfig = cfg.TLS.OutgoingRPC
	}
	cl.server = serverconn.New(serverconn.Config{
		Servers: cl.servers, TLS: tlsConfig, Timeout: cfg.RPCTimeout, Logger: cl.logger,
		Accept: func(stream net.Conn) {
			cl.rpcServer.ServeCodec(cl.calls.ServerCodec(rpc.NewServerCodec(stream, 0)))
		},
		GoFunc: cl.goFunc, Done: ctx.Done(),
	})
	cl.plugins, err = csimanager.New(csimanager.Config{
		Plugins: cfg.Plugins, Interval: cfg.FingerprintInterval, Threshold: cfg.UnhealthyThreshold,
		GoneTTL: cfg.PluginGoneTTL, NewFingerprinter: cfg.newFingerprinter, Observed: cfg.onFingerprint,
	}, cl.logger, cl.triggerHeartbeat)
	if err != nil {
		cancel()
		return nil, err
	}
	if err := cl.newAllocManager(); err != nil {
		cl.plugins.Close()
		cancel()
		return nil, err
	}
	cl.plugins.Run(ctx, cl.goFunc)
	cl.goFunc(cl.heartbeatLoop)
	cl.allocs.Start(ctx)
	cl.goFunc(func() { cl.sweepOrphans(ctx) })
	cl.logger.Info("client started", "node_id", id.NodeID, "name", cfg.NodeName,
		"servers", cfg.Servers, "plugins", len(cfg.Plugins))
	return cl, nil
}

// newAllocManager opens the allocations' state file and builds the
// manager of their runners from it, with what it needs of the client.
func (c *Client) newAllocManager() error {
	logger := c.logger.Named("allocs")
	db, restored, err := state.OpenDB(c.config.DataDir, logger)
	if err != nil {
		return err
	}
	c.state = db
	cfg := c.config
	c.allocs = allocrunner.New(allocrunner.Config{
		Logger: c.logger, DataDir: cfg.DataDir,
		NodeID: c.id.NodeID, SecretID: c.id.SecretID, NodeName: cfg.NodeName, Registered: c.registered,
		Servers: c.server, Plugins: c.plugins, Locks: &c.volumeLocks,
		State: db, Restored: restored, Usage: c.usage, Paths: c.paths,
		GoFunc: c.goFunc, AllocsChanged: c.sweepSoon,
		Timing: cfg.Timing, ServerRetryMin: retryMin, ServerRetryMax: cfg.serverRetryMax,
	})
	return nil
}

// goFunc runs f in a goroutine Shutdown waits for, and reports whether it
// did: after Shutdown began it runs nothing.
func (c *Client) goFunc(f func()) bool {
	c.wgMu.Lock()
	defer c.wgMu.Unlock()
	if c.stopping {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// NodeID is the node's ID, kept in the data dir across restarts.
func (c *Client) NodeID() string { return c.id.NodeID }

// Registered is closed once a server accepted the node's registration.
func (c *Client) Registered() <-chan struct{} { return c.registered }

// Usage is the record of which allocation has which volume published on
// this node.
func (c *Client) Usage() *state.UsageRegistry { return c.usage }

// Paths is the layout of CSI staging and target paths on this node.
func (c *Client) Paths() state.CSIPaths { return c.paths }

// AllocIDs returns the allocations the client runs or remembers, sorted.
func (c *Client) AllocIDs() []string { return c.allocs.AllocIDs() }

// AllocState returns what the client knows of an allocation, and whether
// it knows it.
func (c *Client) AllocState(allocID string) (allocrunner.AllocState, bool) {
	return c.allocs.AllocState(allocID)
}

// Servers returns the server addresses the client knows, in the order it
// tries them, and the one in use.
func (c *Client) Servers() (all []string, current string) {
	return c.servers.All(), c.servers.Get()
}

// Shutdown stops every goroutine the client started and waits for them.
// The node is not deregistered: the servers mark it down once its
// heartbeats stop, and it comes back when the agent restarts. The
// allocations' tasks keep running and their volumes stay published: the
// next start of the agent takes them over from its state file. An agent
// that exits for good (the dev agent) calls DrainAllocations first.
func (c *Client) Shutdown() error {
	c.shutdownOnce.Do(func() {
		c.logger.Info("client shutting down")
		c.cancel()
		c.wgMu.Lock()
		c.stopping = true
		c.wgMu.Unlock()
		// Closing the session ends the server calls being served; their
		// plugin calls were cancelled with c.ctx.
		c.server.Close()
		c.wg.Wait()
		// A heartbeat may have opened a session after the first close.
		c.server.Close()
		c.plugins.Close()
		// Every runner has returned: nothing writes the state file now.
		if err := c.state.Close(); err != nil {
			c.logger.Warn("closing the client state file", "error", err)
		}
	})
	return nil
}

// triggerHeartbeat asks the heartbeat loop to report now.
func (c *Client) triggerHeartbeat() {
	select {
	case c.heartbeatNow <- struct{}{}:
	default:
	}
}

// newRPCServer returns the server of the calls servers make to this client.
func (c *Client) newRPCServer() (*netrpc.Server, error) {
	srv := netrpc.NewServer()
	if err := srv.RegisterName("ClientCSI", &ClientCSI{c: c}); err != nil {
		return nil, err
	}
	if err := srv.RegisterName("FileSystem", &FileSystem{c: c}); err != nil {
		return nil, err
	}
	return srv, nil
}
