package switchd

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/nagare-net/nagare/pkg/datapath"
)

// What the slow path refused, by port and reason: a flow it did not cache
// (the packet was still delivered), a PACKET_IN it did not send. The fast
// path's drops by port are datapath.PortDrops.
const (
	refusedFlowLimit   = "flow-limit"       // the switch's cached-flow limit (FlowLimit) was reached
	refusedPortFlows   = "port-flow-budget" // the port's cached flows (PortFlowLimit)
	refusedPortMasks   = "port-mask-budget" // the port's masks (PortMaskLimit)
	refusedMaskLimit   = "mask-limit"       // the datapath's masks (datapath.MaxMasks)
	refusedInstall     = "install-error"    // any other install failure
	refusedPacketInCap = "packet-in-limit"  // a connection's PACKET_IN rate limit
	refusedPacketInQ   = "packet-in-queue"  // a connection's full send queue
)

func refusalOf(err error) string {
	switch {
	case errors.Is(err, datapath.ErrPortFlowLimit):
		return refusedPortFlows
	case errors.Is(err, datapath.ErrPortMaskLimit):
		return refusedPortMasks
	case errors.Is(err, datapath.ErrMaskLimit):
		return refusedMaskLimit
	case errors.Is(err, datapath.ErrFlowLimit):
		return refusedFlowLimit
	}
	return refusedInstall
}

// portReason keys portCounts.
type portReason struct {
	Port   uint32
	Reason string
}

// portCounts counts events by port and reason.
type portCounts struct {
	mu sync.Mutex
	m  map[portReason]uint64
}

func (c *portCounts) add(port uint32, reason string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[portReason]uint64{}
	}
	c.m[portReason{port, reason}]++
	c.mu.Unlock()
}

// snapshot returns the counts, ordered by port then reason.
func (c *portCounts) snapshot() []portCount {
	c.mu.Lock()
	out := make([]portCount, 0, len(c.m))
	for k, n := range c.m {
		out = append(out, portCount{k, n})
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Port != out[j].Port {
			return out[i].Port < out[j].Port
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

type portCount struct {
	portReason
	N uint64
}

// PortReport is one port's share of the switch's shared resources and
// what was dropped or refused for it (nagarectl show, /metrics).
type PortReport struct {
	OFPort uint32 `json:"ofport"`
	Name   string `json:"name"`
	Flows  int    `json:"flows"` // cached flows entering on it
	Masks  int    `json:"masks"` // distinct masks they use
	// ControllerUpcallLimit: controller-action upcalls per second the
	// fast path admits, fed back from what the controllers accept
	// (Switch.actionPacer); 0: none beyond the upcall budget.
	ControllerUpcallLimit int `json:"controller_upcall_limit"`
	// MissUpcallLimit: misses per second the fast path admits while the
	// port's flows are refused for its cache budget (the same feedback);
	// 0: none beyond the upcall budget.
	MissUpcallLimit int               `json:"miss_upcall_limit"`
	Drops           map[string]uint64 `json:"drops"`   // fast-path drops by reason
	Refused         map[string]uint64 `json:"refused"` // slow-path refusals by reason
}

// ConnReport is one OpenFlow connection's send queue and its drops.
type ConnReport struct {
	ID                 uint64 `json:"id"`
	Peer               string `json:"peer"`
	Queued             int    `json:"queued"`
	PacketInPorts      int    `json:"packet_in_ports"` // ports with a share of its PACKET_IN budget (pinsched.go)
	PacketInRateDrops  uint64 `json:"packet_in_rate_drops"`
	PacketInQueueDrops uint64 `json:"packet_in_queue_drops"`
	AsyncQueueDrops    uint64 `json:"async_queue_drops"`
}

// portReports lists every port (and any port number something was counted
// for), in port order.
func (s *Switch) portReports() ([]PortReport, error) {
	drops, err := s.dp.PortDrops()
	if err != nil {
		return nil, err
	}
	byNo := map[uint32]*PortReport{}
	get := func(no uint32) *PortReport {
		r := byNo[no]
		if r == nil {
			r = &PortReport{OFPort: no, Drops: map[string]uint64{}, Refused: map[string]uint64{}}
			byNo[no] = r
		}
		return r
	}
	byIfindex := map[int]*PortReport{}
	paced, missPaced := s.actionPacer.limits(), s.missPacer.limits()
	for _, p := range s.ports.list() {
		r := get(p.no)
		r.Name = p.name
		r.ControllerUpcallLimit, r.MissUpcallLimit = paced[p.no], missPaced[p.no]
		r.Flows, r.Masks = s.dp.PortUse(p.no)
		if p.ifindex > 0 {
			byIfindex[p.ifindex] = r
		}
	}
	for ifindex, rs := range drops {
		r := byIfindex[ifindex]
		if r == nil {
			// A device that is no switch port (anymore): port 0.
			r = get(0)
			r.Name = "(other devices)"
		}
		for reason, n := range rs {
			r.Drops[reason.String()] += n
		}
	}
	for _, c := range s.refused.snapshot() {
		get(c.Port).Refused[c.Reason] += c.N
	}
	out := make([]PortReport, 0, len(byNo))
	for _, r := range byNo {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].OFPort < out[j].OFPort })
	return out, nil
}

// connReports lists the OpenFlow connections' queues and drops.
func (s *Switch) connReports() []ConnReport {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	out := make([]ConnReport, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, ConnReport{
			ID: c.id, Peer: c.c.RemoteAddr().String(), Queued: len(c.txq), PacketInPorts: c.pins.ports(),
			PacketInRateDrops: c.drops.packetInRate.Load(), PacketInQueueDrops: c.drops.packetInQueue.Load(),
			AsyncQueueDrops: c.drops.asyncQueue.Load(),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// countsString renders reason=n pairs in reason order ("-" for none).
func countsString(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
