package switchd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/nagare-net/nagare/pkg/ctlproto"
	"github.com/nagare-net/nagare/pkg/datapath"
	"github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
	"github.com/nagare-net/nagare/pkg/placement"
)

// The control protocol nagarectl and the agent speak on the same socket
// as OpenFlow is pkg/ctlproto's; these names are kept for the switch's
// own code and its callers.
type (
	CtlRequest  = ctlproto.Request
	CtlResponse = ctlproto.Response
	PortInfo    = ctlproto.PortInfo
	Target      = ctlproto.Target
)

// DefaultOpenFlowPort is the IANA OpenFlow port.
const DefaultOpenFlowPort = ctlproto.DefaultOpenFlowPort

// ParseTarget parses one connection target (ctlproto.ParseTarget).
func ParseTarget(s string) (Target, error) { return ctlproto.ParseTarget(s) }

// Call is ctlproto.Call: one request to the switch on a Unix socket.
func Call(ctx context.Context, path string, req CtlRequest) (*CtlResponse, error) {
	return ctlproto.Call(ctx, path, req)
}

// CallConn is ctlproto.CallConn: one request on a connection made
// elsewhere; it closes c.
func CallConn(ctx context.Context, c net.Conn, req CtlRequest) (*CtlResponse, error) {
	return ctlproto.CallConn(ctx, c, req)
}

func (s *Switch) serveControl(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req CtlRequest
		var resp CtlResponse
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			resp = s.control(req)
		}
		if enc.Encode(resp) != nil {
			return
		}
	}
}

func (s *Switch) control(req CtlRequest) CtlResponse {
	lines, data, err := s.controlDo(req)
	if err != nil {
		return CtlResponse{Error: err.Error()}
	}
	r := CtlResponse{OK: true, Lines: lines}
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return CtlResponse{Error: err.Error()}
		}
		r.Data = b
	}
	return r
}

func (s *Switch) controlDo(req CtlRequest) ([]string, any, error) {
	switch req.Cmd {
	case "port-add":
		spec := PortSpec{Name: req.Name, OFPort: req.OFPort, Kind: req.Kind, Workload: req.Workload, Tenant: req.Tenant, PinnedCPU: openflow.VSXNoCPU}
		if req.PinCPU > 0 {
			spec.PinnedCPU = req.PinCPU - 1
		}
		if req.Remote != "" {
			tc := &ofproto.TunnelConfig{}
			var err error
			if tc.Remote, err = netip.ParseAddr(req.Remote); err != nil {
				return nil, nil, fmt.Errorf("remote: %w", err)
			}
			switch req.TOS {
			case "inherit":
				tc.InheritTOS = true
			case "":
			default:
				return nil, nil, fmt.Errorf("tos %q: only \"inherit\" is known", req.TOS)
			}
			if req.Local != "" {
				if tc.Local, err = netip.ParseAddr(req.Local); err != nil {
					return nil, nil, fmt.Errorf("local: %w", err)
				}
			}
			spec.Tunnel = tc
		}
		p, err := s.ports.Add(spec)
		if err != nil {
			return nil, nil, err
		}
		return []string{fmt.Sprintf("added %s as port %d (%s)", p.name, p.no, p.kind)}, map[string]any{"ofport": p.no}, nil
	case "port-del":
		return nil, nil, s.ports.Del(req.Name)
	case "dump-ports":
		return s.dumpPorts()
	case "list-ports":
		return s.listPorts()
	case "dump-flows":
		fs := s.pl.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny})
		var lines []string
		for _, f := range fs {
			lines = append(lines, f.String())
		}
		return lines, nil, nil
	case "dump-cache":
		return s.dumpCache()
	case "trace":
		return s.trace(req)
	case "show":
		return s.show()
	case "revalidate":
		// One round now; with Change, every cached flow is translated
		// again, as after a table change (benchmarks), but the tables are
		// left alone: this is a production switch's socket.
		start := time.Now()
		s.rv.force(req.Change)
		st := s.rv.stats()
		return []string{fmt.Sprintf("revalidated %d flows in %v", st.LastFlows, st.LastDuration)},
			map[string]any{"flows": st.LastFlows, "duration_ns": st.LastDuration.Nanoseconds(), "wall_ns": time.Since(start).Nanoseconds()}, nil
	case "steering-show", "steering-add", "steering-del", "steering-pin":
		return s.steeringControl(req)
	case "placement-set":
		line, err := s.setPlacement(req.Target, req.Mode)
		if err != nil {
			return nil, nil, err
		}
		return []string{line}, nil, nil
	case "placement-show":
		st := s.placementStats()
		return append([]string{placementSummary(st), onloadPathLine(st)}, s.placementLines()...), st, nil
	case "conntrack":
		return s.conntrackList(req)
	case "conntrack-flush":
		return s.conntrackFlush(req)
	case "flush-cache":
		n := s.cache.len()
		if err := s.flushCache(); err != nil {
			return nil, nil, err
		}
		return []string{fmt.Sprintf("deleted %d cached flows", n)}, nil, nil
	}
	return nil, nil, fmt.Errorf("unknown command %q (port-add, port-del, list-ports, dump-ports, dump-flows, dump-cache, trace, show, revalidate, flush-cache, conntrack, conntrack-flush, steering-show, steering-add, steering-del, steering-pin, placement-set, placement-show)", req.Cmd)
}

