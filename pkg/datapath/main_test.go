package datapath

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"github.com/nagare-net/nagare/internal/nstest"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/flow"
	"golang.org/x/sys/unix"
)

// Tests that load BPF programs run as root in a network namespace of their
// own (testNS), made in TestMain and removed afterwards.
var (
	testNS     string // name under /var/run/netns, "" when not root
	testPinDir string
)

func TestMain(m *testing.M) {
	code := func() int {
		flag.Parse() // testing.Short needs the flags before m.Run
		if os.Geteuid() == 0 && !testing.Short() {
			testNS = fmt.Sprintf("nagare-dpt-%d", os.Getpid())
			if err := nstest.Sh("ip", "netns", "add", testNS); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer nstest.Sh("ip", "netns", "del", testNS)
			// dummy0/dummy1: output targets that exist (veths whose peers
			// discard what clones really send; no dummy module here).
			for _, c := range [][]string{
				{"ip", "-n", testNS, "link", "set", "lo", "up"},
				{"ip", "-n", testNS, "link", "add", "dummy0", "type", "veth", "peer", "name", "dummy0p"},
				{"ip", "-n", testNS, "link", "add", "dummy1", "type", "veth", "peer", "name", "dummy1p"},
				{"ip", "-n", testNS, "link", "set", "dummy0", "up"},
				{"ip", "-n", testNS, "link", "set", "dummy1", "up"},
				{"ip", "-n", testNS, "link", "set", "dummy0p", "up"},
				{"ip", "-n", testNS, "link", "set", "dummy1p", "up"},
			} {
				if err := nstest.Sh(c...); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
			dir, err := os.MkdirTemp("/sys/fs/bpf", "nagare-test-")
			if err != nil {
				if err := ensureBPFFS(DefaultPinRoot); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
				dir, err = os.MkdirTemp("/sys/fs/bpf", "nagare-test-")
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
			testPinDir = dir
			defer os.RemoveAll(dir)
		}
		return m.Run()
	}()
	os.Exit(code)
}

func isBench(tb testing.TB) bool {
	_, ok := tb.(*testing.B)
	return ok
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if testNS == "" {
		tb.Skip("needs root and BPF (skipped in -short mode)")
	}
}

// Fake ports for BPF_PROG_RUN tests: lo (ifindex 1 in every namespace) is
// the ingress port, dummy0/dummy1 are output ports.
const (
	portIn     = 1
	portOut    = 2
	portOut2   = 3
	portTunnel = 4
	portPod    = 5
)

type testDP struct {
	*Datapath
	tb      testing.TB
	ifindex map[string]int
}

// newTestDP opens a fresh traced instance in testNS with lo as port 1.
func newTestDP(tb testing.TB) *testDP { return newTestDPWith(tb, nil) }

// restart closes the userspace side and opens the instance again from its
// pins, as a restarted switch does.
func (t *testDP) restart(tb testing.TB) {
	tb.Helper()
	cfg := t.cfg
	if err := t.Close(); err != nil {
		tb.Fatal(err)
	}
	d2, err := Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	t.Datapath = d2
}

// newTestDPWith is newTestDP with changes to the instance's Config.
func newTestDPWith(tb testing.TB, change func(*Config)) *testDP {
	tb.Helper()
	requireRoot(tb)
	name := strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name())
	// Every megaflow hit enters the EMC: tests count hits packet by packet.
	cfg := Config{Name: name, PinRoot: testPinDir, NetNS: "/var/run/netns/" + testNS, Trace: !isBench(tb), MaxFlows: 4096, EMCInsertInvProb: 1}
	if change != nil {
		change(&cfg)
	}
	d, err := Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	t := &testDP{Datapath: d, tb: tb, ifindex: map[string]int{}}
	// t.Datapath, not d: a restart test replaces it.
	tb.Cleanup(func() {
		if err := t.Datapath.Destroy(); err != nil {
			tb.Error(err)
		}
	})
	for _, n := range []string{"lo", "dummy0", "dummy1"} {
		_ = d.inNetns(func() error {
			ifc, err := net.InterfaceByName(n)
			if err != nil {
				tb.Fatal(err)
			}
			t.ifindex[n] = ifc.Index
			return nil
		})
	}
	t.fakePort(portIn, "lo", PortUplink)
	t.fakePort(portOut, "dummy0", PortUplink)
	t.fakePort(portOut2, "dummy1", PortUplink)
	return t
}

// fakePort registers a device as a port without attaching the program, so
// BPF_PROG_RUN can impersonate it.
func (t *testDP) fakePort(ofport uint32, dev string, kind PortKind) {
	t.tb.Helper()
	ifindex := t.ifindex[dev]
	info := nagarePortInfo{Ofport: ofport, Flags: uint32(kind) << portKindShift}
	if kind == PortTunnel {
		info.Flags |= portFlagTunnel
	}
	if err := t.portMap(ifindex).Put(uint32(ifindex), info); err != nil {
		t.tb.Fatal(err)
	}
	t.mu.Lock()
	t.ports[ofport] = &Port{Name: dev, Ifindex: ifindex, OFPort: ofport, Kind: kind}
	t.mu.Unlock()
}

type runResult struct {
	verdict uint32
	out     []byte
	outputs []traceOut
}

type traceOut struct {
	ifindex int
	flags   uint32
}

const (
	tcActOK       = 0
	tcActShot     = 2
	tcActRedirect = 7
)

// run pushes pkt through prog (default: the port ingress program) as if it
// arrived on dev, and returns the verdict, the rewritten packet and the
// outputs the actions chose.
func (t *testDP) run(pkt []byte, dev string) runResult {
	t.tb.Helper()
	zero := make([]nagareOutTrace, t.ncpu)
	if err := t.objs.OutTraces.Put(uint32(0), zero); err != nil {
		t.tb.Fatal(err)
	}
	ctx := make([]byte, 192)
	binary.NativeEndian.PutUint32(ctx[40:], uint32(t.ifindex[dev]))
	out := make([]byte, len(pkt)+256)
	opts := &ebpf.RunOptions{Data: pkt, DataOut: out, Context: ctx}
	var ret uint32
	err := t.inNetns(func() error {
		var err error
		ret, err = t.objs.NagarePortIngress.Run(opts)
		return err
	})
	if err != nil {
		t.tb.Fatal(err)
	}
	res := runResult{verdict: ret, out: opts.DataOut}
	per := make([]nagareOutTrace, t.ncpu)
	if err := t.objs.OutTraces.Lookup(uint32(0), &per); err != nil {
		t.tb.Fatal(err)
	}
	for _, p := range per {
		for i := 0; i < int(p.N) && i < len(p.Out); i++ {
			res.outputs = append(res.outputs, traceOut{int(p.Out[i].Ifindex), p.Out[i].Flags})
		}
	}
	return res
}

func (t *testDP) put(f flow.Flow) {
	t.tb.Helper()
	if err := t.Put(f); err != nil {
		t.tb.Fatal(err)
	}
}

func (t *testDP) drops() map[DropReason]uint64 {
	t.tb.Helper()
	d, err := t.Drops()
	if err != nil {
		t.tb.Fatal(err)
	}
	return d
}

func (t *testDP) counters() map[string]uint64 {
	t.tb.Helper()
	c, err := t.Counters()
	if err != nil {
		t.tb.Fatal(err)
	}
	return c
}

// Packet building with gopacket; checksums computed.

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
)

func serialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	for _, l := range ls {
		if n, ok := l.(gopacket.NetworkLayer); ok {
			for _, x := range ls {
				if tl, ok := x.(interface {
					SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
				}); ok {
					_ = tl.SetNetworkLayerForChecksum(n)
				}
			}
		}
	}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		tb.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func eth(t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: macA[:], DstMAC: macB[:], EthernetType: t}
}

func ip4(proto layers.IPProtocol, src, dst string) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: parseIP(src), DstIP: parseIP(dst)}
}

func ip6(next layers.IPProtocol, src, dst string) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: parseIP(src), DstIP: parseIP(dst)}
}

func parseIP(s string) net.IP { return net.ParseIP(s) }

func udpPkt(tb testing.TB, src, dst string, sport, dport uint16, payload string) []byte {
	tb.Helper()
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if strings.Contains(src, ":") {
		return serialize(tb, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolUDP, src, dst), u, gopacket.Payload(payload))
	}
	return serialize(tb, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolUDP, src, dst), u, gopacket.Payload(payload))
}

func tcpPkt(tb testing.TB, src, dst string, sport, dport uint16, syn bool) []byte {
	tb.Helper()
	tc := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), SYN: syn, ACK: !syn, Seq: 1, Window: 1000}
	if strings.Contains(src, ":") {
		return serialize(tb, eth(layers.EthernetTypeIPv6), ip6(layers.IPProtocolTCP, src, dst), tc, gopacket.Payload("hello"))
	}
	return serialize(tb, eth(layers.EthernetTypeIPv4), ip4(layers.IPProtocolTCP, src, dst), tc, gopacket.Payload("hello"))
}

