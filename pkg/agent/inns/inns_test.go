package inns

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSysctlsUnderRoot: sysctls are written under SysctlRoot (the host's
// /proc/sys/net mounted elsewhere in a container), and a key the kernel
// lacks is skipped.
func TestSysctlsUnderRoot(t *testing.T) {
	root := t.TempDir()
	defer func(old string) { SysctlRoot = old }(SysctlRoot)
	SysctlRoot = root
	fwd := filepath.Join(root, "net/ipv4/ip_forward")
	v6 := filepath.Join(root, "net/ipv6/conf/eth0/disable_ipv6")
	for p, v := range map[string]string{fwd: "0\n", v6: "1\n"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Sysctls("", map[string]string{"net/ipv4/ip_forward": "1", "net/ipv6/conf/eth0/disable_ipv6": "1"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(fwd); string(b) != "1" {
		t.Errorf("ip_forward: %q, want 1", b)
	}
	if b, _ := os.ReadFile(v6); string(b) != "1\n" {
		t.Errorf("disable_ipv6 already 1 was rewritten: %q", b)
	}
	if err := NoIPv6("", "nosuchdev"); err != nil {
		t.Errorf("NoIPv6 on a device the kernel does not list: %v", err)
	}
}
