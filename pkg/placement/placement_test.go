package placement

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// apply runs one round: Decide, then the moves, as the revalidator does.
func apply(t *testing.T, p Policy, flows []Flow) []Move {
	t.Helper()
	moves := p.Decide(flows)
	seen := map[uint32]bool{}
	for _, m := range moves {
		if seen[m.ID] {
			t.Fatalf("flow %d moved twice in one round: %v", m.ID, moves)
		}
		seen[m.ID] = true
		i := slices.IndexFunc(flows, func(f Flow) bool { return f.ID == m.ID })
		if i < 0 {
			t.Fatalf("move of unknown flow %d", m.ID)
		}
		if flows[i].Offloaded == m.Offload {
			t.Fatalf("move of flow %d to where it is already", m.ID)
		}
		flows[i].Offloaded = m.Offload
	}
	return moves
}

func offloaded(flows []Flow) []uint32 {
	var ids []uint32
	for _, f := range flows {
		if f.Offloaded {
			ids = append(ids, f.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestHeaviestHoldTheFastPath(t *testing.T) {
	p := Policy{Capacity: 2, Hysteresis: 0.2, MinGain: 1}
	flows := []Flow{
		{ID: 1, Rate: 10, Offloaded: true},
		{ID: 2, Rate: 20, Offloaded: true},
		{ID: 3, Rate: 1000},
		{ID: 4, Rate: 500},
		{ID: 5, Rate: 5},
	}
	moves := apply(t, p, flows)
	if got := offloaded(flows); !slices.Equal(got, []uint32{3, 4}) {
		t.Fatalf("offloaded %v, want [3 4] (the two heaviest)", got)
	}
	if len(moves) != 4 {
		t.Fatalf("%d moves, want 4 (two out, two in): %v", len(moves), moves)
	}
	if moves := apply(t, p, flows); len(moves) != 0 {
		t.Fatalf("a second round with the same rates moved %v", moves)
	}
}

func TestHysteresisKeepsHolder(t *testing.T) {
	p := Policy{Capacity: 1, Hysteresis: 0.25, MinGain: 1}
	flows := []Flow{{ID: 1, Rate: 100, Offloaded: true}, {ID: 2, Rate: 120}}
	if moves := apply(t, p, flows); len(moves) != 0 {
		t.Fatalf("a challenger 20%% ahead (threshold 25%%) took the seat: %v", moves)
	}
	flows[1].Rate = 126
	if moves := apply(t, p, flows); len(moves) != 2 || !flows[1].Offloaded || flows[0].Offloaded {
		t.Fatalf("a challenger 26%% ahead did not take the seat: %v %+v", moves, flows)
	}
	// Rates drifting back and forth inside the band do not flap.
	for i := 0; i < 20; i++ {
		flows[0].Rate, flows[1].Rate = 100+float64(i%2)*20, 110-float64(i%2)*10
		if moves := apply(t, p, flows); len(moves) != 0 {
			t.Fatalf("round %d: flapped %v with rates %v/%v", i, moves, flows[0].Rate, flows[1].Rate)
		}
	}
}

func TestMinGain(t *testing.T) {
	p := Policy{Capacity: 1, Hysteresis: 0.1, MinGain: 50}
	flows := []Flow{{ID: 1, Rate: 0, Offloaded: true}, {ID: 2, Rate: 30}}
	if moves := apply(t, p, flows); len(moves) != 0 {
		t.Fatalf("a gain of 30 pps (minimum 50) swapped: %v", moves)
	}
	flows[1].Rate = 60
	if moves := apply(t, p, flows); len(moves) != 2 {
		t.Fatalf("a gain of 60 pps did not swap: %v", moves)
	}
}

func TestModes(t *testing.T) {
	p := Policy{Capacity: 2, Hysteresis: 0.2}
	flows := []Flow{
		{ID: 1, Mode: Onload, Rate: 1e6, Offloaded: true}, // forced out however heavy
		{ID: 2, Mode: Offload, Rate: 1},                   // forced in: evicts auto flows
		{ID: 3, Mode: Auto, Rate: 100, Offloaded: true},
		{ID: 4, Mode: Auto, Rate: 200, Offloaded: true},
	}
	apply(t, p, flows)
	if got := offloaded(flows); !slices.Equal(got, []uint32{2, 4}) {
		t.Fatalf("offloaded %v, want [2 4]", got)
	}
	// More forced flows than seats: capacity still holds, fastest first.
	flows = []Flow{{ID: 1, Mode: Offload, Rate: 1}, {ID: 2, Mode: Offload, Rate: 3}, {ID: 3, Mode: Offload, Rate: 2}}
	apply(t, p, flows)
	if got := offloaded(flows); !slices.Equal(got, []uint32{2, 3}) {
		t.Fatalf("offloaded %v, want [2 3]", got)
	}
}

func TestUnlimited(t *testing.T) {
	p := Policy{}
	flows := []Flow{{ID: 1}, {ID: 2, Rate: 5}, {ID: 3, Mode: Onload, Offloaded: true}}
	apply(t, p, flows)
	if got := offloaded(flows); !slices.Equal(got, []uint32{1, 2}) {
		t.Fatalf("offloaded %v, want [1 2]", got)
	}
	if !p.Admit(Auto, 1<<30) || p.Admit(Onload, 0) {
		t.Fatal("unlimited policy: Admit wrong")
	}
}

func TestShrinkingCapacity(t *testing.T) {
	flows := []Flow{{ID: 1, Rate: 1, Offloaded: true}, {ID: 2, Rate: 3, Offloaded: true}, {ID: 3, Rate: 2, Offloaded: true}}
	apply(t, Policy{Capacity: 1}, flows)
	if got := offloaded(flows); !slices.Equal(got, []uint32{2}) {
		t.Fatalf("offloaded %v, want [2]", got)
	}
}

func TestAdmit(t *testing.T) {
	p := Policy{Capacity: 2}
	if !p.Admit(Auto, 1) || p.Admit(Auto, 2) || p.Admit(Offload, 2) || p.Admit(Onload, 0) {
		t.Fatal("Admit does not follow the capacity")
	}
}

// TestCapacityNeverExceeded: random flows, modes, rates and capacities over
// many rounds; after every round at most Capacity flows hold the fast path,
// no Onload flow is in it, and a full fast path holds, among Auto flows,
// none slower than an onloaded Auto one by more than the hysteresis.
func TestCapacityNeverExceeded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		p := Policy{Capacity: r.IntN(10), Hysteresis: r.Float64(), MinGain: float64(r.IntN(3))}
		flows := make([]Flow, r.IntN(30))
		for i := range flows {
			flows[i] = Flow{ID: uint32(i), Mode: Mode(r.IntN(3)), Offloaded: r.IntN(2) == 0}
		}
		for round := 0; round < 10; round++ {
			for i := range flows {
				flows[i].Rate = float64(r.IntN(1000))
			}
			apply(t, p, flows)
			n := 0
			for _, f := range flows {
				if f.Offloaded {
					n++
					if f.Mode == Onload {
						t.Fatalf("trial %d: onload flow %d offloaded", trial, f.ID)
					}
				}
			}
			if p.Capacity > 0 && n > p.Capacity {
				t.Fatalf("trial %d round %d: %d flows offloaded, capacity %d", trial, round, n, p.Capacity)
			}
			if p.Capacity == 0 && n != len(flows)-count(flows, Onload) {
				t.Fatalf("trial %d: unlimited capacity but %d of %d offloaded", trial, n, len(flows))
			}
			for _, c := range flows {
				if c.Offloaded || c.Mode != Auto {
					continue
				}
				for _, h := range flows {
					if h.Offloaded && h.Mode == Auto && c.Rate > h.Rate*(1+p.Hysteresis) && c.Rate-h.Rate >= p.MinGain {
						t.Fatalf("trial %d: onloaded flow %d (%.0f pps) clearly ahead of offloaded %d (%.0f pps)", trial, c.ID, c.Rate, h.ID, h.Rate)
					}
				}
			}
		}
	}
}

func count(flows []Flow, m Mode) int {
	n := 0
	for _, f := range flows {
		if f.Mode == m {
			n++
		}
	}
	return n
}

func TestMeter(t *testing.T) {
	var m Meter
	t0 := time.Unix(100, 0)
	m.Sample(1000, t0)
	if m.Rate != 0 {
		t.Fatalf("rate %v after one sample", m.Rate)
	}
	m.Sample(2000, t0.Add(time.Second))
	if m.Rate != 1000 {
		t.Fatalf("rate %v, want 1000", m.Rate)
	}
	m.Sample(2000, t0.Add(2*time.Second)) // a quiet round halves it
	if m.Rate != 500 {
		t.Fatalf("rate %v, want 500", m.Rate)
	}
	m.Sample(10, t0.Add(3*time.Second)) // counter went back (flow replaced): restart
	if m.Packets != 10 {
		t.Fatalf("meter did not restart: %+v", m)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{Auto, Offload, Onload} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Fatalf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMode("fast"); err == nil {
		t.Fatal("ParseMode accepted fast")
	}
}