func (s *Switch) dumpPorts() ([]string, any, error) {
	st, err := s.ports.stats(openflow.PortAny)
	if err != nil {
		return nil, nil, err
	}
	byNo := map[uint32]openflow.PortStats{}
	for _, x := range st {
		byNo[x.PortNo] = x
	}
	var lines []string
	for _, p := range s.ports.list() {
		x := byNo[p.no]
		state := "up"
		if p.state&ofppsLinkDown != 0 {
			state = "down"
		}
		if p.config&ofppcPortDown != 0 {
			state += ",port-down"
		}
		extra := ""
		if p.tunnel != nil {
			extra = fmt.Sprintf(" remote=%s via port %d", p.tunnel.Remote, p.carrier)
		}
		lines = append(lines, fmt.Sprintf("port %d: %s (%s, %s)%s rx pkts=%d bytes=%d drop=%d tx pkts=%d bytes=%d drop=%d",
			p.no, p.name, p.kind, state, extra, x.RxPackets, x.RxBytes, x.RxDropped, x.TxPackets, x.TxBytes, x.TxDropped))
	}
	return lines, st, nil
}

func (s *Switch) listPorts() ([]string, any, error) {
	ports := s.ports.list()
	byNo := map[uint32]*port{}
	for _, p := range ports {
		byNo[p.no] = p
	}
	hooks := map[int]string{}
	for _, p := range s.dp.Ports() {
		hooks[p.Ifindex] = p.Hook
	}
	var lines []string
	out := []PortInfo{}
	for _, p := range ports {
		pi := PortInfo{OFPort: p.no, Name: p.name, Kind: p.kind.String(), Ifindex: p.ifindex}
		if p.ifindex != 0 {
			pi.Hook = hooks[p.ifindex]
		}
		if p.tunnel != nil {
			pi.Remote = p.tunnel.Remote.String()
			if p.tunnel.Local.IsValid() {
				pi.Local = p.tunnel.Local.String()
			}
			pi.Carrier = p.carrier
			if c := byNo[p.carrier]; c != nil {
				pi.Device = c.name
			}
		}
		out = append(out, pi)
		lines = append(lines, fmt.Sprintf("%d %s %s", p.no, p.name, p.kind))
	}
	return lines, out, nil
}

