package switchd

import (
	"fmt"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// udpUpcalls makes n miss upcalls of distinct UDP flows from port 1.
func udpUpcalls(tb testing.TB, n, first int) []datapath.Upcall {
	ups := make([]datapath.Upcall, n)
	for i := range ups {
		eth := &layers.Ethernet{SrcMAC: mustMAC(podMAC(1)), DstMAC: mustMAC(podMAC(2)), EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: []byte{10, 8, 0, 1}, DstIP: []byte{10, 8, 0, 2}}
		j := first + i
		udp := &layers.UDP{SrcPort: layers.UDPPort(1024 + j%60000), DstPort: layers.UDPPort(1 + j/60000)}
		_ = udp.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload("0123456789"))
		pkt := buf.Bytes()
		k, err := flow.ParsePacket(pkt)
		if err != nil {
			tb.Fatal(err)
		}
		k.InPort = 1
		ups[i] = datapath.Upcall{Reason: datapath.UpcallMiss, Key: k, Len: len(pkt), Packet: pkt}
	}
	return ups
}

// idleSwitch makes a switch that is not running (no upcall loop, no
// revalidator: tests call them) with ports 1 and 2 on a fresh topology.
func idleSwitch(tb testing.TB, mod func(*Config)) *Switch {
	tb.Helper()
	node, _ := newTopo(tb, 2)
	cfg := Config{Bridge: "br0", RunDir: tb.TempDir(), NetNS: node.Path, PinRoot: testPinRoot, IdleTimeout: time.Hour}
	if mod != nil {
		mod(&cfg)
	}
	sw, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sw.Destroy() })
	for i := 1; i <= 2; i++ {
		if _, err := sw.AddPort(PortSpec{Name: fmt.Sprintf("v%d", i), OFPort: uint32(i)}); err != nil {
			tb.Fatal(err)
		}
	}
	return sw
}

// addFlow adds an OpenFlow rule to sw's tables.
func addFlow(tb testing.TB, sw *Switch, spec string) {
	tb.Helper()
	fm, err := openflow.ParseFlow(spec)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := sw.pl.FlowMod(fm); err != nil {
		tb.Fatal(err)
	}
}

// handleUpcalls hands ups to sw's upcall handler in batches of upcallBatch,
// the way the upcall loop does when it falls behind: on a thread of its
// own in the ports' namespace (discarded afterwards).
func handleUpcalls(tb testing.TB, sw *Switch, ups []datapath.Upcall) {
	handleUpcallsIn(tb, sw, ups, upcallBatch)
}

// handleUpcallsIn is handleUpcalls in batches of batch upcalls.
func handleUpcallsIn(tb testing.TB, sw *Switch, ups []datapath.Upcall, batch int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		restore, err := sw.dp.LockToNetns()
		if err != nil {
			tb.Error(err)
			return
		}
		defer restore()
		eb, err := sw.dp.NewExecBatch()
		if err != nil {
			tb.Error(err)
			return
		}
		defer eb.Close()
		h := newUpcallHandler(sw, eb)
		for i := 0; i < len(ups); i += batch {
			h.handle(ups[i:min(i+batch, len(ups))])
		}
	}()
	<-done
}

// handlerSwitch is an idleSwitch with the rule in_port=1 → output:2, and a
// function that hands it upcalls (handleUpcalls).
func handlerSwitch(t *testing.T, mod func(*Config)) (*Switch, func([]datapath.Upcall)) {
	t.Helper()
	sw := idleSwitch(t, mod)
	addFlow(t, sw, "priority=100,in_port=1,actions=output:2")
	return sw, func(ups []datapath.Upcall) { handleUpcalls(t, sw, ups) }
}

