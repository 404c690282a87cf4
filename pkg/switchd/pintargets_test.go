package switchd

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/openflow"
)

// TestPacketInQueueFullKeepsToken: a PACKET_IN the send queue refuses
// (a controller that reads slowly) does not spend a rate token: once the
// queue drains, the next PACKET_IN goes out within the same second.
// Before: the token was taken first, so a full queue ate the budget and
// the controller got nothing until the bucket refilled.
func TestPacketInQueueFullKeepsToken(t *testing.T) {
	c := &ofConn{role: openflow.RoleEqual, async: defaultAsync(), txq: make(chan txItem, connQueue),
		pins: newPinSched(1, 1)} // one PACKET_IN per second, burst 1
	s := &Switch{conns: map[*ofConn]struct{}{c: {}}}
	for i := 0; i < packetInQueue; i++ {
		c.txq <- txItem{}
	}
	if got := s.packetInTargets(openflow.PacketInReasonAction, 5); len(got) != 0 {
		t.Fatalf("queued on a full queue: %d", len(got))
	}
	if n := c.drops.packetInQueue.Load(); n != 1 {
		t.Errorf("queue-full drops %d, want 1", n)
	}
	for len(c.txq) > 0 {
		<-c.txq
	}
	got := s.packetInTargets(openflow.PacketInReasonAction, 5)
	if len(got) != 1 {
		t.Fatalf("after the queue drained: %d targets (rate-limit drops %d), want the connection", len(got), c.drops.packetInRate.Load())
	}
	c.pins.release(5)
}
