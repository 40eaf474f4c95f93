package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/volplane/volplane/tlsutil"
)

// runTLS measures what mutual TLS on the RPC port costs: two 3-server
// clusters side by side, the same but for tls.rpc, take registers, then
// claims, with cfg.Writers callers in cfg.ScaleRounds interleaved rounds of
// cfg.ScaleOps and cfg.ScaleClaimOps calls (the sizes of the scale phase,
// which compares two clusters the same way). The TLS cluster's rate as a
// share of the plaintext one's in the same round, the median over the
// rounds, must reach TLSTargetRatio.
func runTLS(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	var plain, secured *volplane
	defer func() {
		cfg.progress("tls: shutting its clusters down")
		for _, vp := range []*volplane{plain, secured} {
			if vp != nil {
				err = errors.Join(err, vp.close())
			}
		}
	}()
	tc, err := benchTLS(filepath.Join(dir, "tls-certs"))
	if err != nil {
		return err
	}
	cfg.progress("tls: starting two 3-server volplane clusters, one with tls.rpc")
	if plain, err = startVolplaneTLS(ctx, cfg, filepath.Join(dir, "tls-off"), "tls-off", nil); err != nil {
		return err
	}
	if secured, err = startVolplaneTLS(ctx, cfg, filepath.Join(dir, "tls-on"), "tls-on", tc); err != nil {
		return err
	}
	for _, vp := range []*volplane{plain, secured} {
		if err := vp.registerNode(); err != nil {
			return err
		}
	}

	sides := []*side{
		scaleSide(ctx, "plaintext", nil, nil, plain.registerChunk(ctx, cfg)),
		scaleSide(ctx, "tls", nil, nil, secured.registerChunk(ctx, cfg)),
	}
	if err := interleave(cfg, PhaseTLSRegister, cfg.Writers, cfg.ScaleOps, cfg.ScaleRounds, sides); err != nil {
		return err
	}
	rep.addPaired(PhaseTLSRegister, cfg.Writers, "plaintext", &sides[0].s, "tls", &sides[1].s, TLSTargetRatio, "mutual TLS on every connection")

	total := warmupOps(cfg.Writers) + cfg.ScaleClaimOps
	var fixtures [2]*claimFixture
	for i, vp := range []*volplane{plain, secured} {
		if fixtures[i], err = vp.setupClaims(ctx, cfg, PhaseTLSClaim+" ("+sides[i].name+")", total, 0); err != nil {
			return err
		}
	}
	sides = []*side{
		scaleSide(ctx, "plaintext", nil, nil, plain.claimChunk(ctx, cfg, fixtures[0])),
		scaleSide(ctx, "tls", nil, nil, secured.claimChunk(ctx, cfg, fixtures[1])),
	}
	if err := interleave(cfg, PhaseTLSClaim, cfg.Writers, cfg.ScaleClaimOps, cfg.ScaleRounds, sides); err != nil {
		return err
	}
	rep.addPaired(PhaseTLSClaim, cfg.Writers, "plaintext", &sides[0].s, "tls", &sides[1].s, TLSTargetRatio, "mutual TLS on every connection")
	for _, vp := range []*volplane{plain, secured} {
		if !vp.stillLeader() {
			rep.Notes = append(rep.Notes, "a volplane leader changed during the tls phase: figures are skewed")
		}
	}
	return nil
}

// benchTLS writes a CA and a server certificate into dir and loads them
// with tls.rpc on: the servers and the benchmark's client (which stands in
// for a forwarding server) share it.
func benchTLS(dir string) (*tlsutil.Configurator, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := tlsutil.GenerateCA(tlsutil.CAOptions{})
	if err != nil {
		return nil, err
	}
	pair, err := tlsutil.GenerateCert(tlsutil.CertOptions{Role: tlsutil.RoleServer}, ca.Cert, ca.Key)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ca.pem": ca.Cert, "server.pem": pair.Cert, "server-key.pem": pair.Key}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return tlsutil.NewConfigurator(tlsutil.Config{EnableRPC: true, VerifyServerHostname: true,
		CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem")})
}
