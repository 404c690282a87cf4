package pktgen

import "time"

// Clock is the time source of a Pacer: real time in the generator, a fake
// one in tests.
type Clock interface {
	// Now is the time since an arbitrary fixed origin.
	Now() time.Duration
	// Sleep blocks for about d (it may oversleep; the pacer catches up).
	Sleep(d time.Duration)
}

type realClock struct{ origin time.Time }

func (c realClock) Now() time.Duration    { return time.Since(c.origin) }
func (c realClock) Sleep(d time.Duration) { time.Sleep(d) }

// RealClock returns the wall clock (monotonic).
func RealClock() Clock { return realClock{time.Now()} }

// Pacer spreads packets evenly at Rate packets per second: by time t after
// Start, Rate·t packets are due. A small lag (a coarse timer) is made up in
// batches of at most MaxBatch. A longer one (the sender was descheduled for
// more than MaxLag) is not: the schedule restarts from now, so the switch
// never sees the backlog as one burst (a burst of a few hundred frames
// overflows Open vSwitch's socket queue and would be counted against it).
// The offered rate is then below Rate; the sender reports the real one and
// Pacer counts the restarts in Stalls. Rate 0 means as fast as possible:
// every call releases MaxBatch.
type Pacer struct {
	Rate     float64
	MaxBatch int
	// MaxLag is the most the pacer catches up (default: 2 ms, or MaxBatch
	// packets' time if longer).
	MaxLag time.Duration
	// Stalls counts schedule restarts after lags beyond MaxLag.
	Stalls   int
	clock    Clock
	start    time.Duration
	released int64
}

// NewPacer starts a pacer at the clock's current time.
func NewPacer(c Clock, rate float64, maxBatch int) *Pacer {
	if maxBatch < 1 {
		maxBatch = 1
	}
	p := &Pacer{Rate: rate, MaxBatch: maxBatch, clock: c, start: c.Now(), MaxLag: 2 * time.Millisecond}
	if rate > 0 {
		p.MaxLag = max(p.MaxLag, time.Duration(float64(maxBatch)/rate*float64(time.Second)))
	}
	return p
}

// Next blocks until at least one packet is due and returns how many may be
// sent now: between 1 and min(MaxBatch, remaining). remaining must be > 0.
func (p *Pacer) Next(remaining int) int {
	limit := min(p.MaxBatch, remaining)
	if p.Rate <= 0 {
		p.released += int64(limit)
		return limit
	}
	for {
		elapsed := p.clock.Now() - p.start
		due := int64(elapsed.Seconds()*p.Rate) - p.released
		if lag := time.Duration(float64(due) / p.Rate * float64(time.Second)); lag > p.MaxLag {
			// Restart the schedule so that exactly one packet is due now.
			p.Stalls++
			p.start += lag - time.Duration(float64(time.Second)/p.Rate)
			continue
		}
		if due > 0 {
			n := int(min(due, int64(limit)))
			p.released += int64(n)
			return n
		}
		// Time at which packet number released+1 is due.
		at := time.Duration(float64(p.released+1) / p.Rate * float64(time.Second))
		p.clock.Sleep(max(at-elapsed, time.Microsecond))
	}
}
