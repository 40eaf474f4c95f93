package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/client"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/tlsutil"
)

// ClientBlock configures the client role:
//
//	client {
//	  enabled = true
//	  servers = ["10.0.0.5:4647", "10.0.0.6"]
//	  intro_token = "..."   # where servers require node introduction
//	  csi_plugin {
//	    id       = "ebs"
//	    endpoint = "unix:///run/csi/ebs.sock"
//	    type     = "node"   # optional: monolith, node or controller
//	  }
//	}
type ClientBlock struct {
	Enabled    bool              `hcl:"enabled,optional"`
	Servers    []string          `hcl:"servers,optional"`
	IntroToken string            `hcl:"intro_token,optional"`
	CSIPlugins []*CSIPluginBlock `hcl:"csi_plugin,block"`
}

// CSIPluginBlock is one CSI plugin the client drives.
type CSIPluginBlock struct {
	ID       string `hcl:"id"`
	Endpoint string `hcl:"endpoint"`
	Type     string `hcl:"type,optional"`
}

// Names of the client's parts inside the agent's data dir, and the plugin
// the dev agent runs.
const (
	clientDataDir    = "client"
	devPluginDir     = "devplugin"
	devPluginID      = "dev"
	devPluginNodeID  = "dev-node"
	maxSocketPathLen = 100 // below the 107 bytes a unix socket path may have
)

// validate checks the client block; a nil block is valid.
func (b *ClientBlock) validate() error {
	if b == nil {
		return nil
	}
	for _, a := range b.Servers {
		if _, _, err := net.SplitHostPort(withDefaultPort(a)); err != nil {
			return fmt.Errorf("client.servers address %q: %v", a, err)
		}
	}
	seen := map[string]bool{}
	for _, p := range b.CSIPlugins {
		if _, err := p.config(); err != nil {
			return fmt.Errorf("client.csi_plugin: %v", err)
		}
		if seen[p.ID] {
			return fmt.Errorf("client.csi_plugin %q is configured twice", p.ID)
		}
		seen[p.ID] = true
	}
	return nil
}

func (p *CSIPluginBlock) config() (client.PluginConfig, error) {
	spec := p.ID + "=" + p.Endpoint
	if p.Type != "" {
		spec += ",type=" + p.Type
	}
	return client.ParsePluginFlag(spec)
}

// clientFlags are the agent's client flags.
type clientFlags struct {
	enabled bool
	servers string
	intro   string
	plugins stringList
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	f := &clientFlags{}
	fs.BoolVar(&f.enabled, "client", false, "")
	fs.StringVar(&f.servers, "servers", "", "")
	fs.StringVar(&f.intro, "intro-token", "", "")
	fs.Var(&f.plugins, "csi-plugin", "")
	return f
}

// apply merges the flags that were set into cfg. A -csi-plugin flag that
// cannot be parsed is an error naming what is wrong.
func (f *clientFlags) apply(cfg *AgentConfig, set map[string]bool) error {
	if cfg.Client == nil {
		cfg.Client = &ClientBlock{}
	}
	if set["client"] {
		cfg.Client.Enabled = f.enabled
	}
	if set["servers"] {
		cfg.Client.Servers = nil
		for _, a := range strings.Split(f.servers, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cfg.Client.Servers = append(cfg.Client.Servers, a)
			}
		}
	}
	if set["intro-token"] {
		cfg.Client.IntroToken = f.intro
	}
	if len(f.plugins) > 0 {
		cfg.Client.CSIPlugins = nil
		for _, s := range f.plugins {
			p, err := client.ParsePluginFlag(s)
			if err != nil {
				return fmt.Errorf("-csi-plugin: %v", err)
			}
			cfg.Client.CSIPlugins = append(cfg.Client.CSIPlugins,
				&CSIPluginBlock{ID: p.ID, Endpoint: p.Endpoint, Type: string(p.Type)})
		}
	}
	return cfg.Client.validate()
}

// newAgentLogger is the agent's logger, shared by its server and client.
func newAgentLogger(a *AgentConfig) hclog.Logger {
	level := hclog.LevelFromString(a.LogLevel)
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "volplane",
		Level:      level,
		JSONFormat: a.LogJSON,
		Output:     os.Stderr,
	})
}

// clientAgent is the client side of a running agent: the client and, with
// -dev, the development plugin it drives.
type clientAgent struct {
	client *client.Client
	plugin *devplugin.Plugin
}

// Shutdown stops the client, then the plugin.
func (a *clientAgent) Shutdown() error {
	if a == nil {
		return nil
	}
	err := a.client.Shutdown()
	if a.plugin != nil {
		a.plugin.Stop()
	}
	return err
}

// The dev agent's drain on exit is bounded by devDrainTimeout; of that, the
// servers have devReleaseWait to release the stopped allocations' volumes
// before the client detaches what is left itself.
const (
	devDrainTimeout = time.Minute
	devReleaseWait  = 15 * time.Second
)