func (s *Switch) dumpCache() ([]string, any, error) {
	fs, err := s.dp.Dump()
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].Stats.Packets > fs[j].Stats.Packets })
	now := time.Now()
	var lines []string
	out := make([]CachedFlow, 0, len(fs))
	s.cache.mu.Lock()
	for _, f := range fs {
		cf := CachedFlow{Flow: flow.Format(f.Key, f.Mask), Actions: flow.FormatActions(f.Actions), Packets: f.Stats.Packets, Bytes: f.Stats.Bytes,
			Placement: "offload", Mode: placement.Auto}
		if f.Onload {
			cf.Placement = "onload"
		}
		if uk := s.cache.get(f.ID); uk != nil {
			cf.Mode, cf.Rate = uk.mode, uk.meter.Rate
		}
		out = append(out, cf)
	}
	s.cache.mu.Unlock()
	for i, f := range fs {
		used := "never"
		if !f.Stats.Used.IsZero() {
			used = fmt.Sprintf("%.3fs", now.Sub(f.Stats.Used).Seconds())
		}
		flags := ""
		if f.Stats.TCPFlags != 0 {
			flags = fmt.Sprintf(", tcp_flags:0x%03x", f.Stats.TCPFlags)
		}
		cf := &out[i]
		lines = append(lines, fmt.Sprintf("%s, packets:%d, bytes:%d, used:%s%s, placement:%s(%s), rate:%.0fpps, actions:%s",
			cf.Flow, f.Stats.Packets, f.Stats.Bytes, used, flags, cf.Placement, cf.Mode, cf.Rate, cf.Actions))
	}
	return lines, out, nil
}

// CachedFlow is one cached flow as dump-cache reports it to programs.
type CachedFlow struct {
	Flow      string         `json:"flow"`
	Actions   string         `json:"actions"`
	Packets   uint64         `json:"packets"`
	Bytes     uint64         `json:"bytes"`
	Placement string         `json:"placement"` // offload or onload: where its packets are handled now
	Mode      placement.Mode `json:"mode"`      // what it asks for (auto, offload, onload)
	Rate      float64        `json:"rate_pps"`  // measured by the revalidator
}

func placementSummary(st PlacementStats) string {
	capacity := "unlimited"
	if st.Capacity > 0 {
		capacity = fmt.Sprint(st.Capacity)
	}
	return fmt.Sprintf("placement: fast-path capacity %s, offloaded %d, onloaded %d, moved to the fast path %d, to userspace %d; onload path: packets %d, bytes %d, batches %d, GSO packets sent whole %d (vnet header: %s), segmented %d, failed %d, unknown flow %d",
		capacity, st.Offloaded, st.Onloaded, st.ToFast, st.ToSlow, st.OnloadPackets, st.OnloadBytes, st.OnloadBatches, st.OnloadWhole, st.OnloadVnetHdr, st.OnloadSegmented, st.OnloadFailed, st.OnloadUnknown)
}

// hooksLine says how the fast path sits on the ports: pod ports start on
// a clsact filter and move to tcx once pod attaches pause
// (pkg/datapath/hooks.go).
func (s *Switch) hooksLine() string {
	n := map[string]int{}
	for _, p := range s.dp.Ports() {
		n[p.Hook]++
	}
	line := fmt.Sprintf("port hooks: tcx %d, clsact filter %d (pod ports, until pod attaches pause)", n[datapath.HookTCX], n[datapath.HookFilter])
	if err := s.dp.HookError(); err != nil {
		line += "; last move to tcx failed: " + err.Error()
	}
	return line
}

