package lab

import (
	"strings"
	"testing"
)

func TestCheckHostRefusals(t *testing.T) {
	s, err := LoadScenario("quickstart")
	if err != nil {
		t.Fatal(err)
	}
	defer func(f func() int) { geteuid = f }(geteuid)

	geteuid = func() int { return 1000 }
	if err := CheckHost(s); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("non-root: err = %v", err)
	}

	geteuid = func() int { return 0 }
	t.Setenv("PATH", t.TempDir()) // no tools at all
	err = CheckHost(s)
	for _, want := range []string{"sockperf (Debian package sockperf)", "iperf3 (Debian package iperf3)",
		"ip (Debian package iproute2)", "apt-get install", "iputils-ping"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no tools: err = %v, want it to name %q", err, want)
		}
	}
	if err := ovsAvailable(); err == nil || !strings.Contains(err.Error(), "openvswitch-switch") {
		t.Errorf("ovs without tools: %v", err)
	}
}
