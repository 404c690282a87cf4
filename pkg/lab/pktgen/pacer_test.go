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

// After a long stall the backlog is released in batches, not at once.
func TestPacerStallReleasesInBatches(t *testing.T) {
	c := &fakeClock{}
	p := NewPacer(c, 100_000, 32)
	c.now += 100 * time.Millisecond // 10 000 packets due
	for i := 0; i < 10_000/32; i++ {
		if n := p.Next(1 << 20); n != 32 {
			t.Fatalf("call %d released %d, want 32", i, n)
		}
	}
	if c.sleeps != 0 {
		t.Errorf("slept %d times while packets were due", c.sleeps)
	}
}