func (s *Switch) show() ([]string, any, error) {
	c, err := s.dp.Counters()
	if err != nil {
		return nil, nil, err
	}
	drops, err := s.dp.Drops()
	if err != nil {
		return nil, nil, err
	}
	rv := s.rv.stats()
	ms := s.pl.MACStats()
	st := &s.stats
	lines := []string{
		fmt.Sprintf("bridge %s: dpid %016x, fail mode %s, %d ports, %d cached flows (limit %d), %d masks",
			s.cfg.Bridge, s.cfg.DatapathID, s.cfg.FailMode, len(s.ports.list()), s.cache.len(), s.cfg.FlowLimit, s.dp.NumMasks()),
		s.hooksLine(),
		fmt.Sprintf("fast path: connection shortcuts %d (learnt %d), emc hits %d, megaflow hits %d, misses %d, upcalls %d, packets run through actions by BPF_PROG_RUN %d",
			c["shortcut-hit"], c["shortcut-learn"], c["emc-hit"], c["megaflow-hit"], c["miss"], c["upcall"], c["executed"]),
		fmt.Sprintf("slow path: upcalls %d (miss %d, action %d), installed %d, install errors %d, flow limit hits %d, executed %d, execute errors %d, GSO packets segmented %d, too big to execute %d, translation errors %d, packet-ins %d, malformed upcalls %d, misses repeating their batch's key (translated once) %d",
			st.upcalls.Load(), st.misses.Load(), st.actionUpcalls.Load(), st.installed.Load(), st.installErrs.Load(), st.limited.Load(),
			st.executed.Load(), st.execErrs.Load(), st.segmented.Load(), st.truncated.Load(), st.xlateErrs.Load(), st.packetIns.Load(), st.badUpcalls.Load(),
			st.repeats.Load()),
		fmt.Sprintf("revalidator: %d rounds, last %v over %d flows (max %v), idle-deleted %d, stale-deleted %d, modified %d, revalidated %d, kept after MAC learning without translating %d, rules expired %d",
			rv.Rounds, rv.LastDuration, rv.LastFlows, rv.MaxDuration, rv.IdleDeleted, rv.StaleDeleted, rv.Modified, rv.Revalidated, rv.MACSkipped, rv.RulesExpired),
		placementSummary(s.placementStats()),
		onloadPathLine(s.placementStats()),
		fmt.Sprintf("mac table: %d entries (max %d, %d per port), learned %d, moved %d, aged %d, evicted: port over budget %d, table full %d (of another port's %d)",
			ms.Entries, ms.Max, ms.PerPort, ms.Learned, ms.Moved, ms.Aged, ms.EvictedPort, ms.EvictedFull, ms.EvictedVictims),
	}
	lines = append(lines, tunnelLine(s.dp.NativeTunnels(), c))
	if cs, err := s.dp.ConntrackStats(); err == nil {
		lines = append(lines, fmt.Sprintf("conntrack: %d connections (holds %d, a port may commit %s), %d recirculation states (%d recovered from cached first passes)",
			cs.Conns, cs.Max, limitString(int(cs.PortMax)), s.pl.RecircStates(), s.stats.recircRecovered.Load()))
	}
	var reasons []string
	for r, n := range drops {
		reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
	}
	sort.Strings(reasons)
	lines = append(lines, "drops: "+strings.Join(reasons, " "))
	ports, err := s.portReports()
	if err != nil {
		return nil, nil, err
	}
	cfg := &s.cfg
	lines = append(lines, fmt.Sprintf("per-port budgets: upcalls %s/s (burst %s), cached flows %s, masks %s; per connection: packet-ins %s/s (burst %s), queue %d (packet-ins behind at most %d)",
		limitString(cfg.UpcallRate), limitString(cfg.UpcallBurst), limitString(cfg.PortFlowLimit), limitString(cfg.PortMaskLimit),
		limitString(cfg.PacketInRate), limitString(cfg.PacketInBurst), connQueue, packetInQueue))
	for _, p := range ports {
		paced := ""
		if p.ControllerUpcallLimit > 0 {
			paced = fmt.Sprintf(", controller upcalls paced to %d/s", p.ControllerUpcallLimit)
		}
		if p.MissUpcallLimit > 0 {
			paced += fmt.Sprintf(", misses paced to %d/s (flows refused for its budget)", p.MissUpcallLimit)
		}
		lines = append(lines, fmt.Sprintf("  port %d %s: flows %d, masks %d%s, drops: %s, refused: %s",
			p.OFPort, p.Name, p.Flows, p.Masks, paced, countsString(p.Drops), countsString(p.Refused)))
	}
	conns := s.connReports()
	for _, c := range conns {
		lines = append(lines, fmt.Sprintf("  connection %d %s: queued %d, packet-ins shared by %d ports, dropped: rate limit %d, queue %d; other async dropped %d",
			c.ID, c.Peer, c.Queued, c.PacketInPorts, c.PacketInRateDrops, c.PacketInQueueDrops, c.AsyncQueueDrops))
	}
	data := map[string]any{"counters": c, "revalidator": rv, "mac_table": ms, "cached_flows": s.cache.len(), "installed": st.installed.Load(), "masks": s.dp.NumMasks(),
		"placement": s.placementStats(), "drops": dropNames(drops), "ports": ports, "connections": conns}
	return lines, data, nil
}