// drainDev stops the dev agent's allocations and releases their volumes
// before it exits (client.DrainAllocations): its data dir goes with it, so
// no later start could take them over, and their tasks would go on running
// with their volumes deleted under them. With signals, a second SIGINT or
// SIGTERM gives the drain up.
func (a *clientAgent) drainDev(ui cli.Ui, signals bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), devDrainTimeout)
	defer cancel()
	if signals {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
		go func() {
			select {
			case <-sigs:
				ui.Output("Second signal: exiting without waiting for the allocations to stop")
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	ui.Output("Stopping the allocations and releasing their volumes (interrupt again to skip)")
	return a.client.DrainAllocations(ctx, devReleaseWait)
}

// clientConfig turns the agent configuration into the client's. dataDir
// is the agent's data dir (with -dev, the server's temporary one); srv is
// the server running in the same process, or nil.
func clientConfig(a *AgentConfig, dataDir string, srv *server.Server, tlsCfg *tlsutil.Configurator, logger hclog.Logger) (*client.Config, error) {
	if dataDir == "" {
		return nil, errors.New("a client needs a data_dir (or -dev)")
	}
	cfg := &client.Config{
		NodeName:   a.NodeName,
		DataDir:    filepath.Join(dataDir, clientDataDir),
		Logger:     logger,
		TLS:        tlsCfg,
		IntroToken: a.Client.IntroToken,
	}
	for _, s := range a.Client.Servers {
		cfg.Servers = append(cfg.Servers, withDefaultPort(s))
	}
	if len(cfg.Servers) == 0 && srv != nil {
		cfg.Servers = []string{srv.RPCAddr()}
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("a client needs the addresses of servers: -servers HOST:PORT[,...] or client { servers = [...] }")
	}
	for _, p := range a.Client.CSIPlugins {
		pc, err := p.config()
		if err != nil {
			return nil, err
		}
		cfg.Plugins = append(cfg.Plugins, pc)
	}
	return cfg, nil
}

// startClient starts the agent's client when the configuration enables it
// or dev is set, and returns nil otherwise. With dev it first starts the
// development plugin as monolith "dev", on a socket in the data dir, and
// adds it to the client's plugins.
func startClient(a *AgentConfig, dev bool, dataDir string, srv *server.Server, tlsCfg *tlsutil.Configurator, logger hclog.Logger) (*clientAgent, error) {
	if !dev && (a.Client == nil || !a.Client.Enabled) {
		return nil, nil
	}
	if a.Client == nil {
		a.Client = &ClientBlock{}
	}
	cfg, err := clientConfig(a, dataDir, srv, tlsCfg, logger)
	if err != nil {
		return nil, err
	}
	agent := &clientAgent{}
	if dev {
		if agent.plugin, err = startDevPlugin(dataDir, logger); err != nil {
			return nil, err
		}
		cfg.Plugins = append(cfg.Plugins, client.PluginConfig{
			ID: devPluginID, Endpoint: agent.plugin.Endpoint(), Type: structs.CSIPluginTypeMonolith,
		})
	}
	if agent.client, err = client.NewClient(cfg); err != nil {
		if agent.plugin != nil {
			agent.plugin.Stop()
		}
		return nil, fmt.Errorf("starting the client: %w", err)
	}
	return agent, nil
}

// startDevPlugin runs the development plugin with its state under dataDir.
// Volumes registered by hand are created when first published, so a
// registered volume can be claimed without a CreateVolume.
func startDevPlugin(dataDir string, logger hclog.Logger) (*devplugin.Plugin, error) {
	stateDir := filepath.Join(dataDir, devPluginDir)
	socket := filepath.Join(stateDir, "csi.sock")
	if len(socket) > maxSocketPathLen {
		// A unix socket path is short; a long data dir gets its socket
		// in a temporary directory of its own.
		dir, err := os.MkdirTemp("", "volplane-csi-")
		if err != nil {
			return nil, fmt.Errorf("creating a directory for the dev plugin's socket: %w", err)
		}
		socket = filepath.Join(dir, "csi.sock")
	}
	p, err := devplugin.New(devplugin.Config{
		Endpoint:       "unix://" + socket,
		StateDir:       stateDir,
		NodeID:         devPluginNodeID,
		CreateOnDemand: true,
		Logger:         logger,
	})
	if err != nil {
		return nil, fmt.Errorf("the development CSI plugin: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("starting the development CSI plugin: %w", err)
	}
	return p, nil
}

// devWritesReady closes ready, which holds the dev agent's API writes, once
// its own client has registered and the servers count the development
// plugin on the client's node healthy, as controller and as node: the first
// write a script sends (a volume create) then finds the plugin. Without the
// wait, writes held until the election would race the client's
// registration. It watches the state rather than polling, and returns a
// func that stops it (ready is closed then too) and waits for it.
func devWritesReady(srv *server.Server, cl *client.Client, ready chan<- struct{}) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ready)
		select {
		case <-cl.Registered():
		case <-ctx.Done():
			return
		}
		for {
			st := srv.State()
			ws := memdb.NewWatchSet()
			// A snapshot restore replaces the store.
			ws.Add(st.AbandonCh())
			p, err := st.CSIPluginByID(ws, devPluginID)
			if err == nil && p != nil && healthy(p.Controllers[cl.NodeID()]) && healthy(p.Nodes[cl.NodeID()]) {
				return
			}
			if ws.WatchCtx(ctx) != nil {
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func healthy(info *structs.CSIInfo) bool { return info != nil && info.Healthy }
