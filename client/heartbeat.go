package client

import (
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"github.com/volplane/volplane/structs"
)

const (
	// firstFingerprintWait bounds how long registration waits for the first
	// fingerprint of every plugin, so the node registers with them rather
	// than sending them a moment later; a hung plugin must not hold it up.
	firstFingerprintWait = 5 * time.Second
	// retryMin and retryMax bound the pause between failed rounds of
	// registration or heartbeat (each round tries every known server).
	retryMin = 100 * time.Millisecond
	retryMax = 15 * time.Second
	// defaultTTL stands in until a server names the heartbeat TTL.
	defaultTTL = 10 * time.Second
)

// heartbeatLoop registers the node, then heartbeats within the TTL the
// servers hand out, until shutdown. It never gives up: a refused or failed
// call is logged and tried again with backoff.
func (c *Client) heartbeatLoop() {
	select {
	case <-c.plugins.FirstRound():
	case <-time.After(firstFingerprintWait):
		c.logger.Warn("plugins have not all answered a first fingerprint; registering without them")
	case <-c.ctx.Done():
		return
	}

	hb := &heartbeater{c: c, ttl: defaultTTL}
	retry := retryMin
	for {
		err := hb.beat()
		var wait time.Duration
		switch {
		case c.ctx.Err() != nil:
			return
		case err == nil:
			retry = retryMin
			wait = hb.interval()
		case hb.lost:
			// The servers lost the node (a heartbeat found it missing):
			// register again at once.
			hb.lost = false
			wait = 0
		default:
			wait = retry
			// Keep retrying well within the TTL once the servers have
			// the node, so a failover does not let it go down.
			retry = min(retry*2, retryMax, max(hb.ttl/4, retryMin))
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-c.heartbeatNow:
			t.Stop()
		}
	}
}

// heartbeater is the heartbeat loop's state.
type heartbeater struct {
	c          *Client
	registered bool
	// lost is set when a heartbeat found the node unknown to the servers.
	lost bool
	ttl  time.Duration
	// sentControllers and sentNodes are the fingerprints a server last
	// accepted; a heartbeat carries fingerprints only when they differ.
	sentControllers, sentNodes map[string]*structs.CSIInfo
	lastErr                    string
	lastLogged                 time.Time
}

// repeatLogEvery is how often an error that keeps coming back is logged
// again at its level; in between it goes to the debug log.
const repeatLogEvery = time.Minute

// beat registers the node or heartbeats, and logs what went wrong.
func (h *heartbeater) beat() error {
	var err error
	if !h.registered {
		err = h.register()
	} else {
		err = h.heartbeat()
	}
	if err == nil {
		h.lastErr = ""
		return nil
	}
	if h.c.ctx.Err() != nil {
		return err
	}
	repeated := err.Error() == h.lastErr && time.Since(h.lastLogged) < repeatLogEvery
	h.lastErr = err.Error()
	what := "heartbeat"
	if !h.registered {
		what = "registration"
	}
	log := h.c.logger.With("node_id", h.c.id.NodeID, "error", err)
	switch {
	case repeated:
		log.Debug(what + " failed again; retrying")
		return err
	case structs.CodeOf(err) == structs.ErrCodePermissionDenied:
		// The servers know this node with another secret: its identity
		// file was replaced or another agent uses the same node ID. Only
		// an operator can fix it; keep trying so the node comes back when
		// they do.
		log.Error("servers refused the node's "+what+": the node secret does not match the one the node registered with; "+
			"restore the data dir's "+identityFile+" (or remove the node from the servers and the file to join as a new node)", "server", h.c.servers.Get())
	default:
		log.Warn(what+" failed; retrying", "servers", h.c.servers.All())
	}
	h.lastLogged = time.Now()
	return err
}

func (h *heartbeater) register() error {
	controllers, nodes := h.c.plugins.Fingerprints()
	args := &structs.NodeRegisterRequest{Node: h.c.node(controllers, nodes), IntroToken: h.c.config.IntroToken}
	var reply structs.NodeUpdateResponse
	if err := h.c.server.NodeRegister(args, &reply); err != nil {
		return err
	}
	h.accepted(&reply)
	h.registered = true
	h.sentControllers, h.sentNodes = controllers, nodes
	h.c.regOnce.Do(func() {
		h.c.logger.Info("node registered", "node_id", h.c.id.NodeID, "server", h.c.servers.Get(), "heartbeat_ttl", reply.HeartbeatTTL)
		close(h.c.registered)
	})
	return nil
}

func (h *heartbeater) heartbeat() error {
	controllers, nodes := h.c.plugins.Fingerprints()
	args := &structs.NodeUpdateStatusRequest{
		NodeID:   h.c.id.NodeID,
		SecretID: h.c.id.SecretID,
		Status:   structs.NodeStatusReady,
	}
	// Unchanged fingerprints travel as nil maps ("no change"), so a steady
	// heartbeat stays small; a changed side travels whole.
	if !structs.PluginsEqual(controllers, h.sentControllers) {
		args.CSIControllerPlugins = controllers
	}
	if !structs.PluginsEqual(nodes, h.sentNodes) {
		args.CSINodePlugins = nodes
	}
	var reply structs.NodeUpdateResponse
	err := h.c.server.NodeUpdateStatus(args, &reply)
	if structs.CodeOf(err) == structs.ErrCodeNotFound {
		h.c.logger.Warn("servers do not know the node; registering again", "node_id", h.c.id.NodeID)
		h.registered = false
		h.lost = true
	}
	if err != nil {
		return err
	}
	h.accepted(&reply)
	if args.CSIControllerPlugins != nil {
		h.sentControllers = controllers
	}
	if args.CSINodePlugins != nil {
		h.sentNodes = nodes
	}
	return nil
}

// accepted takes in what a server's reply says about the cluster.
func (h *heartbeater) accepted(reply *structs.NodeUpdateResponse) {
	if reply.HeartbeatTTL > 0 {
		h.ttl = reply.HeartbeatTTL
	}
	h.c.servers.Learn(reply.Servers)
}

// interval is the pause before the next heartbeat: about half the TTL,
// less up to a tenth of it, so that one missed heartbeat (or a failover)
// still fits in the TTL and many clients do not beat in step.
func (h *heartbeater) interval() time.Duration {
	return h.ttl/2 - rand.N(h.ttl/10+1)
}

// node is the node as the client registers it.
func (c *Client) node(controllers, nodes map[string]*structs.CSIInfo) *structs.Node {
	host, _ := os.Hostname()
	return &structs.Node{
		ID:         c.id.NodeID,
		Name:       c.config.NodeName,
		SecretID:   c.id.SecretID,
		Datacenter: c.config.Datacenter,
		Address:    host,
		Attributes: map[string]string{
			"os.name":         runtime.GOOS,
			"cpu.arch":        runtime.GOARCH,
			"unique.hostname": host,
		},
		Status:               structs.NodeStatusReady,
		CSIControllerPlugins: controllers,
		CSINodePlugins:       nodes,
	}
}
