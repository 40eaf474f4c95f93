package command

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/tlsutil"
)

// TLSBlock is the agent's tls block, as Nomad's:
//
//	tls {
//	  http = true
//	  rpc  = true
//	  ca_file   = "volplane-agent-ca.pem"
//	  cert_file = "global-server-volplane.pem"
//	  key_file  = "global-server-volplane-key.pem"
//	  verify_server_hostname = true
//	  verify_https_client    = true
//	  tls_min_version        = "tls12"
//	}
type TLSBlock struct {
	HTTP                 bool   `hcl:"http,optional"`
	RPC                  bool   `hcl:"rpc,optional"`
	CAFile               string `hcl:"ca_file,optional"`
	CertFile             string `hcl:"cert_file,optional"`
	KeyFile              string `hcl:"key_file,optional"`
	VerifyServerHostname *bool  `hcl:"verify_server_hostname,optional"`
	VerifyHTTPSClient    *bool  `hcl:"verify_https_client,optional"`
	MinVersion           string `hcl:"tls_min_version,optional"`
}

// LimitsBlock bounds what one caller may hold or send, with Nomad's names
// where Nomad has the setting:
//
//	limits {
//	  rpc_max_conns_per_client  = 100   # 0: no limit
//	  http_max_conns_per_client = 100   # 0: no limit
//	  rpc_handshake_timeout     = "5s"
//	  rpc_max_streams_per_conn  = 1024
//	  http_body_timeout         = "30s"
//	}
type LimitsBlock struct {
	RPCMaxConnsPerClient  *int   `hcl:"rpc_max_conns_per_client,optional"`
	HTTPMaxConnsPerClient *int   `hcl:"http_max_conns_per_client,optional"`
	RPCHandshakeTimeout   string `hcl:"rpc_handshake_timeout,optional"`
	RPCMaxStreamsPerConn  int    `hcl:"rpc_max_streams_per_conn,optional"`
	HTTPBodyTimeout       string `hcl:"http_body_timeout,optional"`
}

// tlsConfig turns the agent's tls block into tlsutil's. Server names are
// checked unless the block turns it off: a client certificate must never
// pass for a server's.
func (a *AgentConfig) tlsConfig() tlsutil.Config {
	cfg := tlsutil.Config{Region: a.Region, VerifyServerHostname: true, VerifyHTTPSClient: true}
	b := a.TLS
	if b == nil {
		return cfg
	}
	cfg.EnableHTTP, cfg.EnableRPC = b.HTTP, b.RPC
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = b.CAFile, b.CertFile, b.KeyFile
	cfg.MinVersion = b.MinVersion
	if b.VerifyServerHostname != nil {
		cfg.VerifyServerHostname = *b.VerifyServerHostname
	}
	if b.VerifyHTTPSClient != nil {
		cfg.VerifyHTTPSClient = *b.VerifyHTTPSClient
	}
	return cfg
}

func (b *LimitsBlock) validate() error {
	if b == nil {
		return nil
	}
	for name, v := range map[string]*int{"rpc_max_conns_per_client": b.RPCMaxConnsPerClient,
		"http_max_conns_per_client": b.HTTPMaxConnsPerClient} {
		if v != nil && *v < 0 {
			return fmt.Errorf("limits.%s must not be negative (got %d; 0 means no limit)", name, *v)
		}
	}
	if b.RPCMaxStreamsPerConn < 0 {
		return fmt.Errorf("limits.rpc_max_streams_per_conn must not be negative (got %d)", b.RPCMaxStreamsPerConn)
	}
	for name, v := range map[string]string{"rpc_handshake_timeout": b.RPCHandshakeTimeout, "http_body_timeout": b.HTTPBodyTimeout} {
		if _, err := positiveDuration(v); err != nil {
			return fmt.Errorf("limits.%s %q: %v", name, v, err)
		}
	}
	return nil
}

// connLimitSetting turns a limit from the file (nil: unset, 0: no limit)
// into the server's (0: default, negative: no limit).
func connLimitSetting(v *int) int {
	switch {
	case v == nil:
		return 0
	case *v == 0:
		return -1
	}
	return *v
}

// newTLS loads the agent's TLS files and logs what is wrong with its
// certificate; nil error with TLS off.
func newTLS(a *AgentConfig, logger hclog.Logger) (*tlsutil.Configurator, error) {
	c, err := tlsutil.NewConfigurator(a.tlsConfig())
	if err != nil {
		return nil, err
	}
	for _, w := range c.Warnings(time.Now()) {
		logger.Warn("TLS: " + w)
	}
	return c, nil
}

// reloadTLS re-reads the config file (if the agent has one) and the TLS
// files it names, on SIGHUP. Connections that are up stay up; new
// handshakes use the new certificates. On any error the old ones stay.
func reloadTLS(c *tlsutil.Configurator, configFile string, flags *AgentConfig, logger hclog.Logger) {
	a := flags
	if configFile != "" {
		file, err := LoadAgentConfig(configFile)
		if err != nil {
			logger.Error("reload: keeping the TLS configuration in use", "error", err)
			return
		}
		a = file
	}
	next := a.tlsConfig()
	next.Region = c.Region() // the region is fixed for the agent's life
	if cur := c.Config(); cur.EnableRPC != next.EnableRPC || cur.EnableHTTP != next.EnableHTTP {
		logger.Error("reload: turning tls.rpc or tls.http on or off needs a restart; keeping the TLS configuration in use")
		return
	}
	if err := c.Reload(next); err != nil {
		logger.Error("reload: keeping the TLS configuration in use", "error", err)
		return
	}
	for _, w := range c.Warnings(time.Now()) {
		logger.Warn("TLS: " + w)
	}
	logger.Info("reloaded TLS certificates", "cert_file", next.CertFile, "ca_file", next.CAFile)
}
