package datapath

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/flow"
)

// TestCTDNATOnVeth: a real TCP connection from pod A to a virtual address
// that the fast path's ct(nat(dst)) sends to pod B, and B's replies
// translated back, over veths with the kernel's offloads on (GSO packets,
// CHECKSUM_PARTIAL from the sender): every rewrite must leave checksums a
// device will complete correctly, or the stream stalls.
func TestCTDNATOnVeth(t *testing.T) {
	_, a, b, d := podPair(t)
	vip := "10.96.0.10"
	var bmac string
	b.In(t, func() {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		bmac = ifc.HardwareAddr.String()
	})
	// A reaches the virtual address on its link, at B's MAC: the switch
	// does not answer ARP for it in this test.
	a.IP(t, "route", "add", vip+"/32", "dev", "eth0")
	a.IP(t, "neigh", "add", vip, "lladdr", bmac, "dev", "eth0")
	// Offloads on (veth's default; said again so the test means it).
	_ = a.Sh(t, "ethtool", "-K", "eth0", "tso", "on", "gso", "on", "tx", "on")
	_ = b.Sh(t, "ethtool", "-K", "eth0", "tso", "on", "gso", "on", "tx", "on")

	nat := &flow.NAT{Kind: flow.NATDst, AddrMin: netip.MustParseAddr("10.1.0.2"), PortMin: 7001}
	arp := flow.Mask{InPort: 0xffffffff, EthType: 0xffff, RecircID: 0xffffffff}
	ip := arp
	for _, f := range []flow.Flow{
		{Key: flow.Key{InPort: 1, EthType: 0x0806}, Mask: arp, Actions: []flow.Action{flow.Output{Port: 2}}},
		{Key: flow.Key{InPort: 2, EthType: 0x0806}, Mask: arp, Actions: []flow.Action{flow.Output{Port: 1}}},
		{Key: flow.Key{InPort: 1, EthType: 0x0800}, Mask: ip, Actions: []flow.Action{flow.CT{Zone: 3, Flags: flow.CTCommit, NAT: nat}, flow.Recirc{ID: 1}}},
		{Key: flow.Key{InPort: 2, EthType: 0x0800}, Mask: ip, Actions: []flow.Action{flow.CT{Zone: 3, NAT: &flow.NAT{}}, flow.Recirc{ID: 2}}},
		{Key: flow.Key{InPort: 1, EthType: 0x0800, RecircID: 1}, Mask: ip, Actions: []flow.Action{flow.Output{Port: 2}}},
		{Key: flow.Key{InPort: 2, EthType: 0x0800, RecircID: 2}, Mask: ip, Actions: []flow.Action{flow.Output{Port: 1}}},
	} {
		if err := d.Put(f); err != nil {
			t.Fatal(err)
		}
	}

	var l net.Listener
	var err error
	b.In(t, func() { l, err = net.Listen("tcp4", "10.1.0.2:7001") })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		sum    [32]byte
		remote string
	}
	got := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(got)
			return
		}
		defer c.Close()
		h := sha256.New()
		_, _ = io.Copy(h, c)
		got <- result{[32]byte(h.Sum(nil)), c.RemoteAddr().String()}
	}()
	var c net.Conn
	a.In(t, func() { c, err = net.DialTimeout("tcp4", vip+":80", 5*time.Second) })
	if err != nil {
		t.Fatalf("connect to the virtual address: %v; drops %v", err, mustDrops(t, d))
	}
	data := bytes.Repeat([]byte("nagare conntrack "), (16<<20)/17)
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	if cs, _ := d.Conntrack(); len(cs) != 1 || !cs[0].DNAT || cs[0].TCPState != "ESTABLISHED" || cs[0].Orig.Dst != netip.MustParseAddr(vip) {
		t.Fatalf("conntrack during the transfer: %v", cs)
	}
	c.Close()
	select {
	case r, ok := <-got:
		if !ok || r.sum != sha256.Sum256(data) {
			t.Fatalf("TCP stream through DNAT arrived damaged or not at all; drops %v", mustDrops(t, d))
		}
		if !strings.HasPrefix(r.remote, "10.1.0.1:") {
			t.Fatalf("B saw the connection from %s", r.remote)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("TCP transfer through DNAT timed out; drops %v", mustDrops(t, d))
	}
	// Both sides closed: FIN both ways.
	deadline := time.Now().Add(3 * time.Second)
	for {
		cs, _ := d.Conntrack()
		if len(cs) == 1 && cs[0].TCPState == "TIME_WAIT" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after close: %v", cs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustDrops(t *testing.T, d *Datapath) map[DropReason]uint64 {
	m, err := d.Drops()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
