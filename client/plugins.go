package client

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/structs"
)

// fingerprinter is what the plugin manager needs of a CSI client; the real
// one is *csi.Client, tests of the manager give a fake.
type fingerprinter interface {
	Fingerprint(ctx context.Context, pluginID string, typ structs.CSIPluginType) (controller, node *structs.CSIInfo, err error)
	Close() error
}

func newCSIFingerprinter(p PluginConfig, logger hclog.Logger) (fingerprinter, error) {
	return csi.NewClient(p.Endpoint, logger)
}

// pluginInstance is one configured plugin on this node.
type pluginInstance struct {
	cfg    PluginConfig
	socket string
	fp     fingerprinter
	// calls is the CSI client the ClientCSI endpoint drives; nil when fp is
	// a test fake.
	calls *csi.Client

	mu     sync.Mutex
	health *pluginHealth
}

// report returns what the node reports for the instance now.
func (p *pluginInstance) report() (controller, node *structs.CSIInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health.report()
}

// pluginManager fingerprints every configured plugin on its own goroutine,
// every interval, and keeps what the node reports about them.
type pluginManager struct {
	logger   hclog.Logger
	interval time.Duration
	// instances is fixed once the manager is built.
	instances map[string]*pluginInstance
	// changed is called (from a fingerprint goroutine) whenever what the
	// node reports about a plugin changed.
	changed func()
	// observed is Config.onFingerprint.
	observed func(pluginID string, failures int, healthy bool)

	firstRound chan struct{}
	pending    sync.WaitGroup
}

func newPluginManager(cfg *Config, logger hclog.Logger, changed func()) (*pluginManager, error) {
	m := &pluginManager{
		logger:     logger.Named("csi-plugins"),
		interval:   cfg.FingerprintInterval,
		instances:  map[string]*pluginInstance{},
		changed:    changed,
		observed:   cfg.onFingerprint,
		firstRound: make(chan struct{}),
	}
	newFP := cfg.newFingerprinter
	if newFP == nil {
		newFP = newCSIFingerprinter
	}
	for _, p := range cfg.Plugins {
		socket, err := endpointPath(p.Endpoint)
		if err != nil {
			m.close()
			return nil, err
		}
		fp, err := newFP(p, m.logger.With("plugin_id", p.ID))
		if err != nil {
			m.close()
			return nil, err
		}
		inst := &pluginInstance{
			cfg:    p,
			socket: socket,
			fp:     fp,
			health: newPluginHealth(p.ID, p.Type, cfg.UnhealthyThreshold, cfg.PluginGoneTTL),
		}
		inst.calls, _ = fp.(*csi.Client)
		m.instances[p.ID] = inst
	}
	return m, nil
}

// run starts one fingerprint loop per instance; each returns when ctx is
// done. goFunc runs a goroutine its owner waits for.
func (m *pluginManager) run(ctx context.Context, goFunc func(func()) bool) {
	m.pending.Add(len(m.instances))
	goFunc(func() {
		m.pending.Wait()
		close(m.firstRound)
	})
	for _, inst := range m.instances {
		goFunc(func() { m.loop(ctx, inst) })
	}
}

func (m *pluginManager) loop(ctx context.Context, inst *pluginInstance) {
	first := true
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if first {
				m.pending.Done()
			}
			return
		case <-t.C:
		}
		m.fingerprint(ctx, inst)
		if first {
			first = false
			m.pending.Done()
		}
		t.Reset(m.interval)
	}
}

