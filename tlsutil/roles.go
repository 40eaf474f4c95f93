// Package tlsutil is volplane's TLS: the agent's certificates and CA,
// reloaded on SIGHUP; the tls.Configs of the RPC port, the HTTP API and
// the dialers; the roles that certificate names carry; and the generation
// of a CA and of server, client and CLI certificates (volplane tls ...).
//
// Roles follow Nomad's model: a certificate's DNS names say what its holder
// is. server.<region>.volplane may speak Raft, join and forward to servers;
// client.<region>.volplane may act only as a node; cli.<region>.volplane
// only calls the HTTP API.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
)

// Role is what a peer's certificate allows it to do.
type Role uint8

// The roles. RoleNone is a peer without a certificate that names a role
// (or any peer when TLS is off: the cluster is open and nobody is told
// apart, as in Nomad without TLS).
const (
	RoleNone Role = iota
	RoleServer
	RoleClient
	RoleCLI
)

func (r Role) String() string {
	switch r {
	case RoleServer:
		return "server"
	case RoleClient:
		return "client"
	case RoleCLI:
		return "cli"
	}
	return "none"
}

// DefaultRegion is the region of an agent that names none, as Nomad's.
const DefaultRegion = "global"

// Domain is the last label of every role name.
const Domain = "volplane"

// RoleName is the DNS name a certificate of role r in region carries:
// server.global.volplane, client.global.volplane, cli.global.volplane.
func RoleName(r Role, region string) string {
	if region == "" {
		region = DefaultRegion
	}
	return r.String() + "." + region + "." + Domain
}

// ServerName is the name a client or server checks on the server it dials
// when verify_server_hostname is on.
func ServerName(region string) string { return RoleName(RoleServer, region) }

// PeerRole is the role of the verified leaf certificate of a connection,
// in region. A certificate naming several roles gets the most privileged;
// one naming none, or only roles of another region, is RoleNone.
func PeerRole(cs tls.ConnectionState, region string) Role {
	if len(cs.PeerCertificates) == 0 || len(cs.VerifiedChains) == 0 {
		return RoleNone
	}
	return certRole(cs.PeerCertificates[0], region)
}

func certRole(cert *x509.Certificate, region string) Role {
	for _, r := range []Role{RoleServer, RoleClient, RoleCLI} {
		if slices.Contains(cert.DNSNames, RoleName(r, region)) {
			return r
		}
	}
	return RoleNone
}

// DescribePeer says who a TLS peer is for log lines: its certificate's
// subject and role names, never anything secret.
func DescribePeer(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return "no certificate"
	}
	c := cs.PeerCertificates[0]
	return fmt.Sprintf("certificate %q (names %v)", c.Subject.CommonName, c.DNSNames)
}
