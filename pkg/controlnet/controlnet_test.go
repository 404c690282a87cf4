package controlnet

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var loop = net.ParseIP("127.0.0.1")

func TestEnsurePKIFirstStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	sw, err := EnsurePKI(dir, RoleSwitch, []net.IP{loop})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := EnsurePKI(dir, RoleAgent, nil)
	if err != nil {
		t.Fatal(err)
	}
	ca := CAKeyDir(dir)
	for path, want := range map[string]os.FileMode{dir: 0o700, ca: 0o700, filepath.Join(ca, CAKey): 0o600,
		filepath.Join(dir, "switch.key"): 0o600, filepath.Join(dir, "agent.key"): 0o600, filepath.Join(dir, CACert): 0o644} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, CAKey)); err == nil {
		t.Errorf("the CA key is beside the leaf certificates in %s", dir)
	}
	// A second start reuses everything.
	again, err := EnsurePKI(dir, RoleSwitch, []net.IP{loop})
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Cert.Certificate[0]) != string(sw.Cert.Certificate[0]) {
		t.Error("a second start issued a new switch certificate")
	}
	// A new control address gets a new certificate from the same CA.
	other, err := EnsurePKI(dir, RoleSwitch, []net.IP{net.ParseIP("169.254.100.2")})
	if err != nil {
		t.Fatal(err)
	}
	if string(other.Cert.Certificate[0]) == string(sw.Cert.Certificate[0]) {
		t.Error("the switch certificate was not issued again for a new address")
	}
	_ = ag
}

func TestEnsurePKIWithoutCAKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := EnsurePKI(dir, RoleAgent, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(CAKeyDir(dir), CAKey)); err != nil {
		t.Fatal(err)
	}
	// Given certificates are used as they are ...
	if _, err := EnsurePKI(dir, RoleAgent, nil); err != nil {
		t.Errorf("agent certificate given, no CA key: %v", err)
	}
	// ... and what is missing cannot be made without the CA key.
	if _, err := EnsurePKI(dir, RoleSwitch, []net.IP{loop}); err == nil || !strings.Contains(err.Error(), CAKey) {
		t.Errorf("switch certificate missing, no CA key: %v", err)
	}
}

// TestEnsurePKILegacyCAKey: a CA key a previous release wrote beside the
// leaves moves to its own directory, and the CA stays the same.
func TestEnsurePKILegacyCAKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	first, err := EnsurePKI(dir, RoleAgent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(CAKeyDir(dir), CAKey), filepath.Join(dir, CAKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsurePKI(dir, RoleSwitch, []net.IP{loop}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CAKey)); err == nil {
		t.Error("the legacy CA key stayed beside the leaves")
	}
	again, err := EnsurePKI(dir, RoleAgent, nil)
	if err != nil || !again.Pool.Equal(first.Pool) {
		t.Errorf("the CA changed: %v", err)
	}
}

// TestEnsurePKIRefusesLooseKeys: an operator's key file that others may
// read is refused, with the fix in the error (before: used as it was).
func TestEnsurePKIRefusesLooseKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := EnsurePKI(dir, RoleAgent, nil); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{filepath.Join(dir, "agent.key"), filepath.Join(CAKeyDir(dir), CAKey)} {
		if err := os.Chmod(key, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsurePKI(dir, RoleAgent, nil); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("%s mode 0644: %v, want refused", key, err)
		}
		if err := os.Chmod(key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// serve runs an echo server on a control listener and returns its address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := Listen("", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(ctx context.Context, e Endpoint) error {
	c, err := e.Dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return err
	}
	_, err = bufio.NewReader(c).ReadString('\n')
	return err
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	sw, err := EnsurePKI(dir, RoleSwitch, []net.IP{loop})
	if err != nil {
		t.Fatal(err)
	}
	ag, err := EnsurePKI(dir, RoleAgent, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, sw.ServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := roundTrip(ctx, Endpoint{Network: "tcp", Address: addr, TLS: ag.ClientConfig(loop)}); err != nil {
		t.Fatalf("agent with its certificate: %v", err)
	}

	// No client certificate: refused.
	noCert := ag.ClientConfig(loop)
	noCert.Certificates = nil
	if err := roundTrip(ctx, Endpoint{Network: "tcp", Address: addr, TLS: noCert}); err == nil {
		t.Error("a client without a certificate got an answer")
	}
	// A certificate from another CA: refused, both ways.
	foreign, err := EnsurePKI(t.TempDir(), RoleAgent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(ctx, Endpoint{Network: "tcp", Address: addr, TLS: foreign.ClientConfig(loop)}); err == nil {
		t.Error("a client of another CA got an answer")
	}
	// The switch's own certificate is no agent's.
	swAsClient := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{sw.Cert}, RootCAs: sw.Pool, ServerName: "127.0.0.1"}
	if err := roundTrip(ctx, Endpoint{Network: "tcp", Address: addr, TLS: swAsClient}); err == nil {
		t.Error("a client with the switch's certificate got an answer")
	}
	// The agent checks the switch's address.
	wrongName := ag.ClientConfig(net.ParseIP("10.9.9.9"))
	if err := roundTrip(ctx, Endpoint{Network: "tcp", Address: addr, TLS: wrongName}); err == nil {
		t.Error("the agent accepted a switch certificate for another address")
	}
}

func TestListenRefusesWildcards(t *testing.T) {
	sw, err := EnsurePKI(t.TempDir(), RoleSwitch, []net.IP{loop})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "192.0.2.77:0"} {
		if l, err := Listen("", addr, sw.ServerConfig()); err == nil {
			l.Close()
			t.Errorf("Listen(%s) accepted", addr)
		}
	}
}
