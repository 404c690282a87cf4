package datapath

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/nagare-net/nagare/internal/nstest"
	"github.com/nagare-net/nagare/pkg/flow"
)

// TestFloodTo250Ports: a flow that outputs to 249 ports (a flood on a
// 250-port bridge) no longer fits 16 actions; its outputs go into an
// output set. Every port must get the frame, on real devices, and a
// restarted process must read the flow back with all its outputs.
func TestFloodTo250Ports(t *testing.T) {
	const ports = 250
	n := nstest.New(t, "flood")
	var batch strings.Builder
	for i := 1; i <= ports; i++ {
		fmt.Fprintf(&batch, "link add v%d type veth peer name p%d\nlink set v%d up\nlink set p%d up\n", i, i, i, i)
	}
	f := filepath.Join(t.TempDir(), "batch")
	if err := os.WriteFile(f, []byte(batch.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := nstest.Sh("ip", "-n", n.Name, "-batch", f); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: n.Name, PinRoot: testPinDir, NetNS: n.Path, MaxFlows: 1024}
	d, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Destroy() })
	for i := 1; i <= ports; i++ {
		if _, err := d.AttachPort(fmt.Sprintf("v%d", i), uint32(i), PortUplink); err != nil {
			t.Fatal(err)
		}
	}
	var outs []flow.Action
	for i := 2; i <= ports; i++ {
		outs = append(outs, flow.Output{Port: uint32(i)})
	}
	fl := flow.Flow{Key: flow.Key{InPort: 1}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: outs}
	if err := d.Put(fl); err != nil {
		t.Fatalf("a flow with %d outputs: %v", len(outs), err)
	}
	rx := make([]int, ports+1)
	for i := 2; i <= ports; i++ {
		rx[i] = nstest.RawSocket(t, n, fmt.Sprintf("p%d", i))
	}
	tx := nstest.RawSocket(t, n, "p1")
	payload := []byte("flooded-to-every-port")
	frame := serialize(t, &layers.Ethernet{SrcMAC: []byte{2, 0, 0, 0, 0, 1}, DstMAC: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthernetType: layers.EthernetTypeIPv4},
		ip4(layers.IPProtocolUDP, "10.1.0.1", "10.1.0.255"), &layers.UDP{SrcPort: 68, DstPort: 67}, gopacket.Payload(payload))
	if _, err := unix.Write(tx, frame); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= ports; i++ {
		nstest.ReadFrame(t, rx[i], payload, 3*time.Second)
	}

	// A restart reads the flow back, its outputs expanded again.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d = d2
	got := d2.Flows()
	if len(got) != 1 || fmt.Sprint(got[0].Actions) != fmt.Sprint(outs) {
		t.Fatalf("after a restart: %d flows, actions %v", len(got), got)
	}
}

// TestOutputSetsAreReused installs and deletes more distinct floods than
// there are output sets: the sweep must free the sets of deleted flows
// and never the set of a flow still installed.
func TestOutputSetsAreReused(t *testing.T) {
	d := newTestDP(t)
	// Ports 100..101 are dummy0 and dummy1 again: a flood's set differs
	// by which of the two each of its 17 outputs goes to.
	d.fakePort(100, "dummy0", PortUplink)
	d.fakePort(101, "dummy1", PortUplink)
	flood := func(pattern int) []flow.Action {
		var outs []flow.Action
		for b := 0; b < 17; b++ {
			outs = append(outs, flow.Output{Port: 100 + uint32(pattern>>b&1)})
		}
		return outs
	}
	live := flow.Flow{Key: flow.Key{InPort: 50000}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: flood(0x1aaaa)}
	d.put(live)
	for i := 1; i <= outputSets+200; i++ {
		f := flow.Flow{Key: flow.Key{InPort: uint32(i)}, Mask: flow.Mask{InPort: 0xffffffff}, Actions: flood(i)}
		if err := d.Put(f); err != nil {
			t.Fatalf("flood %d: %v", i, err)
		}
		if _, err := d.Delete(f.Key, f.Mask); err != nil {
			t.Fatal(err)
		}
	}
	got := d.Flows()
	if len(got) != 1 || fmt.Sprint(got[0].Actions) != fmt.Sprint(live.Actions) {
		t.Fatalf("the live flood after %d others: %v", outputSets+200, got)
	}
	// What the kernel runs for it: its set, as written for it.
	var id uint32
	for in := range d.flows.all() {
		id = in.id
	}
	entry, err := kernelEntry(d.Datapath, id)
	if err != nil {
		t.Fatal(err)
	}
	_, raw, _ := decodeEntry(entry)
	sets := setsOf(raw)
	if len(sets) != 1 {
		t.Fatalf("live flood's actions refer to sets %v", sets)
	}
	set := make([]byte, setSize)
	if err := d.objs.OutputSets.Lookup(sets[0], &set); err != nil {
		t.Fatal(err)
	}
	if n := binary.NativeEndian.Uint32(set); n != 16 {
		t.Fatalf("live flood's set has %d ports, want 16 (and the last output apart)", n)
	}
	for b := 0; b < 16; b++ {
		want := d.ifindex[[]string{"dummy0", "dummy1"}[0x1aaaa>>b&1]]
		if got := binary.NativeEndian.Uint32(set[8+8*b:]); int(got) != want {
			t.Fatalf("live flood's set, port %d: ifindex %d, want %d (overwritten by a later flood)", b, got, want)
		}
	}
}
