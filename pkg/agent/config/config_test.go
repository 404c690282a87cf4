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
