package command

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/server"
)

// AgentCommand runs a server agent, a client agent or both (and, with -dev,
// a whole single-process cluster).
type AgentCommand struct {
	UI cli.Ui
	// ShutdownCh and ReloadCh, when set, replace the process signals (for
	// tests): SIGINT/SIGTERM and SIGHUP.
	ShutdownCh <-chan struct{}
	ReloadCh   <-chan struct{}

	configFile string
}

func (c *AgentCommand) Synopsis() string { return "Run a volplane agent" }

func (c *AgentCommand) Help() string {
	return strings.TrimSpace(`
Usage: volplane agent [options]

  Runs a volplane agent until it is interrupted (SIGINT or SIGTERM).

  -dev                    Run a single-server cluster, a client connected
                          to it and the development CSI plugin (as plugin
                          "dev"), with their state in a temporary
                          directory, for trying volplane out.
  -server                 Run as a server.
  -client                 Run as a client agent (both -server and -client
                          run both in one process).
  -servers=HOST:PORT,...  The servers a client registers with (default
                          port 4647; default: this agent's own server).
  -intro-token=SECRET     The node introduction token a client presents when
                          it registers for the first time, where servers
                          require one (server { node_intro_required }).
  -csi-plugin=ID=unix:///path/csi.sock[,type=monolith|node|controller]
                          A CSI plugin the client drives; repeatable. The
                          type defaults to what the plugin offers.
  -config=FILE            Read settings from an HCL file; flags override it.
  -node-name=NAME         The agent's name (default: the host name).
  -data-dir=DIR           Where the node ID, Raft log and snapshots live.
  -bind=IP                The address the HTTP and RPC listeners bind to
                          (default 127.0.0.1).
  -http-port=N            HTTP API port (default 4646; 0 picks a free
                          port, printed once bound).
  -rpc-port=N             RPC and Raft port (default 4647; 0 as above).
  -advertise=HOST:PORT    The RPC address other agents dial (default: the
                          bind address and RPC port).
  -bootstrap-expect=N     Form a cluster once N servers have met.
  -retry-join=HOST:PORT   Another server to join; repeatable.
  -region=REGION          The agent's region (default "global"); TLS role
                          names are checked in it.
  -acl-enabled            Enforce ACLs (acl { enabled = true }): every
                          request needs a token that allows it. Bootstrap
                          the first management token with
                          "volplane acl bootstrap".
  -log-level=LEVEL        trace, debug, info, warn or error (default info).
  -log-json               Log in JSON.

  TLS (tls { rpc = true, http = true, ca_file, cert_file, key_file, ... }),
  limits (limits { rpc_max_conns_per_client = 100, ... }) and ACLs
  (acl { enabled = true, token_ttl = "30s", policy_ttl = "30s" }) are set
  in the config file; SIGHUP reloads the certificates it names. To run the
  ACL bootstrap again, write the reset index its refusal names into
  <data_dir>/server/acl-bootstrap-reset on the leader.

  A server agent sets the Go collector's GOGC after every collection so
  that its heap may grow to a budget between collections (100 to 400):
  server { gc_heap_budget = "2GiB" }, by default a quarter of the memory
  the process may use; "0", or GOGC in the environment, leaves it alone.
`)
}

// stringList collects the values of a repeatable flag (-retry-join,
// -csi-plugin, -secret).
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (c *AgentCommand) Run(args []string) int {
	cfg, dev, err := c.parse(args)
	if err != nil {
		c.UI.Error("Error: " + err.Error())
		return 1
	}
	logger := newAgentLogger(cfg)
	tlsCfg, err := newTLS(cfg, logger)
	if err != nil {
		c.UI.Error("Error: " + err.Error())
		return 1
	}
	dataDir := cfg.DataDir
	var srv *server.Server
	var writesReady chan struct{}
	if dev || cfg.Server.Enabled {
		defer startGCTuning(cfg, logger)()
		srvCfg, cleanup, err := c.serverConfig(cfg, dev)
		if err != nil {
			c.UI.Error("Error: " + err.Error())
			return 1
		}
		defer cleanup()
		srvCfg.Logger = logger
		srvCfg.TLS = tlsCfg
		dataDir = srvCfg.DataDir
		if dev {
			// Writes wait for the agent's own client (see devWritesReady).
			writesReady = make(chan struct{})
			srvCfg.HTTPWritesReady = writesReady
		}
		if srv, err = server.NewServer(srvCfg); err != nil {
			c.UI.Error("Error starting agent: " + err.Error())
			return 1
		}
		scheme := "http"
		if tlsCfg.HTTPEnabled() {
			scheme = "https"
		}
		c.UI.Output(fmt.Sprintf("volplane agent started: server %q, RPC %s, HTTP %s://%s", srvCfg.NodeName, srv.RPCAddr(), scheme, srv.HTTPAddr()))
	}
	cl, err := startClient(cfg, dev, dataDir, srv, tlsCfg, logger)
	if err != nil {
		c.UI.Error("Error starting agent: " + err.Error())
		if srv != nil {
			srv.Shutdown()
		}
		return 1
	}
	if cl != nil {
		servers, _ := cl.client.Servers()
		c.UI.Output(fmt.Sprintf("volplane client started: node %s, servers %s", cl.client.NodeID(), strings.Join(servers, ",")))
	}
	if dev {
		defer devWritesReady(srv, cl.client, writesReady)()
		c.UI.Output(`Development mode: a single server, a client and the development CSI plugin "dev", whose state is discarded on exit.`)
	}

	waitForShutdown(c.ShutdownCh, c.ReloadCh, func() { reloadTLS(tlsCfg, c.configFile, cfg, logger) })
	c.UI.Output("Shutting down")
	code := 0
	if dev {
		// Nothing the dev agent started may outlive it (see drainDev).
		if err := cl.drainDev(c.UI, c.ShutdownCh == nil); err != nil {
			c.UI.Error("Error stopping the allocations: " + err.Error())
			code = 1
		}
	}
	// The client first, so its last calls still find its server.
	if err := cl.Shutdown(); err != nil {
		c.UI.Error("Error during shutdown: " + err.Error())
		code = 1
	}
	if srv != nil {
		if err := srv.Shutdown(); err != nil {
			c.UI.Error("Error during shutdown: " + err.Error())
			code = 1
		}
	}
	return code
}

