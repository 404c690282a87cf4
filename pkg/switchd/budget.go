package switchd

import (
	"errors"
	"sort"
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
