package switchd

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/placement"
)

// The onload path's ports (docs/placement.md, "The onload path"). With
// --onload-path auto or afxdp, a port whose flows are onloaded goes on
// AF_XDP sockets: at once when its placement is onload (before its flows
// move), otherwise (a capacity, a rule cookie) from the first round that
// finds one of its flows onloaded. It goes back to plain tc once it no
// longer needs them and none of its flows is onloaded or has packets in
// userspace, so its peer gets GSO back (XDP on a veth turns it off): a
// port whose flows all stay offloaded never pays that. A port where
// AF_XDP cannot be set up (no AF_XDP, XDP refused: a tunnel, an MTU too
// large for a page) keeps the ring path; show says which path each port
// is on.

// syncXDP enables and disables AF_XDP per port. Called at the start of
// each placement round, under the seats lock.
func (s *Switch) syncXDP() {
	o := s.onloader.Load()
	if o == nil || o.Path() != datapath.OnloadPathAFXDP {
		return
	}
	on, failed := o.XDPPorts()
	s.place.mu.Lock()
	var placed []uint32
	for no, m := range s.place.ports {
		if m == placement.Onload {
			placed = append(placed, no)
		}
	}
	s.place.mu.Unlock()
	s.cache.mu.Lock()
	idle := s.cache.onloaded == 0
	s.cache.mu.Unlock()
	if len(on) == 0 && len(placed) == 0 && idle {
		return // nothing onloaded, nothing on AF_XDP: no scan of the flows
	}
	busy := s.portsInUserspace()
	for _, p := range s.ports.list() {
		if p.kind == datapath.PortTunnel || p.carrier != 0 {
			continue
		}
		want, has := slices.Contains(placed, p.no) || busy[p.no], slices.Contains(on, p.no)
		_, refused := failed[p.no]
		switch {
		case want && !has && !refused:
			if err := o.EnableXDP(p.no); err != nil {
				s.log.Warn("onload path: AF_XDP refused, the port keeps the ring path", "port", p.name, "err", err)
			} else {
				s.log.Info("onload path: AF_XDP", "port", p.name)
			}
		case !want && has:
			o.DisableXDP(p.no)
			s.log.Info("onload path: AF_XDP off", "port", p.name)
		}
	}
}

// portsInUserspace: the ports with a flow entering on them that is
// onloaded, or has packets in userspace.
func (s *Switch) portsInUserspace() map[uint32]bool {
	busy := map[uint32]bool{}
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	for _, uk := range s.cache.ukeys {
		if uk != nil && !busy[uk.packet.InPort] && (uk.onload || s.dp.OnloadPending(uk.id) > 0) {
			busy[uk.packet.InPort] = true
		}
	}
	return busy
}

// onloadPathLine says which path onloaded packets take, per port.
func onloadPathLine(st PlacementStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "onload path: %s", st.OnloadPath)
	if len(st.XDPPorts) > 0 {
		fmt.Fprintf(&b, ", AF_XDP (copy mode) on ports %v, the ring for the others", st.XDPPorts)
	}
	for _, no := range slices.Sorted(func(yield func(uint32) bool) {
		for k := range st.XDPRefused {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "; port %d on the ring: %s", no, st.XDPRefused[no])
	}
	fmt.Fprintf(&b, "; AF_XDP packets %d, dropped by full socket rings %d", st.OnloadXDP, st.OnloadLost)
	return b.String()
}
