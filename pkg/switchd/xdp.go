package switchd

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/placement"
)

// The onload path's ports (docs/placement.md, "The onload path"). With
// --onload-path auto or afxdp, a port whose flows may be onloaded (its
// placement is onload, or a fast-path capacity is set) is put on an
// AF_XDP socket; a port that no longer needs it goes back to plain tc
// once none of its flows is onloaded or has packets in userspace, so its
// peer gets GSO back (XDP on a veth turns it off). A port where AF_XDP
// cannot be set up (no AF_XDP, XDP refused: a tunnel, an MTU too large for
// a page) keeps the ring path; show says which path each port is on.

// wantXDP: may port no's flows be onloaded? Rule (cookie) placements
// are not looked at: their flows keep the ring path.
func (s *Switch) wantXDP(p *port) bool {
	if p.kind == datapath.PortTunnel || p.carrier != 0 {
		return false
	}
	if s.place.policy.Capacity > 0 {
		return true
	}
	s.place.mu.Lock()
	defer s.place.mu.Unlock()
	return s.place.ports[p.no] == placement.Onload
}

// syncXDP enables and disables AF_XDP per port, as wantXDP says. Called
// at the start of each placement round, under the seats lock.
func (s *Switch) syncXDP() {
	o := s.onloader.Load()
	if o == nil || o.Path() != datapath.OnloadPathAFXDP {
		return
	}
	on, failed := o.XDPPorts()
	for _, p := range s.ports.list() {
		want, has := s.wantXDP(p), slices.Contains(on, p.no)
		_, refused := failed[p.no]
		switch {
		case want && !has && !refused:
			if err := o.EnableXDP(p.no); err != nil {
				s.log.Warn("onload path: AF_XDP refused, the port keeps the ring path", "port", p.name, "err", err)
			} else {
				s.log.Info("onload path: AF_XDP", "port", p.name)
			}
		case !want && has && !s.portInUserspace(p.no):
			o.DisableXDP(p.no)
			s.log.Info("onload path: AF_XDP off", "port", p.name)
		}
	}
}

// portInUserspace: is a flow entering on port no onloaded, or are packets
// of it in userspace?
func (s *Switch) portInUserspace(no uint32) bool {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	for _, uk := range s.cache.ukeys {
		if uk != nil && uk.packet.InPort == no && (uk.onload || s.dp.OnloadPending(uk.id) > 0) {
			return true
		}
	}
	return false
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
