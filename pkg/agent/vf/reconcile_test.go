package vf

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/nagare-net/nagare/internal/nstest"
)

// vfLinks is vf_links, by key.
func vfLinks(t *testing.T, v *VF) map[uint32]vfVfLink {
	t.Helper()
	l, err := v.links()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestVanishedHostEnd: real devices. A pod's host end that vanishes
// before its DEL (the pod's namespace deleted first) leaves no vf_links
// entry behind: Detach finds the host end's entry through the wire's,
// and Reconcile removes the entries and the crossing pair of a host end
// the agent no longer knows. Before: the host end's entry stayed, and at
// the map's size every Attach failed.
func TestVanishedHostEnd(t *testing.T) {
	nstest.RequireRoot(t)
	dir, err := os.MkdirTemp("/sys/fs/bpf", "vf-test-")
	if err != nil {
		t.Skip("no BPF filesystem:", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	host, dpu, pod := nstest.New(t, "vfhost"), nstest.New(t, "vfdpu"), nstest.New(t, "vfpod")
	v, err := Open(Config{HostNetns: host.Path, DPUNetns: dpu.Path, PinDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	attach := func(name string, i byte) {
		nstest.Veth(t, host, name, pod, "eth"+name[len(name)-1:], 1450)
		host.IP(t, "link", "set", name, "up")
		l := Link{Host: name, MAC: net.HardwareAddr{2, 0, 0, 0, 0, i}, IP: netip.AddrFrom4([4]byte{10, 9, 0, i}), Net: 1, MTU: 1450}
		if _, err := v.Attach(l); err != nil {
			t.Fatal(err)
		}
	}
	attach("nagt1", 1)
	attach("nagt2", 2)
	if n := len(vfLinks(t, v)); n != 4 {
		t.Fatalf("%d vf_links entries after two attaches, want 4", n)
	}
	// Pod 1's host end vanishes; its DEL comes later.
	host.IP(t, "link", "del", "nagt1")
	if err := v.Detach("nagt1"); err != nil {
		t.Fatal(err)
	}
	if n := len(vfLinks(t, v)); n != 2 {
		t.Errorf("%d vf_links entries after pod 1's DEL, want pod 2's 2", n)
	}
	// Pod 2's host end vanishes and no DEL ever comes.
	host.IP(t, "link", "del", "nagt2")
	n, err := v.Reconcile(func() []string { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(vfLinks(t, v)) != 0 {
		t.Errorf("Reconcile removed %d, %d left; want 2, 0", n, len(vfLinks(t, v)))
	}
	if err := host.Sh(t, "ip", "link", "show", WireName("nagt2")); err == nil {
		t.Errorf("crossing pair %s stayed", WireName("nagt2"))
	}
}
