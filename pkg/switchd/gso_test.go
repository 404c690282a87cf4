package switchd

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nagare-net/nagare/internal/nstest"
)

// retransSegs reads TCP's RetransSegs of namespace ns.
func retransSegs(t *testing.T, ns nstest.NS) int {
	t.Helper()
	return nstest.SNMP(t, ns, "Tcp", "RetransSegs")
}

// TestGSOFirstPacketDelivered: a pod with TSO (veths have it) hands its
// veth super-packets of many segments. When such a packet is the first of
// a flow (here: the cache was flushed mid-connection), the slow path gets
// all of it and delivers it cut into segments; before, it installed the
// flow and dropped the packet, and TCP had to retransmit after its timeout.
func TestGSOFirstPacketDelivered(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=5,in_port=1,actions=output:2")
	ts.ofctl("add-flow", "priority=5,in_port=2,actions=output:1")
	var ln net.Listener
	var err error
	ts.Pods[1].In(t, func() { ln, err = net.Listen("tcp4", net.JoinHostPort(podIP(2), "9000")) })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	var c net.Conn
	ts.Pods[0].In(t, func() { c, err = net.Dial("tcp4", net.JoinHostPort(podIP(2), "9000")) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the ACK of "hello" come back: nothing in flight
	if r := ts.control(CtlRequest{Cmd: "flush-cache"}); !r.OK {
		t.Fatal(r.Error)
	}
	before := retransSegs(t, ts.Pods[0])
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB in one write: TSO super-packets
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case b := <-got:
		if !bytes.Equal(b, append([]byte("hello"), data...)) {
			t.Fatalf("received %d bytes, want %d", len(b), 5+len(data))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the data did not arrive")
	}
	if n := retransSegs(t, ts.Pods[0]) - before; n != 0 {
		t.Fatalf("the sender retransmitted %d segments: a first packet was lost", n)
	}
	if n := ts.stats.truncated.Load(); n != 0 {
		t.Fatalf("%d first packets were too big to deliver", n)
	}
	if seg := ts.stats.segmented.Load(); seg == 0 {
		t.Fatal("no first packet was a GSO packet: the test did not test anything (TSO off?)")
	}
}
