// Package controlnet is the control network between a host and its DPU
// domain (docs/dpu.md): the DPU's nagare-switch serves OpenFlow and its
// control protocol over TCP with mutual TLS on the control address only,
// and the host's agent dials it from the host's namespace.
//
// Certificates: a directory (the PKI dir) holds the CA's certificate and
// one leaf per role; the CA's key is kept apart, in the sibling directory
// CAKeyDir (<dir>-ca), so that the PKI dir can be given to a side (a DPU)
// without the power to issue certificates. What is missing is made on
// first start: the CA, then the leaf, signed by it; keys are written 0600
// in 0700 directories. An operator who brings their own puts ca.crt and
// <role>.crt/.key in the PKI dir (no ca.key is needed then); a key file
// that others may read (group or other permission bits) is refused. Both sides trust only that CA: the switch requires a client
// certificate with the agent role, the agent checks the switch's by the
// control address it dials.
package controlnet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/pkg/atomicfile"
)

// Role is who a certificate is for.
type Role string

// Roles.
const (
	RoleSwitch Role = "switch" // the TLS server, in the DPU domain
	RoleAgent  Role = "agent"  // the TLS client, on the host
)

// Files in a PKI directory.
const (
	CACert = "ca.crt"
	CAKey  = "ca.key"
)

// CAKeyDir is where the CA's key of the PKI directory dir is kept.
func CAKeyDir(dir string) string { return filepath.Clean(dir) + "-ca" }

// PKI is what one side needs for mutual TLS.
type PKI struct {
	Dir  string
	Pool *x509.CertPool
	Cert tls.Certificate
}

// EnsurePKI loads role's certificate from dir, making the CA and the leaf
// when they are missing. A switch's leaf must name every address in ips;
// one that does not is issued again (when the CA key is there).
func EnsurePKI(dir string, role Role, ips []net.IP) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("PKI dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	// Two processes starting together (agent and switch) share the CA:
	// one makes it, the other waits and reads it.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, err
	}
	caCert, caKey, err := ensureCA(dir)
	if err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, string(role)+".crt"), filepath.Join(dir, string(role)+".key")
	if err := checkKeyMode(keyPath); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err == nil && !covers(cert, ips) {
		err = errors.New("stale")
	}
	if err != nil {
		if caKey == nil {
			return nil, fmt.Errorf("PKI %s: no usable %s certificate (%v) and no %s to issue one", dir, role, err, CAKey)
		}
		if err := issue(certPath, keyPath, role, ips, caCert, caKey); err != nil {
			return nil, err
		}
		if cert, err = tls.LoadX509KeyPair(certPath, keyPath); err != nil {
			return nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &PKI{Dir: dir, Pool: pool, Cert: cert}, nil
}

func covers(c tls.Certificate, ips []net.IP) bool {
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil || time.Now().After(leaf.NotAfter) {
		return false
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// ensureCA loads or makes the CA; its key is nil when only the
// certificate was provided.
func ensureCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, CACert), filepath.Join(CAKeyDir(dir), CAKey)
	if err := os.MkdirAll(CAKeyDir(dir), 0o700); err != nil {
		return nil, nil, fmt.Errorf("CA key dir: %w", err)
	}
	if err := os.Chmod(CAKeyDir(dir), 0o700); err != nil {
		return nil, nil, err
	}
	if err := moveCAKey(filepath.Join(dir, CAKey), keyPath); err != nil {
		return nil, nil, err
	}
	if b, err := os.ReadFile(certPath); err == nil {
		cert, err := parseCert(b)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", certPath, err)
		}
		if err := checkKeyMode(keyPath); err != nil {
			return nil, nil, err
		}
		kb, err := os.ReadFile(keyPath)
		if errors.Is(err, os.ErrNotExist) {
			return cert, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		key, err := parseKey(kb)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
		}
		return cert, key, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "nagare control network CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// moveCAKey takes a CA key a previous release left beside the leaves
// (legacy) to its own directory (to).
func moveCAKey(legacy, to string) error {
	old, err := os.ReadFile(legacy)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur, err := os.ReadFile(to); err == nil {
		if string(cur) != string(old) {
			return fmt.Errorf("PKI: two different CA keys, %s and %s: remove one", legacy, to)
		}
		return os.Remove(legacy)
	}
	if err := checkKeyMode(legacy); err != nil {
		return err
	}
	if err := atomicfile.Write(to, 0o600, func(w io.Writer) error { _, err := w.Write(old); return err }); err != nil {
		return err
	}
	return os.Remove(legacy)
}

// checkKeyMode refuses a private key file others may read (a missing
// one is for the caller to find).
func checkKeyMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("PKI: private key %s has mode %04o, readable by others: want 0600 (chmod 600 %s)", path, m, path)
	}
	return nil
}

func issue(certPath, keyPath string, role Role, ips []net.IP, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	usage := x509.ExtKeyUsageClientAuth
	if role == RoleSwitch {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "nagare-" + string(role)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(2, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writePEM(certPath, "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

// writePEM replaces path with one PEM block of typ, with mode.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return atomicfile.Write(path, mode, func(w io.Writer) error {
		return pem.Encode(w, &pem.Block{Type: typ, Bytes: der})
	})
}

func parseCert(b []byte) (*x509.Certificate, error) {
	p, _ := pem.Decode(b)
	if p == nil || p.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(p.Bytes)
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	p, _ := pem.Decode(b)
	if p == nil {
		return nil, errors.New("no PEM key")
	}
	return x509.ParseECPrivateKey(p.Bytes)
}

// ServerConfig is the switch's side: TLS 1.3, a client certificate from
// the CA with the agent role is required.
func (p *PKI) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{p.Cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.Pool,
		VerifyPeerCertificate: func(_ [][]byte, chains [][]*x509.Certificate) error {
			if len(chains) == 0 || chains[0][0].Subject.CommonName != "nagare-"+string(RoleAgent) {
				return errors.New("controlnet: the client certificate is not an agent's")
			}
			return nil
		}}
}

// ClientConfig is the agent's side for a switch at ip: the switch's
// certificate must come from the CA and name ip.
func (p *PKI) ClientConfig(ip net.IP) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{p.Cert},
		RootCAs: p.Pool, ServerName: ip.String()}
}