// tunnelLine says which tunnels the fast path does itself and how many
// packets took which way.
func tunnelLine(nts []datapath.NativeTunnel, c map[string]uint64) string {
	var where []string
	for _, nt := range nts {
		where = append(where, fmt.Sprintf("port %d on %s (%s, UDP %d)", nt.OFPort, nt.Underlay, nt.Local, nt.UDPPort))
	}
	sort.Strings(where)
	native := "none (VXLAN by the tunnel devices)"
	if len(where) > 0 {
		native = strings.Join(where, ", ")
	}
	return fmt.Sprintf("tunnels in the fast path: %s; encapsulated %d, decapsulated %d, left to the device %d, GSO packets given back to it %d",
		native, c["tunnel-encap"], c["tunnel-decap"], c["tunnel-kernel"], c["tunnel-undo"])
}

func dropNames(d map[datapath.DropReason]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(d))
	for r, n := range d {
		out[r.String()] = n
	}
	return out
}

// limitString renders a budget (0: none).
func limitString(v int) string {
	if v == 0 {
		return "unlimited"
	}
	return fmt.Sprint(v)
}

// trace translates a packet description and shows every table visited,
// the rule hit, the resulting datapath actions and megaflow mask.
func (s *Switch) trace(req CtlRequest) ([]string, any, error) {
	var key flow.Key
	switch {
	case req.Hex != "":
		pkt, err := parseHex(req.Hex)
		if err != nil {
			return nil, nil, err
		}
		if key, err = flow.ParsePacket(pkt); err != nil {
			return nil, nil, err
		}
		m, err := openflow.ParseMatch(req.Packet)
		if err == nil {
			if v, ok := m.Get(openflow.FieldInPort); ok {
				key.InPort = uint32(v.Uint())
			}
		}
	default:
		m, err := openflow.ParseMatch(req.Packet)
		if err != nil {
			return nil, nil, fmt.Errorf("packet %q: %w", req.Packet, err)
		}
		key = keyFromMatch(m)
	}
	states, err := parseCtNext(req.CtNext)
	if err != nil {
		return nil, nil, err
	}
	var lines []string
	// A pass that ends in a recirculation goes on as the fast path would:
	// the packet looked up again with its recirc_id and the ct_state the
	// tracker would give it (--ct-next; NAT is not simulated).
	for pass := 0; ; pass++ {
		x, err := s.translate(key, true)
		if err != nil {
			return nil, nil, err
		}
		if pass > 0 {
			lines = append(lines, "", fmt.Sprintf("recirculation %d", pass))
		}
		lines = append(lines, "packet: "+flow.Format(key, flow.Present(key)))
		for _, st := range x.Trace {
			lines = append(lines, st.String())
		}
		lines = append(lines,
			"megaflow: "+flow.Format(key, x.mask),
			"datapath actions: "+flow.FormatActions(x.actions))
		for _, pi := range x.PacketIns {
			lines = append(lines, fmt.Sprintf("packet-in: reason %d table %d cookie %#x", pi.Reason, pi.TableID, pi.Cookie))
		}
		next, ok := recirculated(key, x.actions, states, pass)
		if !ok || pass >= 8 {
			break
		}
		key = next
	}
	return lines, nil, nil
}