// keyOf is the flow key the parser should produce for simple IPv4/IPv6
// TCP/UDP packets from macA to macB on portIn.
func exactKeyUDP4(src, dst string, sport, dport uint16) flow.Key {
	k := flow.Key{InPort: portIn, EthSrc: macA, EthDst: macB, EthType: 0x0800, NwProto: 17, NwTTL: 64, TpSrc: sport, TpDst: dport}
	k.SetIPSrc(netip.MustParseAddr(src))
	k.SetIPDst(netip.MustParseAddr(dst))
	return k
}

// checksumsOK decodes pkt with gopacket and verifies the IPv4 header and
// L4 checksums by recomputing them.
func checksumsOK(tb testing.TB, pkt []byte) {
	tb.Helper()
	p := gopacket.NewPacket(pkt, layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		tb.Fatalf("packet does not decode: %v", el.Error())
	}
	var layersOut []gopacket.SerializableLayer
	for _, l := range p.Layers() {
		if sl, ok := l.(gopacket.SerializableLayer); ok {
			layersOut = append(layersOut, sl)
		}
	}
	again := serialize(tb, layersOut...)
	// gopacket pads frames to 60 bytes; the kernel does not.
	if len(again) > len(pkt) && bytes.Count(again[len(pkt):], []byte{0}) == len(again)-len(pkt) {
		again = again[:len(pkt)]
	}
	// The kernel keeps a frame's padding when a push makes it longer.
	if len(pkt) > len(again) && bytes.Count(pkt[len(again):], []byte{0}) == len(pkt)-len(again) {
		pkt = pkt[:len(again)]
	}
	if !bytes.Equal(again, pkt) {
		tb.Fatalf("checksums wrong:\n got %x\nwant %x", pkt, again)
	}
}

// pinCPU keeps every BPF_PROG_RUN of d (they all run on its namespace
// thread) on one CPU for the rest of the test: per-CPU state such as the
// exact-match cache is then the same from one run to the next, however
// busy the machine is (the scheduler moved the thread between runs, and
// an EMC hit became a megaflow hit).
func (d *testDP) pinCPU(t testing.TB) {
	t.Helper()
	var one, all unix.CPUSet
	one.Set(0)
	if err := d.inNetns(func() error {
		if err := unix.SchedGetaffinity(0, &all); err != nil {
			return err
		}
		return unix.SchedSetaffinity(0, &one)
	}); err != nil {
		t.Fatalf("pinning the namespace thread: %v", err)
	}
	t.Cleanup(func() { _ = d.inNetns(func() error { return unix.SchedSetaffinity(0, &all) }) })
}
