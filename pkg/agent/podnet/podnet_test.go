package podnet

import (
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/nagare-net/nagare/internal/nstest"
)

func TestSetupCheckTeardown(t *testing.T) {
	node, pod := nstest.New(t, "pnode"), nstest.New(t, "ppod")
	n := Node{Netns: node.Path}
	p := Pod{Netns: pod.Path, IfName: "eth0", Host: HostIfName("c0ffee", "eth0"),
		Addr: netip.MustParsePrefix("10.66.1.5/24"), GW: netip.MustParseAddr("10.66.1.1"), MTU: 1450}
	if len(p.Host) > 15 || !strings.HasPrefix(p.Host, "nag") {
		t.Fatalf("host name %q", p.Host)
	}
	att, err := n.Setup(p)
	if err != nil {
		t.Fatal(err)
	}
	if att.MAC.String() != "0a:58:0a:42:01:05" {
		t.Errorf("pod MAC %s, want 0a:58:0a:42:01:05", att.MAC)
	}
	if err := n.Check(p); err != nil {
		t.Fatalf("check after setup: %v", err)
	}
	// A repeated ADD finds the same pair.
	att2, err := n.Setup(p)
	if err != nil || att2.HostIndex != att.HostIndex {
		t.Fatalf("second setup: %+v %v (first %+v)", att2, err, att)
	}
	out, _ := exec.Command("ip", "-n", pod.Name, "route", "show", "default").CombinedOutput()
	if !strings.Contains(string(out), "via 10.66.1.1 dev eth0") {
		t.Errorf("pod default route: %s", out)
	}
	out, _ = exec.Command("ip", "-n", pod.Name, "link", "show", "eth0").CombinedOutput()
	if !strings.Contains(string(out), "mtu 1450") {
		t.Errorf("pod link: %s", out)
	}
	// Check sees each thing taken away.
	pod.IP(t, "route", "del", "default")
	if err := n.Check(p); err == nil || !strings.Contains(err.Error(), "default route") {
		t.Errorf("check without route: %v", err)
	}
	if _, err := n.Setup(p); err != nil { // a repeated ADD repairs it
		t.Fatal(err)
	}
	pod.IP(t, "link", "set", "eth0", "mtu", "1500")
	if err := n.Check(p); err == nil || !strings.Contains(err.Error(), "MTU") {
		t.Errorf("check with MTU changed: %v", err)
	}
	pod.IP(t, "link", "set", "eth0", "mtu", "1450")
	pod.IP(t, "addr", "flush", "dev", "eth0")
	if err := n.Check(p); err == nil || !strings.Contains(err.Error(), "lacks address") {
		t.Errorf("check without address: %v", err)
	}
	if err := n.Teardown(p.Host); err != nil {
		t.Fatal(err)
	}
	if ok, err := n.HostExists(p.Host); ok || err != nil {
		t.Fatalf("host end after teardown: %v %v", ok, err)
	}
	if err := n.Teardown(p.Host); err != nil {
		t.Fatalf("second teardown: %v", err)
	}
	if err := n.Check(p); err == nil {
		t.Fatal("check after teardown passed")
	}
	// A namespace that does not exist is its own error.
	p.Netns = "/var/run/netns/nagare-no-such-ns"
	if _, err := n.Setup(p); !errors.Is(err, ErrNoNetns) {
		t.Fatalf("setup into a missing netns: %v", err)
	}
}

func TestSetupRefusesForeignInterface(t *testing.T) {
	node, pod := nstest.New(t, "fnode"), nstest.New(t, "fpod")
	pod.IP(t, "link", "add", "eth0", "type", "veth", "peer", "name", "x0")
	n := Node{Netns: node.Path}
	p := Pod{Netns: pod.Path, IfName: "eth0", Host: HostIfName("f00", "eth0"),
		Addr: netip.MustParsePrefix("10.66.1.6/24"), GW: netip.MustParseAddr("10.66.1.1"), MTU: 1450}
	if _, err := n.Setup(p); err == nil || !strings.Contains(err.Error(), "not made by nagare") {
		t.Fatalf("setup over a foreign eth0: %v", err)
	}
}
