package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Config is the agent's tls block, as Nomad's:
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
type Config struct {
	EnableHTTP bool
	EnableRPC  bool
	CAFile     string
	CertFile   string
	KeyFile    string
	// VerifyServerHostname makes an agent check, when it dials a server,
	// that the server's certificate carries server.<region>.volplane, so a
	// client certificate cannot pose as a server.
	VerifyServerHostname bool
	// VerifyHTTPSClient makes the HTTPS API require a client certificate
	// signed by the CA.
	VerifyHTTPSClient bool
	// MinVersion is "tls12" (the default) or "tls13".
	MinVersion string
	// Region is the agent's region, part of every role name.
	Region string
}

// Enabled reports whether the agent uses TLS anywhere.
func (c Config) Enabled() bool { return c.EnableHTTP || c.EnableRPC }

// minVersion parses MinVersion.
func (c Config) minVersion() (uint16, error) {
	switch c.MinVersion {
	case "", "tls12":
		return tls.VersionTLS12, nil
	case "tls13":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("tls.tls_min_version %q is not one of tls12, tls13", c.MinVersion)
}

// Validate checks the settings without reading the files.
func (c Config) Validate() error {
	if _, err := c.minVersion(); err != nil {
		return err
	}
	if !c.Enabled() {
		return nil
	}
	for _, f := range []struct{ name, val string }{
		{"ca_file", c.CAFile}, {"cert_file", c.CertFile}, {"key_file", c.KeyFile},
	} {
		if f.val == "" {
			return fmt.Errorf("tls.%s is required when tls.rpc or tls.http is on", f.name)
		}
	}
	return nil
}

// material is what the files held at the last (re)load.
type material struct {
	cert    *tls.Certificate
	leaf    *x509.Certificate
	pool    *x509.CertPool
	minVers uint16
}

// Configurator holds the agent's TLS settings and certificates and hands
// out tls.Configs that always use the latest ones: a reload (SIGHUP)
// applies to every handshake after it, and connections already up stay up.
type Configurator struct {
	mu  sync.RWMutex
	cfg Config
	mat *material
}

// NewConfigurator loads cfg's files. With TLS off it returns a
// Configurator whose every config is nil.
func NewConfigurator(cfg Config) (*Configurator, error) {
	c := &Configurator{}
	if err := c.Reload(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads cfg's files and, only if all of them are good, makes them
// the ones used from now on. On error the previous settings stay.
func (c *Configurator) Reload(cfg Config) error {
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var mat *material
	if cfg.Enabled() {
		var err error
		if mat, err = load(cfg); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.cfg, c.mat = cfg, mat
	c.mu.Unlock()
	return nil
}

func load(cfg Config) (*material, error) {
	minVers, err := cfg.minVersion()
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls.ca_file %s holds no PEM certificate", cfg.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading tls.cert_file %s and tls.key_file: %w", cfg.CertFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing tls.cert_file %s: %w", cfg.CertFile, err)
	}
	cert.Leaf = leaf
	return &material{cert: &cert, leaf: leaf, pool: pool, minVers: minVers}, nil
}

// Config returns the settings in use.
func (c *Configurator) Config() Config {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cfg
}

func (c *Configurator) current() (Config, *material) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cfg, c.mat
}

// RPCEnabled reports whether the RPC port speaks TLS only.
func (c *Configurator) RPCEnabled() bool {
	cfg, mat := c.current()
	return cfg.EnableRPC && mat != nil
}

// HTTPEnabled reports whether the HTTP API is HTTPS.
func (c *Configurator) HTTPEnabled() bool {
	cfg, mat := c.current()
	return cfg.EnableHTTP && mat != nil
}

// Region is the region role names are checked in.
func (c *Configurator) Region() string { return c.Config().Region }

// Warnings lists what is wrong with the agent's own certificate but does
// not stop it from loading: expired, not yet valid, or about to expire.
// Peers will refuse an expired certificate; the agent says so at start and
// on reload rather than failing later without a word.
func (c *Configurator) Warnings(now time.Time) []string {
	cfg, mat := c.current()
	if mat == nil {
		return nil
	}
	var out []string
	switch l := mat.leaf; {
	case now.After(l.NotAfter):
		out = append(out, fmt.Sprintf("certificate %s expired at %s: peers will refuse it", cfg.CertFile, l.NotAfter.UTC().Format(time.RFC3339)))
	case now.Before(l.NotBefore):
		out = append(out, fmt.Sprintf("certificate %s is not valid before %s: peers will refuse it", cfg.CertFile, l.NotBefore.UTC().Format(time.RFC3339)))
	case l.NotAfter.Sub(now) < 7*24*time.Hour:
		out = append(out, fmt.Sprintf("certificate %s expires at %s", cfg.CertFile, l.NotAfter.UTC().Format(time.RFC3339)))
	}
	if _, err := mat.leaf.Verify(x509.VerifyOptions{Roots: mat.pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil && now.Before(mat.leaf.NotAfter) {
		out = append(out, fmt.Sprintf("certificate %s is not signed by tls.ca_file %s: %v", cfg.CertFile, cfg.CAFile, err))
	}
	return out
}

// OwnRole is the role the agent's own certificate carries in its region.
func (c *Configurator) OwnRole() Role {
	cfg, mat := c.current()
	if mat == nil {
		return RoleNone
	}
	return certRole(mat.leaf, cfg.Region)
}

// IncomingRPC is the config the RPC port's TLS handshakes use: a client
// certificate signed by the CA is required. Nil when TLS is off for RPC.
func (c *Configurator) IncomingRPC() *tls.Config {
	if !c.RPCEnabled() {
		return nil
	}
	return &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		_, mat := c.current()
		if mat == nil {
			return nil, errors.New("tls is off")
		}
		return &tls.Config{
			Certificates: []tls.Certificate{*mat.cert},
			ClientCAs:    mat.pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   mat.minVers,
		}, nil
	}}
}

// IncomingHTTP is the HTTPS API's config; nil when tls.http is off. With
// verify_https_client a client certificate signed by the CA is required;
// otherwise one is verified when given.
func (c *Configurator) IncomingHTTP() *tls.Config {
	if !c.HTTPEnabled() {
		return nil
	}
	return &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cfg, mat := c.current()
		if mat == nil {
			return nil, errors.New("tls is off")
		}
		auth := tls.VerifyClientCertIfGiven
		if cfg.VerifyHTTPSClient {
			auth = tls.RequireAndVerifyClientCert
		}
		return &tls.Config{
			Certificates: []tls.Certificate{*mat.cert},
			ClientCAs:    mat.pool,
			ClientAuth:   auth,
			MinVersion:   mat.minVers,
			NextProtos:   []string{"h2", "http/1.1"},
		}, nil
	}}
}

// OutgoingRPC is the config for dialing a server's RPC port, built from
// the current certificates: the agent presents its own certificate and
// checks the server's against the CA, and its name against
// server.<region>.volplane with verify_server_hostname. Nil when TLS is
// off for RPC.
func (c *Configurator) OutgoingRPC() *tls.Config {
	cfg, mat := c.current()
	if !cfg.EnableRPC || mat == nil {
		return nil
	}
	out := &tls.Config{
		Certificates: []tls.Certificate{*mat.cert},
		RootCAs:      mat.pool,
		MinVersion:   mat.minVers,
	}
	if cfg.VerifyServerHostname {
		out.ServerName = ServerName(cfg.Region)
		return out
	}
	// Without the name check the chain is still verified: only the
	// address-based hostname check is skipped, as the address a server is
	// dialed at is not in its certificate.
	out.InsecureSkipVerify = true
	out.VerifyConnection = func(cs tls.ConnectionState) error {
		return verifyChain(cs, mat.pool)
	}
	return out
}

func verifyChain(cs tls.ConnectionState, pool *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}
