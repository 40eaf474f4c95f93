package command

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/tlsutil"
)

// The files `volplane tls` writes, as `nomad tls` names them.
const (
	caCertFile = "volplane-agent-ca.pem"
	caKeyFile  = "volplane-agent-ca-key.pem"
)

// TLSCACreateCommand writes a new certificate authority.
type TLSCACreateCommand struct{ Meta }

func (c *TLSCACreateCommand) Synopsis() string { return "Create a certificate authority for agents" }

func (c *TLSCACreateCommand) Help() string {
	return helpText(`
Usage: volplane tls ca create [options]

  Creates a certificate authority for volplane agents: writes
  `+caCertFile+` and `+caKeyFile+` in the current directory. Keep the
  key file off the agents; it signs their certificates.
`, `
CA Create Options:

  -days=<n>
    How long the CA is valid, in days. Default: 1825.

  -common-name=<name>
    The CA's common name. Default: "volplane Agent CA <serial>".`, 0)
}

func (c *TLSCACreateCommand) Run(args []string) int {
	var (
		days int
		cn   string
	)
	f := c.FlagSet("tls ca create", 0)
	f.IntVar(&days, "days", 1825, "")
	f.StringVar(&cn, "common-name", "", "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 0 {
		return c.UsageError(c, "This command takes no arguments")
	}
	if days <= 0 {
		return c.UsageError(c, "-days must be positive (got %d)", days)
	}
	pair, err := tlsutil.GenerateCA(tlsutil.CAOptions{Days: days, CommonName: cn})
	if err != nil {
		return c.Fail("creating the CA", err)
	}
	if err := writeNew(caCertFile, pair.Cert, 0o644); err != nil {
		return c.Fail("writing the CA certificate", err)
	}
	if err := writeNew(caKeyFile, pair.Key, 0o600); err != nil {
		os.Remove(caCertFile)
		return c.Fail("writing the CA key", err)
	}
	c.Ui.Output("==> CA certificate saved to: " + caCertFile)
	c.Ui.Output("==> CA certificate key saved to: " + caKeyFile)
	return 0
}

// TLSCertCreateCommand writes a server, client or CLI certificate signed by
// the CA.
type TLSCertCreateCommand struct{ Meta }

func (c *TLSCertCreateCommand) Synopsis() string {
	return "Create a server, client or CLI certificate"
}

func (c *TLSCertCreateCommand) Help() string {
	return helpText(`
Usage: volplane tls cert create -server|-client|-cli [options]

  Creates a certificate and key signed by the CA, named for its role:
  <region>-server-volplane.pem and <region>-server-volplane-key.pem (and
  -client-, -cli-). The certificate carries the role's name
  (server.<region>.volplane, client.<region>.volplane or
  cli.<region>.volplane), localhost and 127.0.0.1: a server certificate may
  speak Raft and join servers, a client certificate may only act as a node,
  a CLI certificate only calls the HTTP API.
`, `
Cert Create Options:

  -server, -client, -cli
    The role of the certificate; exactly one.

  -region=<region>
    The region in the role name. Default: global.

  -days=<n>
    How long the certificate is valid, in days. Default: 365.

  -ca=<path>, -key=<path>
    The CA certificate and key. Default: `+caCertFile+` and `+caKeyFile+`.

  -additional-dnsname=<name>
    Another DNS name for the certificate; repeatable.

  -additional-ipaddress=<ip>
    Another IP address for the certificate; repeatable.`, 0)
}

func (c *TLSCertCreateCommand) Run(args []string) int {
	var (
		server, client, cliRole bool
		region, caFile, keyFile string
		days                    int
		dnsNames, ips           stringList
	)
	f := c.FlagSet("tls cert create", 0)
	f.BoolVar(&server, "server", false, "")
	f.BoolVar(&client, "client", false, "")
	f.BoolVar(&cliRole, "cli", false, "")
	f.StringVar(&region, "region", tlsutil.DefaultRegion, "")
	f.IntVar(&days, "days", 365, "")
	f.StringVar(&caFile, "ca", caCertFile, "")
	f.StringVar(&keyFile, "key", caKeyFile, "")
	f.Var(&dnsNames, "additional-dnsname", "")
	f.Var(&ips, "additional-ipaddress", "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 0 {
		return c.UsageError(c, "This command takes no arguments")
	}
	var role tlsutil.Role
	n := 0
	for _, r := range []struct {
		set  bool
		role tlsutil.Role
	}{{server, tlsutil.RoleServer}, {client, tlsutil.RoleClient}, {cliRole, tlsutil.RoleCLI}} {
		if r.set {
			role = r.role
			n++
		}
	}
	if n != 1 {
		return c.UsageError(c, "Give exactly one of -server, -client or -cli")
	}
	if !validRegion(region) {
		return c.UsageError(c, "-region %q must be letters, digits and dashes", region)
	}
	if days <= 0 {
		return c.UsageError(c, "-days must be positive (got %d)", days)
	}
	var ipList []net.IP
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return c.UsageError(c, "-additional-ipaddress %q is not an IP address", s)
		}
		ipList = append(ipList, ip)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return c.Fail("reading the CA certificate (create one with `volplane tls ca create`)", err)
	}
	caKey, err := os.ReadFile(keyFile)
	if err != nil {
		return c.Fail("reading the CA key", err)
	}
	pair, err := tlsutil.GenerateCert(tlsutil.CertOptions{Role: role, Region: region, Days: days,
		DNSNames: dnsNames, IPAddresses: ipList}, caPEM, caKey)
	if err != nil {
		return c.Fail("creating the certificate", err)
	}
	base := fmt.Sprintf("%s-%s-volplane", region, role)
	if err := writeNew(base+".pem", pair.Cert, 0o644); err != nil {
		return c.Fail("writing the certificate", err)
	}
	if err := writeNew(base+"-key.pem", pair.Key, 0o600); err != nil {
		os.Remove(base + ".pem")
		return c.Fail("writing the key", err)
	}
	c.Ui.Output(fmt.Sprintf("==> Using CA file %s and CA key %s", caFile, keyFile))
	title := map[tlsutil.Role]string{tlsutil.RoleServer: "Server", tlsutil.RoleClient: "Client", tlsutil.RoleCLI: "CLI"}[role]
	c.Ui.Output(fmt.Sprintf("==> %s certificate for %s saved to: %s.pem", title, tlsutil.RoleName(role, region), base))
	c.Ui.Output(fmt.Sprintf("==> %s certificate key saved to: %s-key.pem", title, base))
	return 0
}

// writeNew writes a file that must not exist yet: overwriting a CA key
// would orphan every certificate it signed.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s already exists; move it away first", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

func init() {
	Register("tls", func(ui cli.Ui) cli.CommandFactory {
		return parent("tls", "Create a CA and certificates for TLS",
			"Create the certificate authority and the server, client and CLI\n  certificates of a TLS cluster (tls { rpc = true, http = true }).")
	})
	Register("tls ca", func(ui cli.Ui) cli.CommandFactory {
		return parent("tls ca", "Create a certificate authority", "Create a certificate authority.")
	})
	Register("tls cert", func(ui cli.Ui) cli.CommandFactory {
		return parent("tls cert", "Create certificates", "Create server, client and CLI certificates.")
	})
	Register("tls ca create", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &TLSCACreateCommand{Meta{Ui: ui}}, nil }
	})
	Register("tls cert create", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &TLSCertCreateCommand{Meta{Ui: ui}}, nil }
	})
}