// TestFlowLimitInBatches: a batch installs flows only up to the flow limit
// (counting the ones installed earlier in the batch), delivers every
// packet all the same, and counts the flows it did not install.
func TestFlowLimitInBatches(t *testing.T) {
	sw, handle := handlerSwitch(t, func(c *Config) { c.FlowLimit, c.PortFlowLimit, c.DisableMegaflows = 10, -1, true })
	handle(udpUpcalls(t, 64, 0))
	handle(udpUpcalls(t, 5, 64))
	st := &sw.stats
	if n := sw.cache.len(); n != 10 || st.installed.Load() != 10 || st.limited.Load() != 59 {
		t.Fatalf("cached %d, installed %d, limited %d; want 10, 10, 59", n, st.installed.Load(), st.limited.Load())
	}
	if st.executed.Load() != 69 || st.execErrs.Load() != 0 {
		t.Fatalf("executed %d (errors %d), want all 69 packets", st.executed.Load(), st.execErrs.Load())
	}
	if fs := sw.dp.Flows(); len(fs) != 10 {
		t.Fatalf("%d flows in the fast path, want 10", len(fs))
	}
}

// TestRepeatedKeysInBatch: misses of one packet key in a batch (a new
// flow's packets that came before its flow was in) are translated once and
// install one flow; every packet is delivered and credited to the rule.
func TestRepeatedKeysInBatch(t *testing.T) {
	sw, handle := handlerSwitch(t, func(c *Config) { c.DisableMegaflows = true })
	u := udpUpcalls(t, 3, 0)
	a, b, c := u[0], u[1], u[2]
	handle([]datapath.Upcall{a, b, a, a, b, c})
	st := &sw.stats
	if st.repeats.Load() != 3 || st.installed.Load() != 3 || st.installErrs.Load() != 0 || sw.cache.len() != 3 {
		t.Fatalf("repeats %d, installed %d (errors %d), cached %d; want 3, 3, 0, 3", st.repeats.Load(), st.installed.Load(), st.installErrs.Load(), sw.cache.len())
	}
	if st.executed.Load() != 6 {
		t.Fatalf("executed %d packets, want 6", st.executed.Load())
	}
	var pkts uint64
	for _, r := range sw.pl.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}) {
		pkts += r.PacketCount
	}
	if pkts != 6 {
		t.Fatalf("rules credited with %d packets, want 6", pkts)
	}
	// A later batch with the same key misses again (its flow is there now,
	// so this is a race the fast path lost): not a repeat of this batch.
	handle([]datapath.Upcall{a})
	if st.repeats.Load() != 3 {
		t.Fatalf("repeats %d after another batch, want 3", st.repeats.Load())
	}
}

// TestRevalidatorDeletes: a round deletes cached flows that stayed idle
// past the idle timeout, and flows whose translation now depends on more
// than their mask covers (a higher-priority rule on the UDP port), fast
// path and ukeys alike.
func TestRevalidatorDeletes(t *testing.T) {
	const idle = 300 * time.Millisecond
	sw, handle := handlerSwitch(t, func(c *Config) { c.DisableMegaflows, c.IdleTimeout = true, idle })
	handle(udpUpcalls(t, 50, 0))
	if n := len(sw.dp.Flows()); n != 50 {
		t.Fatalf("%d flows installed, want 50", n)
	}
	time.Sleep(idle + 50*time.Millisecond) // the flows' packets are older than the idle timeout
	sw.rv.round()
	if st := sw.rv.stats(); st.IdleDeleted != 50 || len(sw.dp.Flows()) != 0 || sw.cache.len() != 0 {
		t.Fatalf("idle round: %+v; %d flows, %d ukeys left", st, len(sw.dp.Flows()), sw.cache.len())
	}

	sw.cfg.DisableMegaflows, sw.cfg.IdleTimeout = false, time.Hour
	handle(udpUpcalls(t, 3, 100)) // one megaflow: the rule reads only in_port
	if n := len(sw.dp.Flows()); n != 1 {
		t.Fatalf("%d megaflows for 3 packets of one rule, want 1", n)
	}
	addFlow(t, sw, "priority=200,udp,tp_dst=9,actions=drop")
	sw.rv.round()
	if st := sw.rv.stats(); st.StaleDeleted != 1 || len(sw.dp.Flows()) != 0 || sw.cache.len() != 0 {
		t.Fatalf("round after the change: %+v; %d flows, %d ukeys left", st, len(sw.dp.Flows()), sw.cache.len())
	}
}
