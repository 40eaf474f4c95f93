package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/volplane/volplane/tlsutil"
)

// tlsFiles are the CA and certificates every TLS cluster of the package
// uses, written once by TestMain, as `volplane tls` writes them.
type tlsFiles struct {
	dir                 string
	ca, caKey           string
	server, client, cli certFiles
	caCertPEM, caKeyPEM []byte
}

type certFiles struct{ cert, key string }

// e2eTLS is set by TestMain (setupTLS); the harness's HTTP client trusts
// its CA and presents its CLI certificate to HTTPS agents.
var e2eTLS *tlsFiles

// setupTLS writes a CA and a server, a client and a CLI certificate into
// dir and makes the harness's HTTP client speak HTTPS with them.
func setupTLS(dir string) error {
	ca, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		return err
	}
	f := &tlsFiles{dir: dir, caCertPEM: ca.Cert, caKeyPEM: ca.Key,
		ca: filepath.Join(dir, "volplane-agent-ca.pem"), caKey: filepath.Join(dir, "volplane-agent-ca-key.pem")}
	if err := writeFiles(map[string][]byte{f.ca: ca.Cert, f.caKey: ca.Key}); err != nil {
		return err
	}
	for _, c := range []struct {
		role tlsutil.Role
		out  *certFiles
	}{{tlsutil.RoleServer, &f.server}, {tlsutil.RoleClient, &f.client}, {tlsutil.RoleCLI, &f.cli}} {
		if *c.out, err = f.issue(c.role.String(), tlsutil.CertOptions{Role: c.role}); err != nil {
			return err
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Cert)
	cli, err := tls.LoadX509KeyPair(f.cli.cert, f.cli.key)
	if err != nil {
		return err
	}
	httpClient.Transport.(*http.Transport).TLSClientConfig = &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cli}, MinVersion: tls.VersionTLS12,
	}
	e2eTLS = f
	return nil
}

// copyTo copies the files into dir, so that a test may rewrite a cluster's
// certificates (a rotation) without touching other clusters'.
func (f *tlsFiles) copyTo(dir string) (*tlsFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	out := *f
	out.dir = dir
	move := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		dst := filepath.Join(dir, filepath.Base(path))
		return dst, os.WriteFile(dst, b, 0o600)
	}
	var err error
	for _, p := range []*string{&out.ca, &out.caKey, &out.server.cert, &out.server.key,
		&out.client.cert, &out.client.key, &out.cli.cert, &out.cli.key} {
		if *p, err = move(*p); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// issue signs a certificate with the CA into NAME.pem and NAME-key.pem.
func (f *tlsFiles) issue(name string, o tlsutil.CertOptions) (certFiles, error) {
	pair, err := tlsutil.GenerateCert(o, f.caCertPEM, f.caKeyPEM)
	if err != nil {
		return certFiles{}, fmt.Errorf("issuing certificate %s: %w", name, err)
	}
	c := certFiles{cert: filepath.Join(f.dir, name+".pem"), key: filepath.Join(f.dir, name+"-key.pem")}
	return c, writeFiles(map[string][]byte{c.cert: pair.Cert, c.key: pair.Key})
}

// block is an agent's tls block with the given certificate.
func (f *tlsFiles) block(c certFiles) string {
	return fmt.Sprintf(`
tls {
  http      = true
  rpc       = true
  ca_file   = %q
  cert_file = %q
  key_file  = %q
}
`, f.ca, c.cert, c.key)
}

// cliEnv is the CLI's environment for an HTTPS agent.
func (f *tlsFiles) cliEnv() []string {
	return []string{"VOLPLANE_CACERT=" + f.ca, "VOLPLANE_CLIENT_CERT=" + f.cli.cert, "VOLPLANE_CLIENT_KEY=" + f.cli.key}
}

func writeFiles(files map[string][]byte) error {
	for path, b := range files {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// copyFile writes src's content over dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}
