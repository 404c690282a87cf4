package switchd

import (
	"sync"
	"time"
)

// upcallPacer feeds back to the fast path how many of a port's upcalls of
// one kind the slow path takes: controller actions (what the controllers
// accept; Switch.actionPacer) and misses (what the port's cache budget
// accepts; Switch.missPacer).
//
// Controller actions: a cached flow whose action is the controller sends
// every packet up as an action upcall, up to the port's upcall budget
// (2000/s by default); the connections' PACKET_IN budgets (pinsched.go) and
// queues may take far fewer (a controller that reads 100 a second). Each
// refused one was read, decoded and checked by the handler thread for
// nothing, on a core it may share with pods. So, per ingress port, over
// windows of paceWindow: if some of the port's action upcalls found no
// connection to take their PACKET_IN, the fast path is told to admit that
// port's action upcalls at what the connections took, plus a quarter (so
// that it sees when they take more); a window without a refusal in which
// the port used at least half its limit doubles it, until it reaches the
// port's upcall budget and is lifted. A port whose action upcalls stop for
// paceIdle, or a new controller connection (a --controller target or a ptcp
// listener's), lifts it at once.
//
// Misses (Switch.missPacer): a miss whose flow is refused for its port's
// flow or mask budget was translated and executed but not cached, and the
// flow's next packet misses again; a port sending new flows past its cache
// budget (a tuple-space explosion, a scan) keeps the handler busy on a
// core it may share with pods, for nothing the cache keeps. The same
// windows, with "taken" meaning installed and "refused" refused for the
// port's budget: the port's misses are admitted at what its budget took
// (+25 %, at least 10/s), doubled back by clean windows as above, lifted
// after paceIdle without a miss. A port within its budget is never paced:
// its first packets reach userspace within its upcall budget as before.
type upcallPacer struct {
	mu      sync.Mutex
	ports   map[uint32]*pacedPort
	ceiling int // the port's upcall budget; limits at or above it are lifted
	set     func(port uint32, rate, burst uint32) error
}

type pacedPort struct {
	start          time.Time // the window's start
	taken, refused int       // the window's upcalls, by outcome
	limit          int       // the fast path's limit now (per second); 0: none
}

const (
	paceWindow = 200 * time.Millisecond
	paceMin    = 10 // a paced port keeps at least this many a second
	paceIdle   = 2 * time.Second
)

func newUpcallPacer(upcallRate int, set func(port uint32, rate, burst uint32) error) *upcallPacer {
	ceiling := upcallRate
	if ceiling <= 0 {
		ceiling = 100000 // no port budget: lift the limit at this rate
	}
	return &upcallPacer{ports: map[uint32]*pacedPort{}, ceiling: ceiling, set: set}
}

// record counts one upcall of port and whether the slow path took it: a
// controller action's PACKET_IN reached at least one connection; a
// miss's flow was installed (refused: for the port's cache budget).
func (a *upcallPacer) record(port uint32, taken bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.ports[port]
	if p == nil {
		p = &pacedPort{start: now}
		a.ports[port] = p
	}
	if taken {
		p.taken++
	} else {
		p.refused++
	}
	el := now.Sub(p.start)
	if el < paceWindow {
		return
	}
	limit := p.limit
	switch {
	case p.refused > 0:
		limit = max(paceMin, int(float64(p.taken)/el.Seconds()*1.25)+1)
	case p.limit > 0 && float64(p.taken) >= 0.5*float64(p.limit)*el.Seconds():
		// Everything the limit let through was taken, and the port
		// pushes against it: the controllers may take more.
		limit = 2 * p.limit
	}
	if limit >= a.ceiling {
		limit = 0
	}
	// Each write refills the fast path's bucket: leave it alone for a
	// change of less than a fifth.
	if (limit == 0) != (p.limit == 0) || 5*abs(limit-p.limit) > p.limit {
		a.apply(port, p, limit)
	}
	p.start, p.taken, p.refused = now, 0, 0
}

// apply sets port's fast-path limit. Callers hold a.mu.
func (a *upcallPacer) apply(port uint32, p *pacedPort, limit int) {
	// A tenth of a second's worth at once.
	if err := a.set(port, uint32(limit), uint32(max(1, limit/10))); err != nil {
		return // the port is gone; its entry expires
	}
	p.limit = limit
}

// expire lifts the limits of ports without an upcall of its kind for paceIdle
// (all of them with all set) and forgets those ports.
func (a *upcallPacer) expire(now time.Time, all bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for port, p := range a.ports {
		if !all && now.Sub(p.start) < paceIdle {
			continue
		}
		if p.limit > 0 {
			_ = a.set(port, 0, 0)
		}
		delete(a.ports, port)
	}
}

// limits returns the ports' fast-path limits (nagarectl show).
func (a *upcallPacer) limits() map[uint32]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[uint32]int{}
	for port, p := range a.ports {
		if p.limit > 0 {
			out[port] = p.limit
		}
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
