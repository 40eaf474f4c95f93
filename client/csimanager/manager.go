// Package csimanager is the client's registry of CSI plugin instances: the
// static ones from the agent's -csi-plugin flags and those plugin tasks run
// (the client's supervisor registers them). It fingerprints every instance
// on its own goroutine, keeps each one's health with hysteresis, tells the
// client when what the node reports changed, and hands the client's CSI
// endpoint the CSI client of a healthy controller or node instance.
package csimanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/structs"
)

// Fingerprinter is what the manager needs of a CSI client; the real
// one is *csi.Client, tests of the manager give a fake.
type Fingerprinter interface {
	Fingerprint(ctx context.Context, pluginID string, typ structs.CSIPluginType) (controller, node *structs.CSIInfo, err error)
	Close() error
}

func newCSIFingerprinter(p PluginConfig, logger hclog.Logger) (Fingerprinter, error) {
	return csi.NewClient(p.Endpoint, logger)
}

// HealthChange is told when an instance's reported health changes:
// healthy, or unhealthy with the reason.
type HealthChange func(healthy bool, reason string)

// pluginInstance is one plugin instance on this node: a static one from
// the agent's -csi-plugin flags, or one a plugin task runs (see
// the client's plugin supervisor).
type pluginInstance struct {
	// key names the instance in the registry: "static:<id>" or the
	// allocation and task that run it.
	key    string
	cfg    PluginConfig
	socket string
	fp     Fingerprinter
	// calls is the CSI client the ClientCSI endpoint drives; nil when fp is
	// a test fake.
	calls *csi.Client
	// onHealth, when set, is told of every change of reported health.
	onHealth HealthChange

	// cancel ends the instance's fingerprint loop; done is closed when it
	// returned.
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	health *pluginHealth
}

// report returns what the node reports for the instance now.
func (p *pluginInstance) report() (controller, node *structs.CSIInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	controller, node = p.health.report()
	for _, i := range []*structs.CSIInfo{controller, node} {
		if i != nil {
			i.AllocID = p.cfg.AllocID
		}
	}
	return controller, node
}

// Manager is the node's dynamic registry of plugin instances: the
// static ones are registered as the agent starts, the plugin tasks'
// instances while their tasks run. Each instance is fingerprinted on its
// own goroutine, every interval; the manager keeps what the node reports
// about them and tells the heartbeat when it changed.
type Manager struct {
	logger    hclog.Logger
	interval  time.Duration
	threshold int
	goneTTL   time.Duration
	newFP     func(PluginConfig, hclog.Logger) (Fingerprinter, error)
	// changed is called (from a fingerprint goroutine, or a registration)
	// whenever what the node reports about a plugin changed.
	changed func()
	// observed is Config.Observed.
	observed func(pluginID string, failures int, healthy bool)

	// ctx and goFunc are set by Run: instances registered later are
	// fingerprinted under them.
	ctx    context.Context
	goFunc func(func()) bool

	mu        sync.Mutex
	instances map[string]*pluginInstance

	firstRound chan struct{}
	pending    sync.WaitGroup
}

// StaticKey is the registry key of a plugin from the agent's flags.
func StaticKey(id string) string { return "static:" + id }

// Config is what the manager needs of the client's configuration.
type Config struct {
	// Plugins are the static plugins, registered as the manager is built.
	Plugins []PluginConfig
	// Interval is the pause between two fingerprints of an instance.
	Interval time.Duration
	// Threshold is the failed fingerprints in a row after which a healthy
	// instance is reported unhealthy.
	Threshold int
	// GoneTTL: an instance whose socket is missing this long is dropped
	// from the node's report.
	GoneTTL time.Duration
	// NewFingerprinter replaces the CSI client (tests); nil means the
	// real one.
	NewFingerprinter func(PluginConfig, hclog.Logger) (Fingerprinter, error)
	// Observed, when set, is told the outcome of every fingerprint: the
	// failures in a row and whether the instance is reported healthy.
	Observed func(pluginID string, failures int, healthy bool)
}

// New builds the manager with the static plugins registered; Run starts
// fingerprinting them. changed is called whenever what the node reports
// about its plugins changed.
func New(cfg Config, logger hclog.Logger, changed func()) (*Manager, error) {
	m := &Manager{
		logger:     logger.Named("csi-plugins"),
		interval:   cfg.Interval,
		threshold:  cfg.Threshold,
		goneTTL:    cfg.GoneTTL,
		instances:  map[string]*pluginInstance{},
		changed:    changed,
		observed:   cfg.Observed,
		newFP:      cfg.NewFingerprinter,
		firstRound: make(chan struct{}),
	}
	if m.newFP == nil {
		m.newFP = newCSIFingerprinter
	}
	for _, p := range cfg.Plugins {
		inst, err := m.newInstance(StaticKey(p.ID), p, nil)
		if err != nil {
			m.Close()
			return nil, err
		}
		m.instances[inst.key] = inst
	}
	return m, nil
}

// FirstRound is closed once every static instance answered (or failed) a
// first fingerprint.
func (m *Manager) FirstRound() <-chan struct{} { return m.firstRound }

