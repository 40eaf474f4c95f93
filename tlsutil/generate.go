package tlsutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CAOptions describe a new certificate authority.
type CAOptions struct {
	CommonName string        // default "volplane Agent CA <serial>"
	Days       int           // default 1825 (5 years)
	Now        time.Time     // default time.Now()
	Signer     crypto.Signer // default a new ECDSA P-256 key
}

// CertOptions describe a certificate signed by a CA.
type CertOptions struct {
	Role   Role   // server, client or cli
	Region string // default "global"
	Days   int    // default 365
	// DNSNames and IPAddresses are added to the role name, localhost and
	// 127.0.0.1 (as Nomad's certificates carry).
	DNSNames    []string
	IPAddresses []net.IP
	Now         time.Time
	Signer      crypto.Signer
}

// PEMPair is a certificate and its private key, both PEM-encoded.
type PEMPair struct {
	Cert []byte
	Key  []byte
}

// GenerateCA makes a self-signed CA certificate and its key.
func GenerateCA(o CAOptions) (PEMPair, error) {
	now, signer, err := defaults(o.Now, o.Signer)
	if err != nil {
		return PEMPair{}, err
	}
	days := o.Days
	if days <= 0 {
		days = 1825
	}
	serial, err := newSerial()
	if err != nil {
		return PEMPair{}, err
	}
	name := o.CommonName
	if name == "" {
		name = fmt.Sprintf("volplane Agent CA %d", serial)
	}
	skid, err := keyID(signer.Public())
	if err != nil {
		return PEMPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"volplane"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.AddDate(0, 0, days),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          skid,
		AuthorityKeyId:        skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, signer.Public(), signer)
	if err != nil {
		return PEMPair{}, fmt.Errorf("creating the CA certificate: %w", err)
	}
	return encodePair(der, signer)
}

// GenerateCert makes a certificate for a role, signed by the CA in caCert
// and caKey (PEM).
func GenerateCert(o CertOptions, caCert, caKey []byte) (PEMPair, error) {
	if o.Role != RoleServer && o.Role != RoleClient && o.Role != RoleCLI {
		return PEMPair{}, errors.New("a certificate needs a role: server, client or cli")
	}
	ca, caSigner, err := ParseCA(caCert, caKey)
	if err != nil {
		return PEMPair{}, err
	}
	now, signer, err := defaults(o.Now, o.Signer)
	if err != nil {
		return PEMPair{}, err
	}
	days := o.Days
	if days <= 0 {
		days = 365
	}
	serial, err := newSerial()
	if err != nil {
		return PEMPair{}, err
	}
	role := RoleName(o.Role, o.Region)
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if o.Role == RoleCLI {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	skid, err := keyID(signer.Public())
	if err != nil {
		return PEMPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: role},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.AddDate(0, 0, days),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		DNSNames:     append([]string{role, "localhost"}, o.DNSNames...),
		IPAddresses:  append([]net.IP{net.IPv4(127, 0, 0, 1)}, o.IPAddresses...),
		SubjectKeyId: skid,
	}
	if ca.NotAfter.Before(tmpl.NotAfter) {
		// A certificate cannot outlive the CA that vouches for it.
		tmpl.NotAfter = ca.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, signer.Public(), caSigner)
	if err != nil {
		return PEMPair{}, fmt.Errorf("signing the %s certificate: %w", o.Role, err)
	}
	return encodePair(der, signer)
}

// ParseCA reads a CA certificate and its key from PEM.
func ParseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("the CA file holds no PEM certificate")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	if !ca.IsCA {
		return nil, nil, errors.New("the CA file's certificate is not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, errors.New("the CA key file holds no PEM key")
	}
	key, err := parseKey(kb)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA key: %w", err)
	}
	return ca, key, nil
}

func parseKey(b *pem.Block) (crypto.Signer, error) {
	switch b.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", k)
		}
		return s, nil
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	}
	return nil, fmt.Errorf("unsupported PEM block %q", b.Type)
}

func defaults(now time.Time, signer crypto.Signer) (time.Time, crypto.Signer, error) {
	if now.IsZero() {
		now = time.Now()
	}
	if signer == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return now, nil, fmt.Errorf("generating a key: %w", err)
		}
		signer = k
	}
	return now, signer, nil
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return n, nil
}

func keyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return sum[:20], nil
}

func encodePair(der []byte, key crypto.Signer) (PEMPair, error) {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return PEMPair{}, fmt.Errorf("encoding the key: %w", err)
	}
	return PEMPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}
