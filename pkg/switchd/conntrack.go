package switchd

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/nagare-net/nagare/pkg/datapath"
)

// The fast path's connection tracker seen from the control socket:
// `nagarectl conntrack` lists connections as `conntrack -L` does, and
// `nagarectl conntrack flush` deletes them (all, or by zone, protocol,
// address and port: the agent flushes a removed endpoint's UDP flows so
// that clients of a DNS Service do not keep talking to a pod that went).

// connMatch reads the selection of a conntrack request.
func connMatch(req CtlRequest) (datapath.ConnMatch, error) {
	var m datapath.ConnMatch
	if req.Zone != nil {
		z := *req.Zone
		m.Zone = &z
	}
	switch req.Proto {
	case "":
	case "tcp":
		m.Proto = 6
	case "udp":
		m.Proto = 17
	case "sctp":
		m.Proto = 132
	case "icmp":
		m.Proto = 1
	case "icmpv6":
		m.Proto = 58
	default:
		return m, fmt.Errorf("conntrack: unknown protocol %q (tcp, udp, sctp, icmp, icmpv6)", req.Proto)
	}
	if req.Addr != "" {
		a, err := netip.ParseAddr(req.Addr)
		if err != nil {
			return m, fmt.Errorf("conntrack: address %q: %w", req.Addr, err)
		}
		m.Addr = a
	}
	m.Port = req.L4Port
	if len(req.Conns) > 0 {
		m.Origs = make(map[datapath.ConnTuple]bool, len(req.Conns))
		for _, t := range req.Conns {
			m.Origs[datapath.ConnTuple(t)] = true
		}
	}
	return m, nil
}

// conntrackList answers "conntrack": the connections a match selects.
func (s *Switch) conntrackList(req CtlRequest) ([]string, any, error) {
	m, err := connMatch(req)
	if err != nil {
		return nil, nil, err
	}
	all, err := s.dp.Conntrack()
	if err != nil {
		return nil, nil, err
	}
	out := make([]datapath.Conn, 0, len(all))
	for _, c := range all {
		if m.Matches(&c) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	lines := make([]string, 0, len(out)+1)
	for _, c := range out {
		lines = append(lines, c.String())
	}
	st, err := s.dp.ConntrackStats()
	if err == nil {
		lines = append(lines, fmt.Sprintf("%d connections shown, %d in the table (holds %d; a port may commit %s)",
			len(out), st.Conns, st.Max, limitString(int(st.PortMax))))
	}
	return lines, out, nil
}

// conntrackFlush answers "conntrack-flush".
func (s *Switch) conntrackFlush(req CtlRequest) ([]string, any, error) {
	m, err := connMatch(req)
	if err != nil {
		return nil, nil, err
	}
	n, err := s.dp.FlushConntrack(m)
	if err != nil {
		return nil, nil, err
	}
	return []string{fmt.Sprintf("flushed %d connections", n)}, map[string]int{"flushed": n}, nil
}
