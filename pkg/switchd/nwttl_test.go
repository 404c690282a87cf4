package switchd

import (
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSetNWTTLOnTheWire: a flow added with ovs-ofctl's set_nw_ttl:5 is
// accepted, dumped back, and delivers datagrams with TTL 5, the first
// packet (slow path) as the later ones (fast path).
func TestSetNWTTLOnTheWire(t *testing.T) {
	ts := startSwitch(t, 2, nil)
	ts.ofctl("add-flow", "priority=10,in_port=1,ip,actions=set_nw_ttl:5,output:2")
	ts.ofctl("add-flow", "priority=5,in_port=1,actions=output:2")
	ts.ofctl("add-flow", "priority=5,in_port=2,actions=output:1")
	if out := ts.ofctl("dump-flows"); !strings.Contains(out, "mod_nw_ttl:5") {
		t.Fatalf("dump-flows lacks mod_nw_ttl:5:\n%s", out)
	}
	var conn *net.UDPConn
	var err error
	ts.Pods[1].In(t, func() {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(podIP(2)), Port: 9998})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTTL, 1) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	for i := 0; i < 3; i++ {
		ts.udpFrom(1, 2, 9998, []byte("ttl"))
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, oob := make([]byte, 64), make([]byte, 128)
		_, oobn, _, _, err := conn.ReadMsgUDP(b, oob)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		ttl := -1
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL && len(m.Data) > 0 {
				ttl = int(m.Data[0])
			}
		}
		if ttl != 5 {
			t.Fatalf("datagram %d arrived with TTL %d, want 5", i, ttl)
		}
	}
}
