package testutil

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/volplane/volplane/tlsutil"
)

// TLSFiles are a CA and a certificate of each role, written as PEM files
// in a test's temporary directory, as `volplane tls` writes them.
type TLSFiles struct {
	Dir          string
	CA, CAKey    string
	Server       CertFiles
	Client       CertFiles
	CLI          CertFiles
	caCert, caKy []byte
}

// CertFiles are one certificate's files.
type CertFiles struct{ Cert, Key string }

// NewTLSFiles makes a fresh CA and a server, a client and a CLI
// certificate of region "global" signed by it.
func NewTLSFiles(t testing.TB) *TLSFiles {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatalf("generating a CA: %v", err)
	}
	f := &TLSFiles{Dir: dir, caCert: ca.Cert, caKy: ca.Key,
		CA: filepath.Join(dir, "volplane-agent-ca.pem"), CAKey: filepath.Join(dir, "volplane-agent-ca-key.pem")}
	writeFile(t, f.CA, ca.Cert)
	writeFile(t, f.CAKey, ca.Key)
	f.Server = f.Issue(t, "server", tlsutil.CertOptions{Role: tlsutil.RoleServer})
	f.Client = f.Issue(t, "client", tlsutil.CertOptions{Role: tlsutil.RoleClient})
	f.CLI = f.Issue(t, "cli", tlsutil.CertOptions{Role: tlsutil.RoleCLI})
	return f
}

// Issue signs another certificate with the CA and writes it as NAME.pem
// and NAME-key.pem.
func (f *TLSFiles) Issue(t testing.TB, name string, o tlsutil.CertOptions) CertFiles {
	t.Helper()
	pair, err := tlsutil.GenerateCert(o, f.caCert, f.caKy)
	if err != nil {
		t.Fatalf("generating certificate %s: %v", name, err)
	}
	c := CertFiles{Cert: filepath.Join(f.Dir, name+".pem"), Key: filepath.Join(f.Dir, name+"-key.pem")}
	writeFile(t, c.Cert, pair.Cert)
	writeFile(t, c.Key, pair.Key)
	return c
}

// IssueExpired signs a certificate of role r that expired a day ago.
func (f *TLSFiles) IssueExpired(t testing.TB, name string, r tlsutil.Role) CertFiles {
	return f.Issue(t, name, tlsutil.CertOptions{Role: r, Days: 1, Now: time.Now().Add(-48 * time.Hour)})
}

// Config returns a tls block with both TLS settings on, for the given
// certificate, checking server names.
func (f *TLSFiles) Config(c CertFiles) tlsutil.Config {
	return tlsutil.Config{EnableRPC: true, EnableHTTP: true, CAFile: f.CA, CertFile: c.Cert, KeyFile: c.Key,
		VerifyServerHostname: true, VerifyHTTPSClient: true}
}

// Configurator loads Config(c), failing the test on error.
func (f *TLSFiles) Configurator(t testing.TB, c CertFiles) *tlsutil.Configurator {
	t.Helper()
	cfg, err := tlsutil.NewConfigurator(f.Config(c))
	if err != nil {
		t.Fatalf("loading TLS files: %v", err)
	}
	return cfg
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}
