package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	netrpc "net/rpc"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// agentPlugin is the plugin the benchmark agents run as monolith instances:
// a controller that attaches and detaches volumes, and a node instance.
// Every claim of its volumes is published by a controller, and every
// release takes a node detach and a controller detach.
const agentPlugin = "bench-monolith"

// agent stands in for a client agent, as the server tests' connectAgent
// does: a node with a monolith instance of agentPlugin that holds a yamux
// session with one server, registered and heartbeating over it, and serves
// on that session's streams the ClientCSI calls the servers make. Its
// plugin answers at once: what is measured is the servers' side.
type agent struct {
	name string
	node *structs.Node
	// addr is the server the agent holds its session with.
	addr string
	pool *rpc.ConnPool
	csi  *agentCSI

	logger    hclog.Logger
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// startAgent registers a new node with a monolith instance of agentPlugin
// through the server at addr, over the session that will carry the
// servers' calls to it, and starts its heartbeats. The node's plugin has no
// max_volumes_per_node: the release phase places hundreds of allocations on
// it. The agent's goroutines carry the profile label cluster=agent.
func startAgent(ctx context.Context, cfg *Config, name, addr string) (_ *agent, err error) {
	a := &agent{
		name:   name,
		node:   mock.NodeWithController(agentPlugin),
		addr:   addr,
		csi:    &agentCSI{},
		logger: cfg.Logger.Named(name),
		stop:   make(chan struct{}),
	}
	a.node.CSINodePlugins[agentPlugin].NodeInfo.MaxVolumes = 0
	srv := netrpc.NewServer()
	if err := srv.RegisterName("ClientCSI", a.csi); err != nil {
		return nil, fmt.Errorf("agent %s: %w", name, err)
	}
	a.pool = rpc.NewPool(rpc.PoolConfig{
		Logger:      a.logger,
		CallTimeout: callTimeout,
		AcceptStreams: func(conn net.Conn) {
			srv.ServeCodec(rpc.NewServerCodec(conn, 0))
		},
	})
	defer func() {
		if err != nil {
			err = errors.Join(err, a.close())
		}
	}()
	var reply structs.NodeUpdateResponse
	// The session is dialed by this first call: its goroutines, and those
	// serving the servers' streams, inherit the label.
	pprof.Do(ctx, pprof.Labels("cluster", "agent", "instance", name), func(context.Context) {
		err = a.pool.RPC(addr, "Node.Register", &structs.NodeRegisterRequest{Node: a.node}, &reply)
	})
	if err != nil {
		return nil, fmt.Errorf("registering the node of agent %s: %w", name, err)
	}
	// The node's heartbeats go over the agent's session until close.
	a.wg.Go(func() {
		heartbeat(a.stop, a.node, reply.HeartbeatTTL, func(method string, args, reply any) error {
			return a.pool.RPC(a.addr, method, args, reply)
		}, a.logger, "benchmark agent")
	})
	return a, nil
}

// close stops the heartbeats and closes the session, as an agent that
// dies does: the servers' calls to it fail from then on. It is safe to call
// more than once.
func (a *agent) close() error {
	a.closeOnce.Do(func() {
		close(a.stop)
		a.wg.Wait()
		a.closeErr = a.pool.Close()
	})
	return a.closeErr
}

// agentCSI is an agent's ClientCSI endpoint: it answers every call with
// success, except node detaches while failNodeDetach is set, and counts
// calls. Its exported methods are exactly the net/rpc methods.
type agentCSI struct {
	nodeDetaches, nodeDetachFailures atomic.Int64
	controllerDetaches               atomic.Int64
	attaches, validates              atomic.Int64
	failNodeDetach                   atomic.Bool

	// detachedAt records, while recording is set, when each volume's
	// controller detach (its release's last plugin call) arrived, and
	// firstNodeDetach when the first node detach did.
	mu              sync.Mutex
	recording       bool
	detachedAt      map[string]time.Time
	firstNodeDetach time.Time
}

func (c *agentCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	if c.failNodeDetach.Load() {
		c.nodeDetachFailures.Add(1)
		return structs.NewError(structs.ErrCodeInternal, "benchmark agent: node unpublish of %q told to fail", args.VolumeID)
	}
	c.nodeDetaches.Add(1)
	c.mu.Lock()
	if c.recording && c.firstNodeDetach.IsZero() {
		c.firstNodeDetach = time.Now()
	}
	c.mu.Unlock()
	return nil
}

func (c *agentCSI) ControllerDetachVolume(args *structs.ClientCSIControllerDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	c.controllerDetaches.Add(1)
	c.mu.Lock()
	if c.recording {
		if _, ok := c.detachedAt[args.VolumeID]; !ok {
			c.detachedAt[args.VolumeID] = time.Now()
		}
	}
	c.mu.Unlock()
	return nil
}

func (c *agentCSI) ControllerAttachVolume(args *structs.ClientCSIControllerAttachVolumeRequest, reply *structs.ClientCSIControllerAttachVolumeResponse) error {
	c.attaches.Add(1)
	reply.PublishContext = map[string]string{"attached-by": "bench"}
	return nil
}

func (c *agentCSI) ControllerValidateVolume(args *structs.ClientCSIControllerValidateVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	c.validates.Add(1)
	return nil
}

// record starts recording controller detach times afresh.
func (c *agentCSI) record() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recording, c.detachedAt, c.firstNodeDetach = true, map[string]time.Time{}, time.Time{}
}

// recorded stops recording and returns the controller detach times
// recorded and the first node detach's (zero if none came).
func (c *agentCSI) recorded() (map[string]time.Time, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recording = false
	return c.detachedAt, c.firstNodeDetach
}