// waitForShutdown returns once ch is closed or, when ch is nil (outside
// tests), on SIGINT or SIGTERM; meanwhile it calls reload on each SIGHUP
// (or each value on reloadCh in tests).
func waitForShutdown(ch, reloadCh <-chan struct{}, reload func()) {
	if ch != nil {
		for {
			select {
			case <-ch:
				return
			case <-reloadCh:
				reload()
			}
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for sig := range sigs {
		if sig != syscall.SIGHUP {
			return
		}
		reload()
	}
}

// parse reads the config file, then lets flags override it.
func (c *AgentCommand) parse(args []string) (*AgentConfig, bool, error) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var (
		dev, srv, logJSON                   bool
		configFile, nodeName, dataDir, bind string
		advertise, logLevel, region         string
		httpPort, rpcPort, expect           int
		retryJoin                           stringList
	)
	fs.BoolVar(&dev, "dev", false, "")
	fs.BoolVar(&srv, "server", false, "")
	fs.StringVar(&configFile, "config", "", "")
	fs.StringVar(&nodeName, "node-name", "", "")
	fs.StringVar(&dataDir, "data-dir", "", "")
	fs.StringVar(&bind, "bind", "", "")
	fs.StringVar(&advertise, "advertise", "", "")
	fs.IntVar(&httpPort, "http-port", -1, "")
	fs.IntVar(&rpcPort, "rpc-port", -1, "")
	fs.IntVar(&expect, "bootstrap-expect", -1, "")
	fs.Var(&retryJoin, "retry-join", "")
	fs.StringVar(&logLevel, "log-level", "", "")
	fs.StringVar(&region, "region", "", "")
	fs.BoolVar(&logJSON, "log-json", false, "")
	var aclEnabled bool
	fs.BoolVar(&aclEnabled, "acl-enabled", false, "")
	clientFlags := addClientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, false, fmt.Errorf("agent: %v (see volplane agent -help)", err)
	}
	if fs.NArg() > 0 {
		return nil, false, fmt.Errorf("agent takes no arguments, got %q", fs.Args())
	}

	cfg := &AgentConfig{}
	c.configFile = configFile
	if configFile != "" {
		var err error
		if cfg, err = LoadAgentConfig(configFile); err != nil {
			return nil, false, err
		}
	}
	if cfg.Server == nil {
		cfg.Server = &ServerBlock{}
	}
	if cfg.Ports == nil {
		cfg.Ports = &PortsConfig{}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["server"] {
		cfg.Server.Enabled = srv
	}
	if set["node-name"] {
		cfg.NodeName = nodeName
	}
	if set["data-dir"] {
		cfg.DataDir = dataDir
	}
	if set["bind"] {
		cfg.BindAddr = bind
	}
	if set["advertise"] {
		if cfg.Advert == nil {
			cfg.Advert = &AdvertConfig{}
		}
		cfg.Advert.RPC = advertise
	}
	if set["http-port"] {
		cfg.Ports.HTTP = &httpPort
	}
	if set["rpc-port"] {
		cfg.Ports.RPC = &rpcPort
	}
	if set["bootstrap-expect"] {
		cfg.Server.BootstrapExpect = expect
	}
	if len(retryJoin) > 0 {
		cfg.Server.RetryJoin = append([]string(nil), retryJoin...)
	}
	if set["log-level"] {
		cfg.LogLevel = logLevel
	}
	if set["region"] {
		cfg.Region = region
	}
	if set["log-json"] {
		cfg.LogJSON = logJSON
	}
	if set["acl-enabled"] {
		if cfg.ACL == nil {
			cfg.ACL = &ACLBlock{}
		}
		cfg.ACL.Enabled = aclEnabled
	}
	if err := clientFlags.apply(cfg, set); err != nil {
		return nil, false, err
	}
	if err := cfg.validate(); err != nil {
		return nil, false, err
	}
	if !dev && !cfg.Server.Enabled && !cfg.Client.Enabled {
		return nil, false, fmt.Errorf("agent: give -server and/or -client (or server/client { enabled = true } in the config file), or -dev")
	}
	return cfg, dev, nil
}

// serverConfig turns the agent configuration into the server's, all but
// the logger, which Run shares with the client.
func (c *AgentCommand) serverConfig(a *AgentConfig, dev bool) (*server.Config, func(), error) {
	cfg := server.DefaultConfig()
	cleanup := func() {}
	bind := a.BindAddr
	if bind == "" {
		bind = "127.0.0.1"
	}
	// Only an unset port is defaulted: 0 is "any free port".
	httpPort, rpcPort := defaultHTTPPort, defaultRPCPort
	if a.Ports.HTTP != nil {
		httpPort = *a.Ports.HTTP
	}
	if a.Ports.RPC != nil {
		rpcPort = *a.Ports.RPC
	}
	cfg.HTTPAddr = net.JoinHostPort(bind, strconv.Itoa(httpPort))
	cfg.RPCAddr = net.JoinHostPort(bind, strconv.Itoa(rpcPort))
	if a.Advert != nil && a.Advert.RPC != "" {
		cfg.RPCAdvertise = withDefaultPort(a.Advert.RPC)
	}
	cfg.NodeName = a.NodeName
	cfg.DataDir = a.DataDir
	cfg.Region = a.Region
	cfg.BootstrapExpect = a.Server.BootstrapExpect
	cfg.NodeIntroRequired = a.Server.NodeIntroRequired
	cfg.NodeIntroTokens = a.Server.NodeIntroTokens
	cfg.MaxGroupCount = a.Server.JobMaxGroupCount
	applyACL(a, cfg)
	cfg.EnableDebug = a.EnableDebug || dev
	if l := a.Limits; l != nil {
		cfg.RPCMaxConnsPerClient = connLimitSetting(l.RPCMaxConnsPerClient)
		cfg.HTTPMaxConnsPerClient = connLimitSetting(l.HTTPMaxConnsPerClient)
		cfg.RPCMaxStreamsPerSession = l.RPCMaxStreamsPerConn
		// Validated with the file.
		cfg.RPCHandshakeTimeout, _ = positiveDuration(l.RPCHandshakeTimeout)
		cfg.HTTPBodyTimeout, _ = positiveDuration(l.HTTPBodyTimeout)
	}
	for _, j := range a.Server.RetryJoin {
		cfg.RetryJoin = append(cfg.RetryJoin, withDefaultPort(j))
	}
	if a.Server.RetryInterval != "" {
		d, _ := time.ParseDuration(a.Server.RetryInterval)
		cfg.RetryJoinInterval = d
	}
	if m := a.Server.RaftMultiplier; m != nil {
		// Validated with the file.
		_ = server.SetRaftMultiplier(cfg.RaftConfig, *m)
	}
	if l := a.Server.RaftLogStore; l != nil {
		cfg.RaftLogStore = l.Backend
	}
	if a.Server.RaftSnapshotThreshold > 0 {
		cfg.RaftConfig.SnapshotThreshold = uint64(a.Server.RaftSnapshotThreshold)
	}
	// Validated with the file; unset leaves the server's defaults.
	if d, _ := positiveDuration(a.Server.HeartbeatTTL); d > 0 {
		cfg.HeartbeatTTL = d
	}
	if d, _ := positiveDuration(a.Server.NodeGracePeriod); d > 0 {
		cfg.NodeGracePeriod = d
	}
	if d, _ := positiveDuration(a.Server.CSIReleaseMaxDelay); d > 0 {
		cfg.ReleaseMaxDelay = d
	}
	if d, _ := positiveDuration(a.Server.CSICallTimeout); d > 0 {
		cfg.CSICallTimeout = d
	}
	if d, _ := positiveDuration(a.Server.NodeGCThreshold); d > 0 {
		cfg.NodeGCThreshold = d
	}
	if dev {
		cfg.DevMode = true
		if cfg.NodeName == "" {
			cfg.NodeName = "dev"
		}
		if cfg.DataDir == "" {
			dir, err := os.MkdirTemp("", "volplane-dev-")
			if err != nil {
				return nil, cleanup, fmt.Errorf("creating a temporary data dir: %w", err)
			}
			cfg.DataDir = dir
			cleanup = func() { os.RemoveAll(dir) }
		}
	}
	return cfg, cleanup, nil
}

func init() {
	Register("agent", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &AgentCommand{UI: ui}, nil }
	})
}
