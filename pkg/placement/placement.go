// Package placement decides where each cached flow's packets are handled:
// in the fast path (offload: the kernel flow cache, standing in for a NIC
// or DPU flow table) or in userspace (onload: the switch process executes
// every packet with the flow's cached actions).
//
// It is plain data and policy, with no kernel in sight: the revalidator
// measures rates and hands them in; placements come out. The fast path
// has a capacity (a NIC's flow table is small); when more flows want it
// than fit, the policy keeps the highest-rate flows in it and onloads the
// rest, and swaps a holder for a challenger only when the challenger is
// clearly ahead, so flows near the boundary do not flap.
package placement

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Mode is what was asked for a flow (by its rule, its port or the default).
type Mode uint8

const (
	// Auto lets the policy decide: fast path while it has room, then by rate.
	Auto Mode = iota
	// Offload asks for the fast path. It still obeys the capacity: forced
	// flows take seats before Auto ones; past the capacity they are
	// onloaded like any other.
	Offload
	// Onload keeps the flow in userspace.
	Onload
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Offload:
		return "offload"
	case Onload:
		return "onload"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode parses offload, onload or auto.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return Auto, nil
	case "offload":
		return Offload, nil
	case "onload":
		return Onload, nil
	}
	return 0, fmt.Errorf("placement: %q is not offload, onload or auto", s)
}

// MarshalText and UnmarshalText let a Mode travel in JSON as its name.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	*m = v
	return err
}

// Policy is the fast path's capacity and the swap thresholds.
type Policy struct {
	// Capacity is the most flows the fast path holds; 0 is unlimited.
	Capacity int
	// Hysteresis: a challenger replaces the weakest holder only when its
	// rate exceeds the holder's by this fraction (0.25: 25 % more) ...
	Hysteresis float64
	// ... and by at least MinGain packets per second (flows at 0 and 0.1
	// pps are not worth a swap).
	MinGain float64
}

// Flow is one cached flow as the policy sees it.
type Flow struct {
	ID        uint32
	Mode      Mode
	Rate      float64 // packets per second, measured
	Offloaded bool    // where it is now
}

// Move is one placement change.
type Move struct {
	ID      uint32
	Offload bool // true: to the fast path; false: to userspace
}

// unlimited reports whether the fast path has no capacity limit.
func (p Policy) unlimited() bool { return p.Capacity <= 0 }

// Admit says where a new flow starts, given how many flows hold the fast
// path now: Onload flows in userspace; others in the fast path while it
// has room. A new flow has no rate yet: if it is heavy, the next Decide
// promotes it.
func (p Policy) Admit(m Mode, offloaded int) bool {
	if m == Onload {
		return false
	}
	return p.unlimited() || offloaded < p.Capacity
}

// Decide returns the moves that bring flows to the placement the policy
// wants: Onload flows out of the fast path; then, within the capacity,
// Offload flows before Auto ones, each class by rate with hysteresis
// (a holder keeps its seat against a challenger that is not clearly
// ahead). After the moves, at most Capacity flows are offloaded.
func (p Policy) Decide(flows []Flow) []Move {
	var moves []Move
	move := func(f *Flow, offload bool) {
		if f.Offloaded != offload {
			moves = append(moves, Move{ID: f.ID, Offload: offload})
		}
	}
	var forced, auto []*Flow
	for i := range flows {
		f := &flows[i]
		switch f.Mode {
		case Onload:
			move(f, false)
		case Offload:
			forced = append(forced, f)
		default:
			auto = append(auto, f)
		}
	}
	seats := math.MaxInt
	if !p.unlimited() {
		seats = p.Capacity
	}
	for _, class := range [][]*Flow{forced, auto} {
		in := p.choose(class, seats)
		for _, f := range class {
			move(f, in[f])
		}
		seats -= len(in)
	}
	return moves
}

// choose picks at most seats flows of one class for the fast path: the
// current holders, ranked by rate, keep their seats up to the number
// available; free seats go to the fastest challengers; then a challenger
// takes the weakest holder's seat while it is clearly faster.
func (p Policy) choose(class []*Flow, seats int) map[*Flow]bool {
	var holders, challengers []*Flow
	for _, f := range class {
		if f.Offloaded {
			holders = append(holders, f)
		} else {
			challengers = append(challengers, f)
		}
	}
	byRate := func(a, b *Flow) int {
		if a.Rate != b.Rate {
			if a.Rate > b.Rate {
				return -1
			}
			return 1
		}
		return int(a.ID) - int(b.ID) // stable across rounds
	}
	slices.SortFunc(holders, byRate)
	slices.SortFunc(challengers, byRate)
	if len(holders) > seats {
		holders = holders[:seats]
	}
	free := min(seats-len(holders), len(challengers))
	holders = append(holders, challengers[:free]...)
	challengers = challengers[free:]
	slices.SortFunc(holders, byRate)
	// Swap the fastest challenger with the weakest holder while it is
	// clearly ahead.
	for i, j := 0, len(holders)-1; i < len(challengers) && j >= 0; i, j = i+1, j-1 {
		c, h := challengers[i], holders[j]
		if c.Rate <= h.Rate*(1+p.Hysteresis) || c.Rate-h.Rate < p.MinGain {
			break
		}
		holders[j] = c
	}
	in := make(map[*Flow]bool, len(holders))
	for _, f := range holders {
		in[f] = true
	}
	return in
}

// Meter turns a flow's packet counter into a rate: an exponentially
// weighted average over revalidator rounds, so one quiet round does not
// drop a busy flow out of the fast path.
type Meter struct {
	Packets uint64    // counter at the last sample
	At      time.Time // time of the last sample
	Rate    float64   // packets per second
}

// meterWeight is the weight of the newest round in the average.
const meterWeight = 0.5

// Sample adds the counter's value at time now.
func (m *Meter) Sample(packets uint64, now time.Time) {
	if m.At.IsZero() || !now.After(m.At) || packets < m.Packets {
		m.Packets, m.At = packets, now
		return
	}
	r := float64(packets-m.Packets) / now.Sub(m.At).Seconds()
	if m.Rate == 0 {
		m.Rate = r
	} else {
		m.Rate = meterWeight*r + (1-meterWeight)*m.Rate
	}
	m.Packets, m.At = packets, now
}
