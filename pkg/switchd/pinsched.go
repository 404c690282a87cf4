package switchd

import (
	"sync"
	"time"
)

// pinSched shares one connection's PACKET_IN budget (rate per second,
// burst at once: Open vSwitch's controller rate and burst limits) fairly
// between the ingress ports whose packets go to that controller, as Open
// vSwitch's pinsched does, but without queues: a decision is made when
// the PACKET_IN would be built, so no timer has to wake up to drain
// anything (the switch shares its core with pods) and nothing waits.
//
// The connection keeps its token bucket (total: rate, burst). Each port
// that sent it a PACKET_IN in the last pinPortIdle has a share: a bucket
// of rate/N per second and burst/N at once, where N is the number of
// such ports plus one share kept for a port not seen yet (so that a new
// port's first PACKET_IN finds something when another port has taken all
// the rest). A PACKET_IN is sent
//   - on its port's share (taking a token from the share and one from the
//     total), or
//   - on borrowed tokens: the total's tokens beyond what the other shares
//     hold, so a port past its share gets what the others leave unused,
//     never what they have in reserve.
//
// Shares and total refill together, at most every pinRefresh, and the
// shares' caps add up to the total's burst, so the total always holds at
// least what the shares hold: a port within its share always gets its
// PACKET_INs, whatever another port sends, and the connection as a whole
// never exceeds its rate and burst. A port alone gets the whole rate
// (it borrows everything no other share holds). Cost: O(1) per PACKET_IN,
// O(ports) once per pinRefresh; at most pinMaxPorts ports have a share of
// their own, later ones share the newcomers' share.
//
// The connection's send queue is shared the same way (reserve, release):
// a PACKET_IN is queued only behind fewer than packetInQueue messages, and
// of those slots each port has a share (packetInQueue over the ports with
// a share or a queued PACKET_IN, plus one for a newcomer). A port past its
// share may borrow a slot only if the slots the other ports have not used
// of theirs stay free. Under a controller that reads slowly, the rate a
// port is allowed is not enough: the slots the controller frees go to
// whoever comes first, and a flooding port always comes first.
type pinSched struct {
	mu          sync.Mutex
	rate, burst float64 // 0 rate: no limit
	total       float64 // the connection's tokens
	shares      map[uint32]*pinShare
	newcomer    pinShare // the share of ports not seen yet
	held        float64  // tokens in all shares, newcomer's included
	refreshed   time.Time

	queued map[uint32]int // PACKET_INs of each port in the send queue
}

type pinShare struct {
	tokens float64
	seen   time.Time // the port's last PACKET_IN (sent or not)
}

const (
	pinRefresh  = 10 * time.Millisecond // shares and total refill at most this often
	pinPortIdle = 2 * time.Second       // a port without a PACKET_IN this long gives its share back
	pinMaxPorts = 256                   // ports with a share of their own per connection
)

func newPinSched(rate, burst int) *pinSched {
	s := &pinSched{rate: float64(max(rate, 0)), burst: float64(max(burst, 1)), shares: map[uint32]*pinShare{}, queued: map[uint32]int{}}
	s.total = s.burst
	s.newcomer.tokens = s.burst
	s.held = s.burst
	return s
}

// take reports whether a PACKET_IN from port may be sent at now.
func (s *pinSched) take(port uint32, now time.Time) bool {
	if s.rate <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refreshed.IsZero() {
		s.refreshed = now
	}
	if now.Sub(s.refreshed) >= pinRefresh {
		s.refresh(now)
	}
	sh := s.shares[port]
	if sh == nil {
		if len(s.shares) < pinMaxPorts {
			// The newcomers' share becomes the port's; a new one starts
			// empty, and every share shrinks to its part of the burst.
			sh = &pinShare{tokens: s.newcomer.tokens}
			s.newcomer.tokens = 0
			s.shares[port] = sh
			s.clamp()
		} else {
			sh = &s.newcomer
		}
	}
	sh.seen = now
	switch {
	case sh.tokens >= 1 && s.total >= 1:
		sh.tokens--
		s.held--
	case s.total-1 >= s.held-sh.tokens: // borrow what no other share holds
	default:
		return false
	}
	s.total--
	return true
}

// refresh refills the total and the shares for the time since the last
// refresh and gives the shares of idle ports back. Callers hold s.mu.
func (s *pinSched) refresh(now time.Time) {
	dt := now.Sub(s.refreshed).Seconds()
	s.refreshed = now
	s.total = min(s.burst, s.total+dt*s.rate)
	for p, sh := range s.shares {
		if now.Sub(sh.seen) > pinPortIdle {
			delete(s.shares, p)
		}
	}
	n := float64(len(s.shares) + 1)
	perShare := dt * s.rate / n
	s.newcomer.tokens += perShare
	for _, sh := range s.shares {
		sh.tokens += perShare
	}
	s.clamp()
}

// clamp caps every share at its part of the burst and sums what they
// hold. Callers hold s.mu.
func (s *pinSched) clamp() {
	limit := max(1, s.burst/float64(len(s.shares)+1))
	s.newcomer.tokens = min(s.newcomer.tokens, limit)
	s.held = s.newcomer.tokens
	for _, sh := range s.shares {
		sh.tokens = min(sh.tokens, limit)
		s.held += sh.tokens
	}
}

// ports is the number of ports with a share of their own.
func (s *pinSched) ports() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.shares)
}

// reserve takes a send-queue slot for a PACKET_IN of port, the queue
// holding queued messages now; false: the PACKET_IN is not to be queued.
// A slot taken is given back with release.
func (s *pinSched) reserve(port uint32, queued int) bool {
	if queued >= packetInQueue {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ports := len(s.shares)
	for p := range s.queued {
		if s.shares[p] == nil {
			ports++
		}
	}
	if _, ok := s.shares[port]; !ok && s.queued[port] == 0 {
		ports++ // port itself
	}
	share := max(1, packetInQueue/(ports+1))
	if mine := s.queued[port]; mine >= share {
		// Borrow only what leaves every other port's unused share free.
		free := packetInQueue - queued - share // the newcomers' share
		for p := range s.shares {
			if p != port {
				free -= max(0, share-s.queued[p])
			}
		}
		for p, n := range s.queued {
			if p != port && s.shares[p] == nil {
				free -= max(0, share-n)
			}
		}
		if free <= 0 {
			return false
		}
	}
	s.queued[port]++
	return true
}

// release gives back a slot reserve took for port.
func (s *pinSched) release(port uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queued[port] <= 1 {
		delete(s.queued, port)
	} else {
		s.queued[port]--
	}
}
