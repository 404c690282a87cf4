package vf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// The VF program's decisions, run with BPF_PROG_RUN (the packet arrives on
// the loopback device, ifindex 1, which the test registers as pod A's VF).
// The namespace test (test/cluster TestDPUMode) runs the same program on
// real VF links.

var (
	macA = net.HardwareAddr{0x0a, 0x58, 10, 77, 1, 2}
	macB = net.HardwareAddr{0x0a, 0x58, 10, 77, 1, 3}
	ipA  = netip.MustParseAddr("10.77.1.2")
	ipB  = netip.MustParseAddr("10.77.1.3")
)

const (
	vni     = 1
	ifA     = 1  // loopback: where BPF_PROG_RUN's packets come in
	wireA   = 40 // nvf of A
	hostB   = 41 // nag of B
	verdict = 7  // TC_ACT_REDIRECT
)

func openTest(t *testing.T) *VF {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF)")
	}
	dir, err := os.MkdirTemp("/sys/fs/bpf", "vf-test-")
	if err != nil {
		t.Skip("no BPF filesystem:", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	v, err := Open(Config{DPUNetns: "/proc/self/ns/net", PinDir: dir, DirectForward: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	link := vfVfLink{HostIfindex: ifA, WireIfindex: wireA, Net: vni, Ip: ipU32(ipA)}
	copy(link.Mac[:], macA)
	if err := v.objs.VfLinks.Put(uint32(ifA), link); err != nil {
		t.Fatal(err)
	}
	if err := v.objs.DfFib.Put(dfKey(vni, macB), vfDfDest{HostIfindex: hostB, Ip: ipU32(ipB)}); err != nil {
		t.Fatal(err)
	}
	return v
}

// frame is an Ethernet + IPv4 + UDP packet.
func frame(dst, src net.HardwareAddr, ethType uint16, sip, dip netip.Addr) []byte {
	b := make([]byte, 14+20+8+16)
	copy(b[0:], dst)
	copy(b[6:], src)
	binary.BigEndian.PutUint16(b[12:], ethType)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], 20+8+16)
	s, d := sip.As4(), dip.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[20+4:], 8+16)
	return b
}