// recirculated is the key of a packet's next pass when acts end in a
// recirculation: recirc_id set, ct fields as the last ct action and the
// given ct_state make them.
func recirculated(key flow.Key, acts []flow.Action, states []uint8, pass int) (flow.Key, bool) {
	if len(acts) == 0 {
		return key, false
	}
	rc, ok := acts[len(acts)-1].(flow.Recirc)
	if !ok {
		return key, false
	}
	key.RecircID = rc.ID
	for _, a := range acts {
		switch a := a.(type) {
		case flow.CT:
			st := uint8(flow.CtTrk | flow.CtNew)
			if pass < len(states) {
				st = states[pass]
			} else if len(states) > 0 {
				st = states[len(states)-1]
			}
			key.CtState, key.CtZone = st, a.Zone
			if a.MarkMask != 0 {
				key.CtMark = key.CtMark&^a.MarkMask | a.Mark&a.MarkMask
			}
			// A new connection committed with a translation gets its
			// range's first address and port (an established one's NAT
			// is the tracker's: not known here).
			if n := a.NAT; n != nil && a.Flags&flow.CTCommit != 0 && n.AddrMin.IsValid() {
				switch n.Kind {
				case flow.NATDst:
					key.SetIPDst(n.AddrMin)
					if n.PortMin != 0 {
						key.TpDst = n.PortMin
					}
					key.CtState |= flow.CtDNAT
				case flow.NATSrc:
					key.SetIPSrc(n.AddrMin)
					if n.PortMin != 0 {
						key.TpSrc = n.PortMin
					}
					key.CtState |= flow.CtSNAT
				}
			}
		case flow.CTClear:
			key.CtState, key.CtZone, key.CtMark, key.CtLabel = 0, 0, 0, [16]byte{}
		}
	}
	return key, true
}

// parseCtNext reads "trk,new;trk,est": one ct_state per recirculation.
func parseCtNext(s string) ([]uint8, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint8
	for _, pass := range strings.Split(s, ";") {
		var st uint8
		for _, name := range strings.FieldsFunc(pass, func(r rune) bool { return r == ',' || r == '+' || r == '|' }) {
			found := false
			for _, n := range flow.CtStateNames {
				if n.Name == strings.TrimSpace(name) {
					st |= n.Bit
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("ct-next: unknown ct_state %q (new, est, rel, rpl, inv, trk, snat, dnat)", name)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

func parseHex(s string) ([]byte, error) {
	s = strings.NewReplacer(" ", "", ":", "", "\n", "").Replace(s)
	b := make([]byte, len(s)/2)
	for i := range b {
		var v byte
		if _, err := fmt.Sscanf(s[2*i:2*i+2], "%02x", &v); err != nil {
			return nil, fmt.Errorf("hex packet: %w", err)
		}
		b[i] = v
	}
	return b, nil
}

// keyFromMatch builds the packet a trace describes from match values:
// the fields as the pipeline places them, plus what a real packet has
// (a present VLAN tag, tunnel metadata, a TTL).
func keyFromMatch(m openflow.Match) flow.Key {
	k := ofproto.PacketKey(m)
	if _, ok := m.Get(openflow.FieldVLANPCP); ok {
		k.VlanTCI |= flow.VLANCFI
	}
	if _, ok := m.Get(openflow.FieldTunnelID); ok {
		k.TunFlags = flow.TunPresent
	}
	if k.NwTTL == 0 && (k.EthType == 0x0800 || k.EthType == 0x86dd) {
		k.NwTTL = 64
	}
	return k
}