// Report returns what the node reports for the instance registered under
// key; ok is false when there is none.
func (m *Manager) Report(key string) (controller, node *structs.CSIInfo, ok bool) {
	m.mu.Lock()
	inst := m.instances[key]
	m.mu.Unlock()
	if inst == nil {
		return nil, nil, false
	}
	controller, node = inst.report()
	return controller, node, true
}

// CSIClient returns the CSI client of the instance registered under key,
// whatever its health; nil when there is none.
func (m *Manager) CSIClient(key string) *csi.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	if inst := m.instances[key]; inst != nil {
		return inst.calls
	}
	return nil
}

// Keys returns the keys of the registered instances, sorted.
func (m *Manager) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.instances))
}

func (m *Manager) newInstance(key string, p PluginConfig, onHealth HealthChange) (*pluginInstance, error) {
	socket, err := EndpointPath(p.Endpoint)
	if err != nil {
		return nil, err
	}
	fp, err := m.newFP(p, m.logger.With("plugin_id", p.ID))
	if err != nil {
		return nil, err
	}
	inst := &pluginInstance{
		key: key, cfg: p, socket: socket, fp: fp, onHealth: onHealth,
		health: newPluginHealth(p.ID, p.Type, m.threshold, m.goneTTL),
		done:   make(chan struct{}),
	}
	inst.calls, _ = fp.(*csi.Client)
	return inst, nil
}

// Run starts one fingerprint loop per static instance; each returns when
// ctx is done. goFunc runs a goroutine its owner waits for. firstRound is
// closed once every static instance answered (or failed) a first time.
func (m *Manager) Run(ctx context.Context, goFunc func(func()) bool) {
	m.mu.Lock()
	m.ctx, m.goFunc = ctx, goFunc
	insts := slices.Collect(maps.Values(m.instances))
	m.mu.Unlock()
	m.pending.Add(len(insts))
	goFunc(func() {
		m.pending.Wait()
		close(m.firstRound)
	})
	for _, inst := range insts {
		m.start(inst, true)
	}
}

// start runs inst's fingerprint loop under the manager's context.
func (m *Manager) start(inst *pluginInstance, first bool) {
	ctx, cancel := context.WithCancel(m.ctx)
	inst.cancel = cancel
	if !m.goFunc(func() { m.loop(ctx, inst, first) }) {
		// Shutting down: nothing runs any more.
		cancel()
		if first {
			m.pending.Done()
		}
		close(inst.done)
	}
}

// Register adds a plugin task's instance to the registry and starts
// fingerprinting it; onHealth is told of every change of its health. A
// key registered already is an error.
func (m *Manager) Register(key string, p PluginConfig, onHealth HealthChange) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("csi plugin %q: %w", p.ID, err)
	}
	inst, err := m.newInstance(key, p, onHealth)
	if err != nil {
		return fmt.Errorf("csi plugin %q: %w", p.ID, err)
	}
	m.mu.Lock()
	if m.ctx == nil || m.ctx.Err() != nil {
		m.mu.Unlock()
		_ = inst.fp.Close()
		return errors.New("the client is shutting down")
	}
	if _, dup := m.instances[key]; dup {
		m.mu.Unlock()
		_ = inst.fp.Close()
		return fmt.Errorf("csi plugin instance %s is registered already", key)
	}
	m.instances[key] = inst
	// Started under the lock, so that a deregister finds it started.
	m.start(inst, false)
	m.mu.Unlock()
	m.logger.Info("plugin instance registered", "plugin_id", p.ID, "type", p.Type, "instance", key, "socket", inst.socket)
	return nil
}

// Deregister removes an instance from the registry: its fingerprint loop
// ends, its CSI client is closed, and the node stops reporting it. Unknown
// keys are ignored.
func (m *Manager) Deregister(key string) {
	m.mu.Lock()
	inst := m.instances[key]
	delete(m.instances, key)
	m.mu.Unlock()
	if inst == nil {
		return
	}
	inst.cancel()
	<-inst.done
	if err := inst.fp.Close(); err != nil {
		m.logger.Debug("closing csi client", "plugin_id", inst.cfg.ID, "error", err)
	}
	m.logger.Info("plugin instance deregistered", "plugin_id", inst.cfg.ID, "instance", key)
	m.changed()
}

// MarkUnhealthy reports an instance unhealthy at once, for a reason its
// supervisor knows before a fingerprint could (its task ended). The next
// good fingerprint makes it healthy again.
func (m *Manager) MarkUnhealthy(key, reason string) {
	m.mu.Lock()
	inst := m.instances[key]
	m.mu.Unlock()
	if inst == nil {
		return
	}
	inst.mu.Lock()
	beforeC, beforeN := inst.health.report()
	wasHealthy := inst.health.isHealthy()
	inst.health.markDown(reason)
	afterC, afterN := inst.health.report()
	inst.mu.Unlock()
	if wasHealthy && inst.onHealth != nil {
		inst.onHealth(false, reason)
	}
	if !afterC.Equal(beforeC) || !afterN.Equal(beforeN) {
		m.changed()
	}
}