// fingerprint takes one fingerprint of inst and tells the heartbeat when
// the report changed.
func (m *pluginManager) fingerprint(ctx context.Context, inst *pluginInstance) {
	// A hung plugin must not stop the loop for good; the CSI client's own
	// per-call deadlines apply within this one.
	fctx, cancel := context.WithTimeout(ctx, min(max(m.interval, 2*time.Second), 30*time.Second))
	defer cancel()
	controller, node, err := inst.fp.Fingerprint(fctx, inst.cfg.ID, inst.cfg.Type)
	if ctx.Err() != nil {
		return // shutting down: a cancelled call says nothing about the plugin
	}
	_, statErr := os.Stat(inst.socket)
	missing := errors.Is(statErr, fs.ErrNotExist)

	inst.mu.Lock()
	beforeC, beforeN := inst.health.report()
	wasHealthy := inst.health.isHealthy()
	inst.health.observe(time.Now(), controller, node, err, missing)
	afterC, afterN := inst.health.report()
	nowHealthy := inst.health.isHealthy()
	reason := inst.health.reason
	failures := inst.health.failures
	inst.mu.Unlock()
	if m.observed != nil {
		m.observed(inst.cfg.ID, failures, nowHealthy)
	}

	log := m.logger.With("plugin_id", inst.cfg.ID)
	switch {
	case err != nil && failures == 1:
		log.Warn("plugin fingerprint failed", "error", err)
	case err != nil:
		log.Debug("plugin fingerprint failed", "failures", failures, "error", err)
	}
	if wasHealthy != nowHealthy {
		if nowHealthy {
			log.Info("plugin is healthy")
		} else if afterC != nil || afterN != nil {
			log.Warn("plugin is unhealthy", "reason", reason)
		}
	}
	if (beforeC != nil || beforeN != nil) && afterC == nil && afterN == nil {
		log.Warn("plugin socket is gone; removing the plugin from the node", "socket", inst.socket)
	}
	if !afterC.Equal(beforeC) || !afterN.Equal(beforeN) {
		m.changed()
	}
}

// fingerprints returns what the node reports: controller and node
// fingerprints by plugin ID (empty maps, never nil).
func (m *pluginManager) fingerprints() (controllers, nodes map[string]*structs.CSIInfo) {
	controllers, nodes = map[string]*structs.CSIInfo{}, map[string]*structs.CSIInfo{}
	for id, inst := range m.instances {
		c, n := inst.report()
		if c != nil {
			controllers[id] = c
		}
		if n != nil {
			nodes[id] = n
		}
	}
	return controllers, nodes
}

// errPluginUnavailable builds the retryable error of a call for a plugin
// that cannot serve it here, so the server tries another node.
func errPluginUnavailable(format string, args ...any) error {
	return structs.NewError(structs.ErrCodeRetryable, format, args...)
}

// controller returns the CSI client of a healthy controller instance of the
// plugin.
func (m *pluginManager) controller(pluginID string) (*csi.Client, error) {
	inst, ok := m.instances[pluginID]
	if !ok {
		return nil, errPluginUnavailable("csi plugin %q does not run on this node", pluginID)
	}
	c, _ := inst.report()
	switch {
	case c == nil:
		return nil, errPluginUnavailable("csi plugin %q runs no controller on this node", pluginID)
	case !c.Healthy:
		return nil, errPluginUnavailable("csi plugin %q's controller on this node is unhealthy: %s", pluginID, c.HealthDescription)
	case inst.calls == nil:
		return nil, errPluginUnavailable("csi plugin %q has no CSI client", pluginID)
	}
	return inst.calls, nil
}

// controllerInfo returns what the plugin's controller here can do, nil
// when it runs none.
func (m *pluginManager) controllerInfo(pluginID string) *structs.CSIControllerInfo {
	inst, ok := m.instances[pluginID]
	if !ok {
		return nil
	}
	c, _ := inst.report()
	if c == nil {
		return nil
	}
	return c.ControllerInfo
}

// node returns the CSI client and node fingerprint of a healthy node
// instance of the plugin.
func (m *pluginManager) node(pluginID string) (*csi.Client, *structs.CSIInfo, error) {
	inst, ok := m.instances[pluginID]
	if !ok {
		return nil, nil, errPluginUnavailable("csi plugin %q does not run on this node", pluginID)
	}
	_, n := inst.report()
	switch {
	case n == nil:
		return nil, nil, errPluginUnavailable("csi plugin %q runs no node service on this node", pluginID)
	case !n.Healthy:
		return nil, nil, errPluginUnavailable("csi plugin %q's node service on this node is unhealthy: %s", pluginID, n.HealthDescription)
	case inst.calls == nil:
		return nil, nil, errPluginUnavailable("csi plugin %q has no CSI client", pluginID)
	}
	return inst.calls, n, nil
}

// close closes every CSI client.
func (m *pluginManager) close() {
	for _, inst := range m.instances {
		if err := inst.fp.Close(); err != nil {
			m.logger.Debug("closing csi client", "plugin_id", inst.cfg.ID, "error", err)
		}
	}
}
