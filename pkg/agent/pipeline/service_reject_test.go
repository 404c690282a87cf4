package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// synFrame is a TCP SYN from pod db (10.77.1.3:40000) to 10.96.0.20:443, as the reject flow sends it up.
func synFrame() []byte {
	f := make([]byte, 14+20+20)
	copy(f[0:6], gatewayMAC[:])
	copy(f[6:12], dbMAC[:])
	binary.BigEndian.PutUint16(f[12:], etherIPv4)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], 40)
	copy(ip[12:], []byte{10, 77, 1, 3})
	copy(ip[16:], []byte{10, 96, 0, 20})
	binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip[:20]))
	binary.BigEndian.PutUint16(ip[20:], 40000)
	binary.BigEndian.PutUint16(ip[22:], 443)
	ip[33] = 0x02 // SYN
	return f
}

// TestRejectReply: the answer is an ICMP port unreachable from the
// ClusterIP to the client, with valid checksums, quoting the SYN's IP
// header and ports (what the client's kernel matches to its socket).
func TestRejectReply(t *testing.T) {
	in := synFrame()
	out, err := rejectReply(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[0:6], dbMAC[:]) || !bytes.Equal(out[6:12], gatewayMAC[:]) {
		t.Errorf("MACs %x → %x", out[6:12], out[0:6])
	}
	ip := out[14:34]
	if ip[9] != 1 || !bytes.Equal(ip[12:16], []byte{10, 96, 0, 20}) || !bytes.Equal(ip[16:20], []byte{10, 77, 1, 3}) {
		t.Errorf("IP header % x", ip)
	}
	if inetChecksum(ip) != 0 || inetChecksum(out[34:]) != 0 {
		t.Errorf("checksums: IP %#x ICMP %#x, want both to verify", inetChecksum(ip), inetChecksum(out[34:]))
	}
	icmp := out[34:]
	if icmp[0] != 3 || icmp[1] != 3 || !bytes.Equal(icmp[8:], in[14:14+28]) {
		t.Errorf("ICMP % x", icmp)
	}
	if int(binary.BigEndian.Uint16(ip[2:])) != len(out)-14 {
		t.Errorf("IP total length %d, frame %d", binary.BigEndian.Uint16(ip[2:]), len(out))
	}
	for _, bad := range [][]byte{in[:30], append(append([]byte{}, in[:23]...), 1)} {
		if _, err := rejectReply(bad); err == nil {
			t.Errorf("% x: answered", bad)
		}
	}
}

// TestRejecterPerPortLimit: a port that floods rejects is cut at its
// budget; another port's first reject is still answered; PACKET_INs of
// other flows are ignored.
func TestRejecterPerPortLimit(t *testing.T) {
	var r Rejecter
	pin := func(port uint32) *openflow.PacketIn {
		return &openflow.PacketIn{TableID: TableServiceLB.ID, Cookie: cookieService | 42,
			Match: match(inPort(port)), Data: synFrame()}
	}
	now := time.Now()
	answered := 0
	for i := 0; i < 1000; i++ {
		if po := r.answer(pin(6), now); po != nil {
			answered++
			if a, ok := po.Actions[0].(openflow.ActionOutput); !ok || a.Port != 6 || po.InPort != openflow.PortController {
				t.Fatalf("packet out %+v", po)
			}
		}
	}
	if answered != rejectBurst || r.Limited.Load() != uint64(1000-rejectBurst) {
		t.Fatalf("flooding port: %d answered, %d limited; want the burst %d", answered, r.Limited.Load(), rejectBurst)
	}
	if r.answer(pin(5), now) == nil {
		t.Fatal("another port's reject was not answered while port 6 flooded")
	}
	if r.answer(pin(6), now.Add(time.Second)) == nil {
		t.Fatal("port 6 not answered again a second later")
	}
	other := pin(5)
	other.Cookie = cookiePod | 42
	if r.answer(other, now.Add(time.Second)) != nil || r.Ignored.Load() != 1 {
		t.Fatal("a PACKET_IN of another flow was answered")
	}
}

// TestRejecterServesConn: a reject PACKET_IN on the agent's OpenFlow
// connection is answered with a PACKET_OUT of the ICMP error to its port.
func TestRejecterServesConn(t *testing.T) {
	p, sw := serviceNode(t)
	sw.packetOuts = make(chan *openflow.PacketOut, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var r Rejecter
	go r.Serve(ctx, p.conn)
	if err := sw.packetIn(&openflow.PacketIn{BufferID: openflow.NoBuffer, TableID: TableServiceLB.ID, Cookie: cookieService | 7,
		Match: match(inPort(6)), Data: synFrame()}); err != nil {
		t.Fatal(err)
	}
	select {
	case po := <-sw.packetOuts:
		want, _ := rejectReply(synFrame())
		if a, ok := po.Actions[0].(openflow.ActionOutput); !ok || a.Port != 6 || !bytes.Equal(po.Data, want) {
			t.Fatalf("packet out %+v", po)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no PACKET_OUT for the reject")
	}
}