func run(t *testing.T, prog *ebpf.Program, pkt []byte) uint32 {
	t.Helper()
	ret, err := prog.Run(&ebpf.RunOptions{Data: pkt})
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

func TestDirectForwardDecisions(t *testing.T) {
	v := openTest(t)
	other := netip.MustParseAddr("10.77.1.9")
	for _, c := range []struct {
		name string
		pkt  []byte
		want Counter
	}{
		{"own source to a local pod", frame(macB, macA, 0x0800, ipA, ipB), Direct},
		{"another pod's address as source", frame(macB, macA, 0x0800, other, ipB), ToDPUSpoofed},
		{"another MAC as source", frame(macB, macB, 0x0800, ipA, ipB), ToDPUSpoofed},
		{"ARP", frame(macB, macA, 0x0806, ipA, ipB), ToDPUNotIP},
		{"IPv6", frame(macB, macA, 0x86dd, ipA, ipB), ToDPUNotIP},
		{"broadcast", frame(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, macA, 0x0800, ipA, ipB), ToDPUNoDest},
		{"a local pod's MAC, another address", frame(macB, macA, 0x0800, ipA, other), ToDPUAddr},
		{"to itself", frame(macA, macA, 0x0800, ipA, ipA), ToDPUNoDest},
	} {
		before, _ := v.Counters()
		if got := run(t, v.objs.VfHostIngress, c.pkt); got != verdict {
			t.Errorf("%s: verdict %d, want redirect", c.name, got)
		}
		after, _ := v.Counters()
		for n := Counter(0); n < numCounters; n++ {
			d := after[n.String()] - before[n.String()]
			if (n == c.want) != (d == 1) || d > 1 {
				t.Errorf("%s: counter %s moved by %d (want the packet counted once, as %s)", c.name, n, d, c.want)
			}
		}
	}

	// Another network's pod with the same MAC is not reachable directly.
	if err := v.objs.DfFib.Delete(dfKey(vni, macB)); err != nil {
		t.Fatal(err)
	}
	if err := v.objs.DfFib.Put(dfKey(vni+1, macB), vfDfDest{HostIfindex: hostB, Ip: ipU32(ipB)}); err != nil {
		t.Fatal(err)
	}
	before, _ := v.Counters()
	run(t, v.objs.VfHostIngress, frame(macB, macA, 0x0800, ipA, ipB))
	after, _ := v.Counters()
	if after["to-dpu-no-dest"]-before["to-dpu-no-dest"] != 1 || after["direct"] != before["direct"] {
		t.Errorf("a pod on another network was reached directly: %v -> %v", before, after)
	}

	// Off: everything goes to the DPU.
	if err := v.SetDirectForward(false); err != nil {
		t.Fatal(err)
	}
	if err := v.objs.DfFib.Put(dfKey(vni, macB), vfDfDest{HostIfindex: hostB, Ip: ipU32(ipB)}); err != nil {
		t.Fatal(err)
	}
	before, _ = v.Counters()
	run(t, v.objs.VfHostIngress, frame(macB, macA, 0x0800, ipA, ipB))
	after, _ = v.Counters()
	if after["to-dpu"]-before["to-dpu"] != 1 || after["direct"] != before["direct"] || v.DirectForward() {
		t.Errorf("direct forward off: %v -> %v", before, after)
	}
}

func TestWireAndUnknownLinks(t *testing.T) {
	v := openTest(t)
	before, _ := v.Counters()
	if got := run(t, v.objs.VfWireIngress, frame(macA, macB, 0x0800, ipB, ipA)); got != verdict {
		t.Errorf("from the DPU: verdict %d", got)
	}
	if err := v.objs.VfLinks.Delete(uint32(ifA)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*ebpf.Program{v.objs.VfHostIngress, v.objs.VfWireIngress} {
		if got := run(t, p, frame(macB, macA, 0x0800, ipA, ipB)); got != 2 { // TC_ACT_SHOT
			t.Errorf("a device that is no VF: verdict %d, want drop", got)
		}
	}
	after, _ := v.Counters()
	if after["from-dpu"]-before["from-dpu"] != 1 || after["drop-no-link"]-before["drop-no-link"] != 2 {
		t.Errorf("counters %v -> %v", before, after)
	}
}

func TestCPUMask(t *testing.T) {
	for in, want := range map[string]string{"0": "1", "1": "2", "0,2-3": "d", " 1 , 3": "a",
		"31": "80000000", "32": "1,00000000", "63": "80000000,00000000", "64": "1,00000000,00000000", "0,64": "1,00000000,00000001"} {
		if got, err := CPUMask(in); err != nil || got != want {
			t.Errorf("CPUMask(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ",", "x", "3-1", "-1", "8192", "1-"} {
		if got, err := CPUMask(bad); err == nil {
			t.Errorf("CPUMask(%q) = %q, accepted", bad, got)
		}
	}
}

// TestCPUMaskAllCPUs: every CPU of a machine of n CPUs, in the kernel's
// comma-separated form (before: one 64-bit hex number, refused by the
// kernel past 32 CPUs, and lists past CPU 63 refused outright).
func TestCPUMaskAllCPUs(t *testing.T) {
	f := strings.Repeat(",ffffffff", 8)[1:]
	for n, want := range map[int]string{1: "1", 2: "3", 33: "1,ffffffff", 64: "ffffffff,ffffffff", 65: "1,ffffffff,ffffffff", 256: f} {
		if got, err := CPUMask(fmt.Sprintf("0-%d", n-1)); err != nil || got != want {
			t.Errorf("%d CPUs: %q, %v; want %q", n, got, err, want)
		}
	}
}

// TestStaleLinks: vf_links keeps exactly the attached pairs. An entry of
// a host end that vanished without a Detach goes (before: it stayed until
// the map was full and every Attach failed), as does an entry whose
// ifindex the kernel gave to another pair.
func TestStaleLinks(t *testing.T) {
	pair := func(h, w uint32) vfVfLink { return vfVfLink{HostIfindex: h, WireIfindex: w} }
	entries := map[uint32]vfVfLink{
		10: pair(10, 11), 11: pair(10, 11), // attached
		20: pair(20, 21), 21: pair(20, 21), // host end 20 vanished
		30: pair(30, 31), 31: pair(30, 31), // 30 is now another pod's host end, with wire 32
		40: pair(10, 11), // an entry under a key not of its pair
	}
	live := map[uint32]uint32{10: 11, 30: 32}
	got := staleLinks(entries, live)
	want := []uint32{20, 21, 30, 31, 40}
	if !slices.Equal(got, want) {
		t.Errorf("stale %v, want %v", got, want)
	}
}
