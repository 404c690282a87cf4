package switchd

import (
	"testing"
	"time"
)

// The pacer, on a fake clock with a fake fast path: a port whose
// controller-action upcalls are mostly refused is limited to what the
// controllers take; when they take everything again the limit doubles
// until it is lifted; a port that stops, or a new connection, lifts it.
func TestActionPacer(t *testing.T) {
	limits := map[uint32]uint32{}
	a := newUpcallPacer(2000, func(port, rate, burst uint32) error {
		if rate == 0 {
			delete(limits, port)
		} else {
			limits[port] = rate
		}
		return nil
	})
	now := time.Unix(1000, 0)
	// 2000 action upcalls a second, of which the controllers take 100.
	step := func(d time.Duration, perSec, taken int) {
		n := int(d.Seconds() * float64(perSec))
		for i := range n {
			a.record(1, (i+1)*taken/perSec > i*taken/perSec, now) // taken of every perSec
			now = now.Add(time.Second / time.Duration(perSec))
		}
	}
	step(time.Second, 2000, 100)
	if l := limits[1]; l < 100 || l > 150 {
		t.Fatalf("controllers take 100/s of 2000: fast-path limit %d/s, want 100-150", l)
	}
	// At the limit, still some refused: it stays near what is taken.
	step(time.Second, int(limits[1]), 100)
	if l := limits[1]; l < 100 || l > 150 {
		t.Fatalf("limit %d/s after a second at it", l)
	}
	// The controllers catch up: the limit doubles each window until it
	// reaches the port's budget and is lifted.
	for range 10 {
		if limits[1] == 0 {
			break
		}
		l := int(limits[1])
		step(paceWindow, l, l)
	}
	if l, ok := limits[1]; ok {
		t.Fatalf("controllers take everything: still limited to %d/s", l)
	}
	// Refused again, then the port stops: the limit is lifted after paceIdle.
	step(time.Second, 2000, 100)
	if limits[1] == 0 {
		t.Fatal("not limited again")
	}
	a.expire(now.Add(paceIdle/2), false)
	if limits[1] == 0 {
		t.Fatal("lifted before the port was idle for long")
	}
	a.expire(now.Add(paceIdle+paceWindow), false)
	if _, ok := limits[1]; ok || len(a.ports) != 0 {
		t.Fatalf("idle port: limit %v, %d ports tracked", limits, len(a.ports))
	}
	// A new connection lifts every limit at once.
	step(time.Second, 2000, 100)
	a.expire(now, true)
	if len(limits) != 0 {
		t.Fatalf("after a new connection: %v", limits)
	}
	// No connection takes anything (no controller): the least rate.
	step(time.Second, 2000, 2000)
	for range 2 * int(time.Second/paceWindow) {
		a.record(1, false, now)
		now = now.Add(paceWindow / 2)
	}
	if l := limits[1]; l != paceMin {
		t.Fatalf("nothing taken: limit %d/s, want %d", l, paceMin)
	}
}