func (m *Manager) loop(ctx context.Context, inst *pluginInstance, first bool) {
	defer close(inst.done)
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
func (m *Manager) fingerprint(ctx context.Context, inst *pluginInstance) {
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
		if inst.onHealth != nil {
			inst.onHealth(nowHealthy, reason)
		}
	}
	if (beforeC != nil || beforeN != nil) && afterC == nil && afterN == nil {
		log.Warn("plugin socket is gone; removing the plugin from the node", "socket", inst.socket)
	}
	if !afterC.Equal(beforeC) || !afterN.Equal(beforeN) {
		m.changed()
	}
}

// sorted returns the registered instances in key order, so that what the
// node reports does not depend on map order.
func (m *Manager) sorted() []*pluginInstance {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*pluginInstance, 0, len(m.instances))
	for _, k := range slices.Sorted(maps.Keys(m.instances)) {
		out = append(out, m.instances[k])
	}
	return out
}

// Fingerprints returns what the node reports: controller and node
// fingerprints by plugin ID (empty maps, never nil). Where several
// instances of a plugin run one side (a node plugin task and a controller
// task of the same plugin share the node's node side only if both run it),
// a healthy one is reported.
func (m *Manager) Fingerprints() (controllers, nodes map[string]*structs.CSIInfo) {
	controllers, nodes = map[string]*structs.CSIInfo{}, map[string]*structs.CSIInfo{}
	for _, inst := range m.sorted() {
		c, n := inst.report()
		id := inst.cfg.ID
		if c != nil && (controllers[id] == nil || (!controllers[id].Healthy && c.Healthy)) {
			controllers[id] = c
		}
		if n != nil && (nodes[id] == nil || (!nodes[id].Healthy && n.Healthy)) {
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

// pick returns the instance of the plugin whose side (controller or node)
// side picks, preferring a healthy one, with that side's fingerprint; nil
// when no instance runs the side.
func (m *Manager) pick(pluginID string, side func(c, n *structs.CSIInfo) *structs.CSIInfo) (*pluginInstance, *structs.CSIInfo, bool) {
	var (
		found *pluginInstance
		info  *structs.CSIInfo
		known bool
	)
	for _, inst := range m.sorted() {
		if inst.cfg.ID != pluginID {
			continue
		}
		known = true
		i := side(inst.report())
		if i != nil && (info == nil || (!info.Healthy && i.Healthy)) {
			found, info = inst, i
		}
	}
	return found, info, known
}

func controllerSide(c, _ *structs.CSIInfo) *structs.CSIInfo { return c }
func nodeSide(_, n *structs.CSIInfo) *structs.CSIInfo       { return n }

// Controller returns the CSI client of a healthy controller instance of the
// plugin.
func (m *Manager) Controller(pluginID string) (*csi.Client, error) {
	inst, c, known := m.pick(pluginID, controllerSide)
	switch {
	case !known:
		return nil, errPluginUnavailable("csi plugin %q does not run on this node", pluginID)
	case c == nil:
		return nil, errPluginUnavailable("csi plugin %q runs no controller on this node", pluginID)
	case !c.Healthy:
		return nil, errPluginUnavailable("csi plugin %q's controller on this node is unhealthy: %s", pluginID, c.HealthDescription)
	case inst.calls == nil:
		return nil, errPluginUnavailable("csi plugin %q has no CSI client", pluginID)
	}
	return inst.calls, nil
}

// ControllerInfo returns what the plugin's controller here can do, nil
// when it runs none.
func (m *Manager) ControllerInfo(pluginID string) *structs.CSIControllerInfo {
	_, c, _ := m.pick(pluginID, controllerSide)
	if c == nil {
		return nil
	}
	return c.ControllerInfo
}

// Node returns the CSI client and node fingerprint of a healthy node
// instance of the plugin.
func (m *Manager) Node(pluginID string) (*csi.Client, *structs.CSIInfo, error) {
	inst, n, known := m.pick(pluginID, nodeSide)
	switch {
	case !known:
		return nil, nil, errPluginUnavailable("csi plugin %q does not run on this node", pluginID)
	case n == nil:
		return nil, nil, errPluginUnavailable("csi plugin %q runs no node service on this node", pluginID)
	case !n.Healthy:
		return nil, nil, errPluginUnavailable("csi plugin %q's node service on this node is unhealthy: %s", pluginID, n.HealthDescription)
	case inst.calls == nil:
		return nil, nil, errPluginUnavailable("csi plugin %q has no CSI client", pluginID)
	}
	return inst.calls, n, nil
}

// Close closes every CSI client. The fingerprint loops have ended (their
// context is the client's, cancelled before).
func (m *Manager) Close() {
	m.mu.Lock()
	insts := slices.Collect(maps.Values(m.instances))
	m.mu.Unlock()
	for _, inst := range insts {
		if err := inst.fp.Close(); err != nil {
			m.logger.Debug("closing csi client", "plugin_id", inst.cfg.ID, "error", err)
		}
	}
}
