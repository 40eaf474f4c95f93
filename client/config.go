// Package client is the client agent: it keeps its node registered with the
// servers and heartbeating over one yamux session (serverconn), reports the
// health of the CSI plugins on its machine (csimanager), serves the
// ClientCSI calls the servers make back over that session, and runs the
// allocations placed on its node (claim, stage and publish their volumes,
// run their tasks through execdriver, supervise the tasks that are CSI
// plugins, report), keeping their state in a local database so that a
// restarted agent resumes them without the servers.
package client

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/client/allocrunner"
	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/tlsutil"
)

// Defaults of the timings a Config leaves at zero.
const (
	DefaultFingerprintInterval = 10 * time.Second
	DefaultUnhealthyThreshold  = 3
	DefaultPluginGoneTTL       = time.Minute
	DefaultRPCTimeout          = 10 * time.Second
	DefaultDatacenter          = "dc1"
	DefaultAllocWatchWait      = 5 * time.Minute
	DefaultClaimBackoffMin     = time.Second
	DefaultClaimBackoffMax     = 30 * time.Second
	DefaultTaskKillTimeout     = 5 * time.Second
	DefaultTaskPollInterval    = 250 * time.Millisecond
	DefaultTaskRestartDelay    = 15 * time.Second
	DefaultFinishedAllocsKept  = 50
)

// PluginConfig is one CSI plugin the client drives (see csimanager).
type PluginConfig = csimanager.PluginConfig

// Config is everything a client agent needs to start.
type Config struct {
	// NodeName is the node's human name; defaults to the host name.
	NodeName string
	// DataDir holds the node's identity, the CSI staging and target paths,
	// the record of which allocation uses which volume, the allocations'
	// durable state (client-state.db) and their directories. Required.
	DataDir string
	// Servers are RPC addresses ("host:port") of servers to register with.
	Servers []string
	// TLS, when its tls.rpc is on, is used for every connection to the
	// servers: the client's certificate (client.<region>.volplane) and the
	// CA that signs the servers'. Nil or off: plaintext.
	TLS *tlsutil.Configurator
	// IntroToken is the node introduction token the first registration
	// presents, where servers require one (server { node_intro_required }).
	// It is never logged.
	IntroToken string
	// Plugins are the CSI plugins on this machine.
	Plugins    []PluginConfig
	Datacenter string
	Logger     hclog.Logger

	// FingerprintInterval is the pause between two fingerprints of a plugin.
	FingerprintInterval time.Duration
	// UnhealthyThreshold is the number of failed fingerprints in a row
	// after which a healthy instance is reported unhealthy.
	UnhealthyThreshold int
	// PluginGoneTTL: a plugin socket missing this long removes the instance
	// from the node's fingerprints.
	PluginGoneTTL time.Duration
	// RPCTimeout bounds one call to a server.
	RPCTimeout time.Duration

	// Timing are the allocation runners' waits, pauses and bounds
	// (AllocWatchWait, ClaimBackoffMin and Max, TaskKillTimeout,
	// TaskPollInterval, TaskRestartDelay, FinishedAllocsKept).
	allocrunner.Timing

	// newFingerprinter replaces the CSI client for tests of the plugin
	// manager; nil means the real one.
	newFingerprinter func(PluginConfig, hclog.Logger) (csimanager.Fingerprinter, error)
	// onFingerprint, when set, is told the outcome of every fingerprint:
	// the failures in a row and whether the instance is reported healthy.
	onFingerprint func(pluginID string, failures int, healthy bool)
	// serverRetryMax, when set, caps the pause between failed rounds of the
	// allocation query and reports instead of retryMax (tests).
	serverRetryMax time.Duration
	// orphanSweepMin and orphanSweepMax, when set, bound the pause between
	// sweeps of orphaned volumes instead of orphanSweepRetryMin and
	// orphanSweepRetryMax (tests).
	orphanSweepMin, orphanSweepMax time.Duration
}

// normalize fills defaults and rejects a configuration that cannot work,
// naming the setting at fault.
func (c *Config) normalize() error {
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "volplane", Level: hclog.Info})
	}
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "volplane-client"
		}
		c.NodeName = h
	}
	if c.Datacenter == "" {
		c.Datacenter = DefaultDatacenter
	}
	orDefault(&c.FingerprintInterval, DefaultFingerprintInterval)
	orDefault(&c.UnhealthyThreshold, DefaultUnhealthyThreshold)
	orDefault(&c.PluginGoneTTL, DefaultPluginGoneTTL)
	orDefault(&c.RPCTimeout, DefaultRPCTimeout)
	orDefault(&c.AllocWatchWait, DefaultAllocWatchWait)
	orDefault(&c.ClaimBackoffMin, DefaultClaimBackoffMin)
	orDefault(&c.ClaimBackoffMax, DefaultClaimBackoffMax)
	c.ClaimBackoffMax = max(c.ClaimBackoffMax, c.ClaimBackoffMin)
	orDefault(&c.TaskKillTimeout, DefaultTaskKillTimeout)
	orDefault(&c.TaskPollInterval, DefaultTaskPollInterval)
	orDefault(&c.TaskRestartDelay, DefaultTaskRestartDelay)
	orDefault(&c.FinishedAllocsKept, DefaultFinishedAllocsKept)
	orDefault(&c.serverRetryMax, retryMax)
	orDefault(&c.orphanSweepMin, orphanSweepRetryMin)
	orDefault(&c.orphanSweepMax, orphanSweepRetryMax)
	c.orphanSweepMax = max(c.orphanSweepMax, c.orphanSweepMin)
	var m structs.MultiError
	if c.DataDir == "" {
		m.Add("a client needs a data dir")
	} else if !filepath.IsAbs(c.DataDir) {
		// Staging and target paths go to plugins, which need them absolute.
		abs, err := filepath.Abs(c.DataDir)
		if err != nil {
			m.Add("data dir %q: %v", c.DataDir, err)
		}
		c.DataDir = abs
	}
	if len(c.Servers) == 0 {
		m.Add("a client needs at least one server address")
	}
	if len(c.NodeName) > structs.MaxNameLength {
		m.Add("node name is longer than %d characters", structs.MaxNameLength)
	}
	seen := map[string]bool{}
	for _, p := range c.Plugins {
		if err := p.Validate(); err != nil {
			m.Add("csi plugin %q: %v", p.ID, err)
			continue
		}
		if seen[p.ID] {
			m.Add("csi plugin %q is configured twice", p.ID)
		}
		seen[p.ID] = true
	}
	if m.Len() > 0 {
		return errors.New(strings.Join(m.Errors, "; "))
	}
	return nil
}

// orDefault sets *v to d when it is left at zero (or is negative).
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// ParsePluginFlag parses a -csi-plugin flag:
// "ID=unix:///path/csi.sock[,type=monolith|node|controller]".
func ParsePluginFlag(s string) (PluginConfig, error) { return csimanager.ParsePluginFlag(s) }
