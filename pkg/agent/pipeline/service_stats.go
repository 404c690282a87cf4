package pipeline

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// Per-Service counters, read from the switch's own flow counters: a
// ServiceLB frontend flow sees each new connection's first packet once
// (later packets are translated by ConntrackZone and match no frontend),
// so its packet count is the connections to that frontend (forwarded,
// rejected or dropped, by the flow's verdict); an EndpointDNAT flow's is
// the connections its endpoint was chosen for. Unchanged flows survive a
// Service update and an agent restart, and so do their counts.

// ServiceCounter is one frontend's or endpoint's connections.
type ServiceCounter struct {
	Service  proxy.ServiceKey
	Protocol string // TCP, UDP, SCTP
	// Frontend (ServiceLB) or Endpoint (EndpointDNAT): ip:port; the other is empty.
	Frontend, Endpoint string
	// Verdict of a frontend flow: forward, reject or drop.
	Verdict     string
	Connections uint64
}

// ServiceCounters reads the Services' ServiceLB and EndpointDNAT flow
// counters from the switch, one per Service, protocol, frontend or
// endpoint (and verdict), sorted by Service, then frontend/endpoint.
func (p *Pipeline) ServiceCounters(ctx context.Context) ([]ServiceCounter, error) {
	p.mu.Lock()
	c := p.conn
	byCookie := map[uint64]proxy.ServiceKey{}
	for k := range p.services {
		byCookie[serviceObject(k)] = k
	}
	p.mu.Unlock()
	// An endpoint serving internal and external traffic has a flow for
	// each (two tags): one counter for both.
	type label struct {
		k                      proxy.ServiceKey
		proto, fe, ep, verdict string
	}
	index := map[label]int{}
	var out []ServiceCounter
	for _, t := range []Table{TableServiceLB, TableEndpointDNAT} {
		fs, err := c.DumpFlows(ctx, &openflow.FlowStatsRequest{TableID: t.ID, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny,
			Cookie: cookieService, CookieMask: cookieFeature})
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			k, ok := byCookie[f.Cookie]
			if !ok {
				continue
			}
			sc := ServiceCounter{Service: k, Protocol: protoName(f.Match), Connections: f.PacketCount}
			if t == TableServiceLB {
				sc.Frontend, sc.Verdict = frontendOf(f.Match), verdictOf(f.Instructions)
			} else {
				sc.Endpoint = endpointOf(f.Match)
			}
			l := label{sc.Service, sc.Protocol, sc.Frontend, sc.Endpoint, sc.Verdict}
			if i, ok := index[l]; ok {
				out[i].Connections += sc.Connections
				continue
			}
			index[l] = len(out)
			out = append(out, sc)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Service != b.Service {
			return a.Service.String() < b.Service.String()
		}
		return a.Frontend+a.Endpoint+a.Protocol < b.Frontend+b.Endpoint+b.Protocol
	})
	return out, nil
}

func protoName(m openflow.Match) string {
	o, _ := m.Get(openflow.FieldIPProto)
	switch o.Uint() {
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 132:
		return "SCTP"
	}
	return fmt.Sprint(o.Uint())
}

func frontendOf(m openflow.Match) string {
	a, _ := m.Get(openflow.FieldIPv4Dst)
	ip, _ := netip.AddrFromSlice(a.Value)
	o, _ := m.Get(openflow.FieldIPProto)
	port, _ := m.Get(tpDstField(uint8(o.Uint())))
	return netip.AddrPortFrom(ip, uint16(port.Uint())).String()
}

func endpointOf(m openflow.Match) string {
	ip, _ := m.Lookup(regField(regEndpointIP, 0, 32).Field)
	port, _ := m.Lookup(regField(regEndpointPort, 0, 16).Field)
	v := uint32(ip.Uint())
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), uint16(port.Uint())).String()
}

// verdictOf says what a ServiceLB frontend flow does: to a group, to the controller, or nothing.
func verdictOf(is openflow.Instructions) string {
	for _, in := range is {
		if a, ok := in.(openflow.InstApplyActions); ok {
			for _, act := range a.Actions {
				switch act := act.(type) {
				case openflow.ActionGroup:
					return string(proxy.Forward)
				case openflow.ActionOutput:
					if act.Port == openflow.PortController {
						return string(proxy.Reject)
					}
				}
			}
		}
	}
	return string(proxy.Drop)
}
