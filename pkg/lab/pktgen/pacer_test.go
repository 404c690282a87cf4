package pktgen

import (
	"testing"
	"time"
)

// fakeClock advances only when the pacer sleeps, by the requested time
// plus a fixed oversleep (a coarse real timer).
type fakeClock struct {
	now, oversleep time.Duration
	sleeps         int
}

func (c *fakeClock) Now() time.Duration { return c.now }
func (c *fakeClock) Sleep(d time.Duration) {
	c.sleeps++
	c.now += d + c.oversleep
}

func TestPacerRate(t *testing.T) {
	for _, tc := range []struct {
		rate      float64
		oversleep time.Duration
		batch     int
	}{
		{1000, 0, 32},
		{50_000, 0, 32},
		{50_000, 80 * time.Microsecond, 32}, // timer far coarser than the 20 µs gap
		{200_000, time.Millisecond, 16},
	} {
		c := &fakeClock{now: 5 * time.Second, oversleep: tc.oversleep}
		p := NewPacer(c, tc.rate, tc.batch)
		const total = 20_000
		sent := 0
		for sent < total {
			n := p.Next(total - sent)
			if n < 1 || n > tc.batch || n > total-sent {
				t.Fatalf("rate %v: Next released %d (batch %d, %d left)", tc.rate, n, tc.batch, total-sent)
			}
			sent += n
			// Never ahead of schedule: by now at most rate·elapsed are out.
			if ahead := float64(sent) - (c.now-5*time.Second).Seconds()*tc.rate; ahead > 1e-6 {
				t.Fatalf("rate %v: %d sent at %v, %.1f ahead of schedule", tc.rate, sent, c.now-5*time.Second, ahead)
			}
		}
		elapsed := (c.now - 5*time.Second).Seconds()
		want := total / tc.rate
		// Done within one batch (plus one oversleep) of the ideal time.
		slack := float64(tc.batch)/tc.rate + tc.oversleep.Seconds() + 1e-6
		if elapsed < want-1/tc.rate || elapsed > want+slack {
			t.Errorf("rate %v oversleep %v: %d packets took %.6f s, want %.6f s (+%.6f)", tc.rate, tc.oversleep, total, elapsed, want, slack)
		}
	}
}

func TestPacerFlatOut(t *testing.T) {
	c := &fakeClock{}
	p := NewPacer(c, 0, 64)
	if n := p.Next(1000); n != 64 {
		t.Errorf("flat out released %d, want a full batch of 64", n)
	}
	if n := p.Next(10); n != 10 {
		t.Errorf("flat out released %d of the last 10", n)
	}
	if c.sleeps != 0 {
		t.Errorf("flat out slept %d times", c.sleeps)
	}
}

// After a long stall the backlog is dropped, not sent as a burst: the
// schedule restarts and the pacer goes on at the rate.
func TestPacerStallRestartsSchedule(t *testing.T) {
	c := &fakeClock{}
	p := NewPacer(c, 100_000, 32)
	for i := 0; i < 10; i++ {
		p.Next(1 << 20)
	}
	c.now += 100 * time.Millisecond // 10 000 packets overdue
	if n := p.Next(1 << 20); n != 1 {
		t.Fatalf("after a 100 ms stall released %d at once, want 1", n)
	}
	if p.Stalls != 1 {
		t.Errorf("Stalls %d, want 1", p.Stalls)
	}
	// From here on the rate holds: 1 000 more packets take 10 ms.
	t0 := c.now
	for sent := 0; sent < 1000; {
		n := p.Next(1000 - sent)
		if n > 32 {
			t.Fatalf("burst of %d", n)
		}
		sent += n
	}
	if d := c.now - t0; d < 9900*time.Microsecond || d > 10100*time.Microsecond {
		t.Errorf("1 000 packets after the stall took %v, want 10 ms", d)
	}
	// A lag within MaxLag (1 ms here) is made up, not dropped.
	c.now += time.Millisecond
	if n := p.Next(1 << 20); n != 32 {
		t.Errorf("after a 1 ms lag released %d, want a full batch", n)
	}
	if p.Stalls != 1 {
		t.Errorf("a 1 ms lag restarted the schedule")
	}
}
