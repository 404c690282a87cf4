package config

import (
	"strings"
	"testing"
)

// TestProxyRedirect: defaults filled in, bad values refused.
func TestProxyRedirect(t *testing.T) {
	c, err := Parse([]byte("nodes: [{name: a, underlay: 192.168.1.1, podCIDR: 10.1.0.0/24}]\nproxyRedirect: {ports: [9080], optOut: [default/legacy]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := c.ProxyRedirect
	if r.FailMode != "open" || r.FailClosed() || r.HealthAddr != "127.0.0.1:15021" || r.HealthIntervalMS != 500 || r.OptOut[0] != "default/legacy" {
		t.Errorf("defaults: %+v", r)
	}
	for in, want := range map[string]string{
		"proxyRedirect: {ports: []}":                                 "at least one TCP port",
		"proxyRedirect: {ports: [80], failMode: maybe}":              "failMode",
		"proxyRedirect: {ports: [80], destinations: [\"fd00::/8\"]}": "only IPv4",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", in, err, want)
		}
	}
	if c, err := Parse([]byte("proxyRedirect: {ports: [80], failMode: closed}")); err != nil || !c.ProxyRedirect.FailClosed() {
		t.Errorf("failMode closed: %v", err)
	}
}

// TestPodMTU: without mtu the pods' MTU follows the underlay device; an
// mtu in the file overrides it; a too small one is refused.
func TestPodMTU(t *testing.T) {
	c := Default()
	if c.MTU != 0 {
		t.Fatalf("embedded cluster file sets mtu %d; it should leave it to the underlay device", c.MTU)
	}
	if got := c.PodMTU(1400); got != 1350 {
		t.Errorf("underlay 1400, no mtu: pod MTU %d, want 1350", got)
	}
	c, err := Parse([]byte("mtu: 9000\nnodes: [{name: a, underlay: 10.0.0.1, podCIDR: 10.1.0.0/24}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.PodMTU(1400); got != 8950 {
		t.Errorf("mtu 9000 on a 1400 device: pod MTU %d, want 8950 (the file wins)", got)
	}
	if _, err := Parse([]byte("mtu: 600\n")); err == nil || !strings.Contains(err.Error(), "mtu 600") {
		t.Errorf("mtu 600: %v, want a refusal", err)
	}
}
