// Package pktgen is the lab's flow-setup packet generator: it sends one UDP
// packet per new 5-tuple from inside a pod (AF_PACKET, so the frame is
// exactly what the switch sees, without the pod's stack in the way) and
// counts, in the other pod, which of those first packets arrived.
//
// The same binary is both ends; the lab runs it as `nagarectl lab pktgen
// send|recv` inside the pods' namespaces (ip netns exec), see Main.
package pktgen

import "fmt"

// Port ranges of the flow space. Source ports are the fast-moving part of a
// flow's key; destination ports advance once every srcPortSpan flows, so the
// receiver needs one UDP socket per ceil(N/srcPortSpan) destination ports
// (16 sockets for a million flows).
const (
	// SrcPortMin is the lowest source port used.
	SrcPortMin = 1024
	// srcPortSpan is the number of source ports, SrcPortMin..65535.
	srcPortSpan = 65536 - SrcPortMin
	// DefaultDstPort is the first destination port.
	DefaultDstPort = 20000
)

// FlowSpace numbers the 5-tuples of one run: flow i (0 ≤ i < Flows) goes
// from SrcPortMin + i mod span to DstPortBase + i div span; addresses and
// protocol (UDP) are the same for all flows. Every flow is a distinct
// exact-match key.
type FlowSpace struct {
	Flows       int
	DstPortBase uint16
}

// DstPorts is how many destination ports the space uses.
func (f FlowSpace) DstPorts() int { return (f.Flows + srcPortSpan - 1) / srcPortSpan }

// Validate checks that the space fits in the 16-bit port numbers.
func (f FlowSpace) Validate() error {
	if f.Flows < 1 {
		return fmt.Errorf("flows %d: need at least 1", f.Flows)
	}
	if f.DstPortBase == 0 || int(f.DstPortBase)+f.DstPorts() > 65536 {
		return fmt.Errorf("%d flows from destination port %d need ports up to %d", f.Flows, f.DstPortBase, int(f.DstPortBase)+f.DstPorts()-1)
	}
	return nil
}

// Ports returns flow i's source and destination port.
func (f FlowSpace) Ports(i int) (src, dst uint16) {
	return uint16(SrcPortMin + i%srcPortSpan), f.DstPortBase + uint16(i/srcPortSpan)
}

// Index returns the flow number of a (source, destination) port pair, or -1
// if the pair is not in the space.
func (f FlowSpace) Index(src, dst uint16) int {
	if src < SrcPortMin || dst < f.DstPortBase {
		return -1
	}
	i := int(dst-f.DstPortBase)*srcPortSpan + int(src-SrcPortMin)
	if i >= f.Flows {
		return -1
	}
	return i
}
