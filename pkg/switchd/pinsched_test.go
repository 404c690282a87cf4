package switchd

import (
	"testing"
	"time"
)

// offer runs the scheduler on a fake clock for d: each port offers its
// rate of PACKET_INs (evenly spaced, all ports interleaved by time) and
// the PACKET_INs it was allowed are returned by port.
func offer(s *pinSched, start time.Time, d time.Duration, rates map[uint32]float64) map[uint32]int {
	got := map[uint32]int{}
	next := map[uint32]time.Time{}
	for p := range rates {
		next[p] = start
	}
	end := start.Add(d)
	for {
		var port uint32
		var at time.Time
		for p, t := range next {
			if at.IsZero() || t.Before(at) || (t.Equal(at) && p < port) {
				port, at = p, t
			}
		}
		if !at.Before(end) {
			return got
		}
		if s.take(port, at) {
			got[port]++
		}
		next[port] = at.Add(time.Duration(float64(time.Second) / rates[port]))
	}
}

// One port whose packets all go to the controller cannot take another
// port's share of the connection's PACKET_INs: the light port gets every
// one, the heavy port what is left, and the two together stay within the
// connection's rate and burst.
func TestPinSchedHeavyAndLightPort(t *testing.T) {
	const rate, burst = 1000, 250
	s := newPinSched(rate, burst)
	start := time.Unix(1000, 0)
	d := 3 * time.Second
	got := offer(s, start, d, map[uint32]float64{1: 10 * rate, 2: rate / 10})
	if want := int(d.Seconds() * rate / 10); got[2] < want {
		t.Errorf("light port (%d/s, its share %d/s): %d of %d PACKET_INs", rate/10, rate/3, got[2], want)
	}
	total := got[1] + got[2]
	t.Logf("in %v: heavy port %d, light port %d PACKET_INs", d, got[1], got[2])
	if max := burst + int(d.Seconds()*rate); total > max {
		t.Errorf("%d PACKET_INs in %v: more than burst + rate = %d", total, d, max)
	}
	// The heavy port gets what the light one leaves: the rate, less the
	// light port's use and what the shares keep in reserve.
	if min := int(d.Seconds()*rate*0.9) - got[2]; got[1] < min {
		t.Errorf("heavy port got %d, want at least %d (what the light port left)", got[1], min)
	}
}

// A port alone gets the connection's whole rate: the shares of ports that
// are not sending are lent, not lost.
func TestPinSchedPortAloneGetsTheRate(t *testing.T) {
	const rate, burst = 1000, 250
	s := newPinSched(rate, burst)
	start := time.Unix(1000, 0)
	// Another port was busy a moment ago, then stops.
	offer(s, start, 100*time.Millisecond, map[uint32]float64{1: 5 * rate, 2: 5 * rate})
	start = start.Add(100 * time.Millisecond)
	d := pinPortIdle + 500*time.Millisecond
	got := offer(s, start, d, map[uint32]float64{1: 5 * rate})
	if min := int(d.Seconds()*rate) - burst; got[1] < min {
		t.Fatalf("port alone: %d PACKET_INs in %v at %d/s, want at least %d", got[1], d, rate, min)
	}
	if max := burst + int(d.Seconds()*rate); got[1] > max {
		t.Fatalf("port alone: %d PACKET_INs in %v, more than %d", got[1], d, max)
	}
	// The idle port's share is given back.
	if n := s.ports(); n != 1 {
		t.Fatalf("%d ports with a share after the other went idle, want 1", n)
	}
}

// Two heavy ports and a light one: the light one gets all its PACKET_INs
// and each heavy one at least its share; the connection's limit holds.
func TestPinSchedTwoHeavyPorts(t *testing.T) {
	const rate, burst = 900, 90
	s := newPinSched(rate, burst)
	start := time.Unix(1000, 0)
	d := 2 * time.Second
	got := offer(s, start, d, map[uint32]float64{1: 20 * rate, 2: 2 * rate, 3: 50})
	if got[3] < int(50*d.Seconds()) {
		t.Errorf("light port: %d of %d", got[3], int(50*d.Seconds()))
	}
	t.Logf("in %v: heavy ports %d and %d, light port %d PACKET_INs", d, got[1], got[2], got[3])
	share := int(d.Seconds() * rate / 4) // three ports and the newcomers' share
	for _, p := range []uint32{1, 2} {
		if got[p] < share {
			t.Errorf("heavy port %d: %d, less than its share %d", p, got[p], share)
		}
	}
	if total, max := got[1]+got[2]+got[3], burst+int(d.Seconds()*rate); total > max {
		t.Errorf("%d PACKET_INs, more than %d", total, max)
	}
}

// The number of ports with a share of their own is bounded: a sender from
// many ports (a tunnel with many endpoints) does not grow the scheduler.
func TestPinSchedBoundedPorts(t *testing.T) {
	s := newPinSched(1000, 250)
	now := time.Unix(1000, 0)
	for p := range uint32(10 * pinMaxPorts) {
		s.take(p, now)
		now = now.Add(time.Microsecond)
	}
	if n := s.ports(); n != pinMaxPorts {
		t.Fatalf("%d ports tracked, want %d", n, pinMaxPorts)
	}
	// No limit: everything passes, nothing is tracked.
	s = newPinSched(0, 0)
	for p := range uint32(100) {
		if !s.take(p, now) {
			t.Fatal("refused without a limit")
		}
	}
	if n := s.ports(); n != 0 {
		t.Fatalf("%d ports tracked without a limit", n)
	}
}

// A controller that reads slowly frees send-queue slots one at a time; a
// flooding port must not take them all: past its share of the slots it
// borrows only what the other ports leave unused, so a light port's
// PACKET_INs are queued while the heavy one is refused. Without a rate
// limit too (the slots are shared by the ports that hold some).
func TestPinSchedQueueSlots(t *testing.T) {
	for _, rate := range []int{0, 1000} {
		s := newPinSched(rate, 250)
		now := time.Unix(1000, 0)
		s.take(1, now) // with a rate limit, both ports hold a share
		s.take(2, now)
		queued := 0
		heavy := 0
		for s.reserve(1, queued) {
			queued++
			heavy++
		}
		if heavy >= packetInQueue-packetInQueue/4 || heavy < packetInQueue/4 {
			t.Fatalf("rate %d: a port alone queued %d of %d slots", rate, heavy, packetInQueue)
		}
		// The light port gets slots while the heavy one stays refused.
		for i := range 10 {
			if !s.reserve(2, queued) {
				t.Fatalf("rate %d: light port refused its slot %d (heavy holds %d)", rate, i, heavy)
			}
			queued++
			if s.reserve(1, queued) {
				t.Fatalf("rate %d: heavy port got another slot past %d", rate, heavy)
			}
		}
		// The controller reads some: the heavy port gets slots back, and
		// the hard cap holds whatever the shares say.
		for range 25 {
			s.release(1)
			queued--
		}
		if !s.reserve(1, queued) {
			t.Fatalf("rate %d: heavy port refused after the controller read", rate)
		}
		queued++
		if s.reserve(3, packetInQueue) {
			t.Fatalf("rate %d: a PACKET_IN queued behind %d messages", rate, packetInQueue)
		}
		for p, n := range map[uint32]int{1: heavy - 25 + 1, 2: 10} {
			for range n {
				s.release(p)
			}
		}
		if len(s.queued) != 0 {
			t.Fatalf("rate %d: slots left after every release: %v", rate, s.queued)
		}
	}
}
