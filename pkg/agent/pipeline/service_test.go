package pipeline

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/proxy"
	dp "github.com/nagare-net/nagare/pkg/flow"
	"github.com/nagare-net/nagare/pkg/ofproto"
	"github.com/nagare-net/nagare/pkg/openflow"
)

// The Service tests program the agent's flows and groups, through its own
// OpenFlow client (Conn), into nagare-switch's pipeline (pkg/ofproto)
// behind an in-process OpenFlow peer, and walk packets through it pass by
// pass with a small model of the fast path's connection tracker between
// the passes: pass 1 ct(zone,nat) and recirculate, pass 2 the group and
// ct(commit,nat(dst=endpoint)), pass 3 L3 forwarding.

// fakeSwitch answers OpenFlow on one connection with an ofproto pipeline.
type fakeSwitch struct {
	pl   *ofproto.Pipeline
	msgs int // FLOW_MODs and GROUP_MODs received

	wmu        sync.Mutex
	nc         net.Conn
	packetOuts chan *openflow.PacketOut // PACKET_OUTs received, if made
}

// packetIn sends pi to the controller, as the switch's slow path does.
func (s *fakeSwitch) packetIn(pi *openflow.PacketIn) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return openflow.WriteMessage(s.nc, pi)
}

func (s *fakeSwitch) serve(nc net.Conn) {
	defer nc.Close()
	s.wmu.Lock()
	s.nc = nc
	s.wmu.Unlock()
	r := openflow.NewReader(nc)
	send := func(m openflow.Message) {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		_ = openflow.WriteMessage(nc, m)
	}
	for {
		m, raw, err := r.ReadMessage()
		if err != nil {
			return
		}
		xid := m.Hdr().Xid
		fail := func(err error) {
			e := openflow.ErrorReply(err, raw)
			e.Xid = xid
			send(e)
		}
		switch m := m.(type) {
		case *openflow.Hello:
			send(openflow.NewHello(xid, 0x04))
		case *openflow.FeaturesRequest:
			send(&openflow.FeaturesReply{MsgHeader: openflow.MsgHeader{Xid: xid}, DatapathID: 1, NTables: 254})
		case *openflow.BarrierRequest:
			send(&openflow.BarrierReply{MsgHeader: openflow.MsgHeader{Xid: xid}})
		case *openflow.FlowMod:
			s.msgs++
			if _, err := s.pl.FlowMod(m); err != nil {
				fail(err)
			}
		case *openflow.GroupMod:
			s.msgs++
			if err := s.pl.GroupMod(m); err != nil {
				fail(err)
			}
		case *openflow.PacketOut:
			if s.packetOuts != nil {
				s.packetOuts <- m
			}
		case *openflow.MultipartRequest:
			var body openflow.MultipartBody
			switch m.Type {
			case openflow.MPFlow:
				body = &openflow.FlowStatsReply{Stats: s.pl.FlowStats(m.Body.(*openflow.FlowStatsRequest))}
			case openflow.MPGroupDesc:
				body = &openflow.GroupDescReply{Groups: s.pl.GroupDesc()}
			}
			send(&openflow.MultipartReply{MsgHeader: openflow.MsgHeader{Xid: xid}, Type: m.Type, Body: body})
		}
	}
}

// serviceNode is representativePipeline's node programmed into a switch
// pipeline through the agent's client (Sync, as at a connection).
func serviceNode(t testing.TB) (*Pipeline, *fakeSwitch) {
	t.Helper()
	return serviceNodeWith(t, nil)
}

// serviceNodeWith is serviceNode with more state set before the Sync
// (and a port 7, the node proxy's in the redirect tests).
func serviceNodeWith(t testing.TB, setup func(*Pipeline)) (*Pipeline, *fakeSwitch) {
	t.Helper()
	sw := &fakeSwitch{pl: ofproto.New(ofproto.Config{})}
	var ports []ofproto.Port
	for _, no := range []uint32{2, 3, 4, 5, 6, 7} {
		pt := ofproto.Port{No: no, Name: fmt.Sprint("p", no)}
		if no == 3 || no == 4 {
			pt.Tunnel = &ofproto.TunnelConfig{Remote: netip.MustParseAddr(fmt.Sprintf("192.168.77.%d", no-1))}
		}
		ports = append(ports, pt)
	}
	sw.pl.SetPorts(ports)
	a, b := net.Pipe()
	go sw.serve(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, a, "fake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := representativePipeline()
	if setup != nil {
		setup(p)
	}
	p.SetConn(c)
	if _, err := p.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
	return p, sw
}

// conntrack is a model of the fast path's tracker in one zone: enough to
// say new, established and reply, and to apply a committed DNAT both ways.
type conntrack struct {
	orig  map[tuple]*ctConn
	reply map[tuple]*ctConn
	// credit: count each pass's packet as the switch's upcall does, which
	// applies what learn actions learned (session affinity).
	credit  bool
	dropped int // commits refused: their reply tuple was taken
	passes  int // the last walk's passes through the pipeline
}

type tuple struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
}

type ctConn struct {
	orig      tuple
	seenReply bool
	dnatTo    netip.AddrPort
	mark      uint32
	vip       netip.AddrPort
	replyTup  tuple
}

func keyTuple(k dp.Key) tuple {
	return tuple{netip.AddrFrom4([4]byte(k.IPSrc[:4])), netip.AddrFrom4([4]byte(k.IPDst[:4])), k.TpSrc, k.TpDst, k.NwProto}
}

// ct runs one ct action on k and returns the key the next pass sees.
func (c *conntrack) ct(k dp.Key, a dp.CT) dp.Key {
	if c.orig == nil {
		c.orig, c.reply = map[tuple]*ctConn{}, map[tuple]*ctConn{}
	}
	tp := keyTuple(k)
	k.CtZone = a.Zone
	if conn, ok := c.orig[tp]; ok {
		// As the fast path (and Open vSwitch): +new until a reply was seen.
		k.CtState = dp.CtTrk | dp.CtNew
		if conn.seenReply {
			k.CtState = dp.CtTrk | dp.CtEst
		}
		if conn.dnatTo != netip.AddrPortFrom(tp.dst, tp.dport) {
			k.CtState |= dp.CtDNAT
		}
		k.CtMark = conn.mark
		if a.NAT != nil {
			k.SetIPDst(conn.dnatTo.Addr())
			k.TpDst = conn.dnatTo.Port()
		}
		return k
	}
	if conn, ok := c.reply[tp]; ok {
		conn.seenReply = true
		k.CtState = dp.CtTrk | dp.CtEst | dp.CtRpl | dp.CtDNAT
		k.CtMark = conn.mark
		if a.NAT != nil {
			k.SetIPSrc(conn.vip.Addr())
			k.TpSrc = conn.vip.Port()
		}
		return k
	}
	k.CtState = dp.CtTrk | dp.CtNew
	if a.Flags&dp.CTCommit != 0 {
		conn := &ctConn{orig: tp, vip: netip.AddrPortFrom(tp.dst, tp.dport), mark: a.Mark & a.MarkMask}
		if a.NAT != nil && a.NAT.Kind == dp.NATDst {
			conn.dnatTo = netip.AddrPortFrom(a.NAT.AddrMin, a.NAT.PortMin)
			k.SetIPDst(a.NAT.AddrMin)
			k.TpDst = a.NAT.PortMin
			k.CtState |= dp.CtDNAT
		} else {
			conn.dnatTo = netip.AddrPortFrom(tp.dst, tp.dport)
		}
		conn.replyTup = tuple{conn.dnatTo.Addr(), tp.src, conn.dnatTo.Port(), tp.sport, tp.proto}
		if _, clash := c.reply[conn.replyTup]; clash {
			// The fast path's ct_commit: the reply tuple is another
			// connection's (a DNATed packet committed again by its
			// translated tuple): the packet is dropped.
			c.dropped++
			k.CtState = dp.CtTrk | dp.CtInv
			return k
		}
		c.orig[tp], c.reply[conn.replyTup] = conn, conn
	}
	return k
}

// walk sends k through the switch pipeline, pass after pass, and returns
// the last pass's actions and the packet as it leaves (after the tracker's
// rewrites).
func (c *conntrack) walk(t testing.TB, pl *ofproto.Pipeline, k dp.Key) (string, dp.Key) {
	t.Helper()
	for pass := 0; pass < 6; pass++ {
		c.passes = pass + 1
		tr, err := pl.Translate(k, ofproto.TranslateOptions{Trace: true})
		if err != nil {
			t.Fatalf("translate %v: %v", k, err)
		}
		if c.credit {
			pl.Credit(tr.Rules, 1, 64, time.Now())
		}
		n := len(tr.Actions)
		if n >= 2 {
			if rc, ok := tr.Actions[n-1].(dp.Recirc); ok {
				ct, ok := tr.Actions[n-2].(dp.CT)
				if !ok {
					t.Fatalf("pass %d: recirculation without ct: %s", pass, dp.FormatActions(tr.Actions))
				}
				before := c.dropped
				k = c.ct(k, ct)
				if c.dropped > before {
					return "drop(ct commit: reply tuple taken)", k
				}
				k.RecircID = rc.ID
				continue
			}
		}
		// A ct without table= (a commit before an output) is run by the
		// tracker too; the pipeline does not see its result.
		for _, a := range tr.Actions {
			if ct, ok := a.(dp.CT); ok {
				c.ct(k, ct)
			}
		}
		return dp.FormatActions(tr.Actions), k
	}
	t.Fatalf("more than 6 passes")
	return "", k
}

var (
	gatewayMAC = [6]byte{0x02, 0, 0, 0, 1, 1}
	dbMAC      = [6]byte{0x0a, 0x58, 0x0a, 0x4d, 0x01, 0x03} // pod default/db, 10.77.1.3, port 6
	webMAC     = [6]byte{0x0a, 0x58, 0x0a, 0x4d, 0x01, 0x02} // pod default/web, 10.77.1.2, port 5
)

func ipKey(proto uint8, in uint32, srcMAC, dstMAC [6]byte, src, dst string, sport, dport uint16) dp.Key {
	k := dp.Key{InPort: in, EthType: 0x0800, NwProto: proto, NwTTL: 64, TpSrc: sport, TpDst: dport, EthSrc: srcMAC, EthDst: dstMAC}
	k.SetIPSrc(netip.MustParseAddr(src))
	k.SetIPDst(netip.MustParseAddr(dst))
	return k
}

// fromDB is a packet from pod db (port 6) to the Service's ClusterIP, routed via the gateway.
func fromDB(proto uint8, sport, dport uint16) dp.Key {
	return ipKey(proto, 6, dbMAC, gatewayMAC, "10.77.1.3", "10.96.0.10", sport, dport)
}

// TestServiceClusterIPWalk: a new connection from a pod to the ClusterIP
// reaches one of the endpoints (the local pod, or node2's through the
// tunnel), the same connection always the same one, both are used; an
// established connection's packets go on to the chosen endpoint and its
// replies come back to the client from the ClusterIP.
func TestServiceClusterIPWalk(t *testing.T) {
	_, sw := serviceNode(t)
	for _, tc := range []struct {
		proto    uint8
		vport    uint16
		epPort   uint16
		protoStr string
	}{{6, 80, 8080, "tcp"}, {17, 53, 5353, "udp"}} {
		var ct conntrack
		hits := map[string]int{}
		for sport := uint16(40000); sport < 40064; sport++ {
			out, k := ct.walk(t, sw.pl, fromDB(tc.proto, sport, tc.vport))
			dst := netip.AddrFrom4([4]byte(k.IPDst[:4]))
			switch {
			case dst.String() == "10.77.1.2" && k.TpDst == tc.epPort && strings.HasSuffix(out, "output:5"):
			case dst.String() == "10.77.2.5" && k.TpDst == tc.epPort && strings.Contains(out, "output:3"):
			default:
				t.Fatalf("%s sport %d: to %s:%d, actions %s", tc.protoStr, sport, dst, k.TpDst, out)
			}
			hits[dst.String()]++

			// The next packet of the connection, before any reply (a UDP
			// client's second datagram, a TCP SYN retransmitted): still
			// +new to the tracker, but translated as the first: the same
			// endpoint, not committed again.
			out2, k2 := ct.walk(t, sw.pl, fromDB(tc.proto, sport, tc.vport))
			if out2 != out || k2.IPDst != k.IPDst || k2.CtState&dp.CtDNAT == 0 {
				t.Fatalf("%s sport %d established: %s to %v, first %s", tc.protoStr, sport, out2, k2.IPDst, out)
			}
			// The reply, from the endpoint: un-NATed, to the client.
			var rep dp.Key
			if dst.String() == "10.77.1.2" {
				rep = ipKey(tc.proto, 5, webMAC, dbMAC, "10.77.1.2", "10.77.1.3", tc.epPort, sport)
			} else {
				rep = ipKey(tc.proto, 3, [6]byte{2}, [6]byte{3}, "10.77.2.5", "10.77.1.3", tc.epPort, sport)
				rep.TunID, rep.TunFlags = 1, dp.TunPresent
			}
			out3, k3 := ct.walk(t, sw.pl, rep)
			if !strings.HasSuffix(out3, "output:6") || netip.AddrFrom4([4]byte(k3.IPSrc[:4])).String() != "10.96.0.10" || k3.TpSrc != tc.vport {
				t.Fatalf("%s reply from %s: %s, source %v:%d", tc.protoStr, dst, out3, k3.IPSrc[:4], k3.TpSrc)
			}
		}
		if hits["10.77.1.2"] < 10 || hits["10.77.2.5"] < 10 {
			t.Fatalf("%s: connections per endpoint %v: not spread", tc.protoStr, hits)
		}
	}
	// The node itself (its route to the Services' range resolves to
	// RemoteGatewayMAC, its source the gateway address): both endpoints,
	// replies un-NATed back to the gateway port.
	var host conntrack
	hits := map[string]int{}
	for sport := uint16(30000); sport < 30032; sport++ {
		k := ipKey(6, 2, gatewayMAC, [6]byte(RemoteGatewayMAC), "10.77.1.1", "10.96.0.10", sport, 80)
		out, k2 := host.walk(t, sw.pl, k)
		dst := netip.AddrFrom4([4]byte(k2.IPDst[:4])).String()
		var rep dp.Key
		switch {
		case dst == "10.77.1.2" && strings.HasSuffix(out, "output:5"):
			rep = ipKey(6, 5, webMAC, gatewayMAC, "10.77.1.2", "10.77.1.1", 8080, sport)
		case dst == "10.77.2.5" && strings.Contains(out, "output:3"):
			rep = ipKey(6, 3, [6]byte{2}, [6]byte{3}, "10.77.2.5", "10.77.1.1", 8080, sport)
			rep.TunID, rep.TunFlags = 1, dp.TunPresent
		default:
			t.Fatalf("node sport %d: to %s, %s", sport, dst, out)
		}
		hits[dst]++
		out3, k3 := host.walk(t, sw.pl, rep)
		if !strings.HasSuffix(out3, "output:2") || netip.AddrFrom4([4]byte(k3.IPSrc[:4])).String() != "10.96.0.10" {
			t.Fatalf("reply to the node from %s: %s, source %v", dst, out3, k3.IPSrc[:4])
		}
	}
	if hits["10.77.1.2"] == 0 || hits["10.77.2.5"] == 0 {
		t.Fatalf("node's connections per endpoint %v", hits)
	}
	// Not a Service port: no translation, routed as before (to the gateway's stack by L2).
	var ct conntrack
	if out, k := ct.walk(t, sw.pl, fromDB(6, 40000, 81)); netip.AddrFrom4([4]byte(k.IPDst[:4])).String() != "10.96.0.10" || !strings.HasSuffix(out, "output:2") {
		t.Fatalf("other port: %s to %v", out, k.IPDst[:4])
	}
}

// endpoints returns n ready endpoints on node2's and node3's subnets.
func manyEndpoints(n int) []proxy.Endpoint {
	eps := make([]proxy.Endpoint, n)
	for i := range eps {
		eps[i] = proxy.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 77, byte(2 + i%2), byte(1 + i/2%250)}), Port: uint16(10000 + i/500),
			Ready: true, Serving: true}
	}
	return eps
}

func bigService(eps []proxy.Endpoint) *proxy.Service {
	return &proxy.Service{Key: proxy.ServiceKey{Namespace: "default", Name: "big"}, Type: proxy.TypeClusterIP, Ports: []*proxy.Port{{
		Protocol: proxy.TCP, Port: 443, Frontends: []proxy.Frontend{{Kind: proxy.FrontendClusterIP, Addr: netip.MustParseAddr("10.96.0.20"), Port: 443}},
		Endpoints: eps, InternalEndpoints: eps, Internal: proxy.Forward, External: proxy.Reject}}}
}

// TestServiceManyEndpoints: 6000 endpoints in one Service are split over
// child groups (every message under 64 KiB), programmed, and new
// connections spread over all of them.
func TestServiceManyEndpoints(t *testing.T) {
	p, sw := serviceNode(t)
	eps := manyEndpoints(6000)
	svc := bigService(eps)
	for _, g := range p.serviceFlows(svc).groups {
		b, err := openflow.Marshal(g)
		if err != nil || len(b) > 0xffff {
			t.Fatalf("group %d: %d bytes, %v", g.GroupID, len(b), err)
		}
	}
	ctx := context.Background()
	res, err := p.UpdateServices(ctx, []*proxy.Service{svc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.GroupsAdded != 13 || res.FlowsAdded != 6001 {
		t.Fatalf("%+v: want 12 children and a parent, one frontend and 6000 endpoint flows", res)
	}
	var ct conntrack
	hits := map[netip.AddrPort]int{}
	byPort := map[uint16]int{}
	for i := 0; i < 3000; i++ {
		k := fromDB(6, uint16(1024+i), 443)
		k.SetIPDst(netip.MustParseAddr("10.96.0.20"))
		out, k2 := ct.walk(t, sw.pl, k)
		ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte(k2.IPDst[:4])), k2.TpDst)
		if !strings.Contains(out, "output:3") && !strings.Contains(out, "output:4") {
			t.Fatalf("connection %d: to %s, %s", i, ap, out)
		}
		hits[ap]++
		byPort[k2.TpDst]++
	}
	// 3000 connections over 6000 endpoints: about 1 - e^-0.5 ≈ 39% of
	// the endpoints are hit, and every child group (one per port here) gets its share.
	if len(hits) < 2000 {
		t.Fatalf("%d distinct endpoints of 6000 for 3000 connections", len(hits))
	}
	for port := uint16(10000); port < 10012; port++ {
		if byPort[port] < 150 || byPort[port] > 350 {
			t.Fatalf("endpoints with port %d (one child group's) got %d of 3000 connections: %v", port, byPort[port], byPort)
		}
	}
	// Shrinking to 300 endpoints: children deleted after the parent, one group left.
	res, err = p.UpdateServices(ctx, []*proxy.Service{bigService(eps[:300])}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.GroupsDeleted != 12 || res.FlowsDeleted != 5700 || len(sw.pl.GroupDesc()) != 3 {
		t.Fatalf("%+v, %d groups on the switch", res, len(sw.pl.GroupDesc()))
	}
}

// TestServiceChangeMovesNewConnectionsOnly: when an endpoint goes, the
// connections established to the other one keep going there, new ones
// all go to the remaining endpoint, and the gone endpoint is reported for
// a UDP flush; the Service's deletion removes its flows and groups only.
func TestServiceChangeMovesNewConnectionsOnly(t *testing.T) {
	p, sw := serviceNode(t)
	ctx := context.Background()
	var ct conntrack
	est := map[uint16]string{}
	for sport := uint16(40000); sport < 40032; sport++ {
		_, k := ct.walk(t, sw.pl, fromDB(6, sport, 80))
		est[sport] = netip.AddrFrom4([4]byte(k.IPDst[:4])).String()
	}
	svc := representativeService()
	for _, port := range svc.Ports {
		port.InternalEndpoints = port.InternalEndpoints[1:] // 10.77.1.2 goes
		port.Endpoints, port.ExternalEndpoints = port.InternalEndpoints, port.InternalEndpoints
	}
	res, err := p.UpdateServices(ctx, []*proxy.Service{svc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.GroupsModified != 2 || res.GroupsAdded != 0 || res.FlowsDeleted != 4 || res.FlowsAdded != 0 {
		t.Fatalf("%+v: want both groups modified in place and the gone endpoint's four flows (two plain, two hairpin) deleted", res)
	}
	if len(res.StaleUDP) != 1 || res.StaleUDP[0] != (StaleEndpoint{CtZone, 17, netip.MustParseAddr("10.77.1.2"), 5353}) {
		t.Fatalf("stale UDP %v", res.StaleUDP)
	}
	for sport, dst := range est {
		_, k := ct.walk(t, sw.pl, fromDB(6, sport, 80))
		if got := netip.AddrFrom4([4]byte(k.IPDst[:4])).String(); got != dst {
			t.Fatalf("established connection %d moved from %s to %s", sport, dst, got)
		}
	}
	for sport := uint16(50000); sport < 50032; sport++ {
		_, k := ct.walk(t, sw.pl, fromDB(6, sport, 80))
		if got := netip.AddrFrom4([4]byte(k.IPDst[:4])).String(); got != "10.77.2.5" {
			t.Fatalf("new connection %d went to %s", sport, got)
		}
	}
	// A restarted agent (a new pipeline, the same desired state) keeps
	// every flow and group.
	q := representativePipeline()
	q.SetServices([]*proxy.Service{svc})
	q.SetConn(p.conn)
	st, err := q.Sync(ctx)
	if err != nil || st.Added != 0 || st.Deleted != 0 || st.GroupsAdded+st.GroupsModified+st.GroupsDeleted != 0 || st.GroupsKept != 2 {
		t.Fatalf("sync after restart: %+v, %v", st, err)
	}
	// Deleted: its flows and groups go, the rest stays.
	before := len(sw.pl.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}))
	if _, err := p.UpdateServices(ctx, nil, []proxy.ServiceKey{svc.Key}); err != nil {
		t.Fatal(err)
	}
	after := len(sw.pl.FlowStats(&openflow.FlowStatsRequest{TableID: openflow.TableAll, OutPort: openflow.PortAny, OutGroup: openflow.GroupAny}))
	if before-after != 4 || len(sw.pl.GroupDesc()) != 0 {
		t.Fatalf("delete: %d → %d flows, %d groups left", before, after, len(sw.pl.GroupDesc()))
	}
	if out, _ := ct.walk(t, sw.pl, fromDB(6, 60000, 80)); !strings.HasSuffix(out, "output:2") {
		t.Fatalf("after deletion a new connection: %s", out)
	}
}

// TestServiceVerdicts: a port with no endpoint anywhere sends new
// connections to the agent, which rejects them (service_reject.go); a
// port whose endpoints are all elsewhere under a Local policy drops them.
func TestServiceVerdicts(t *testing.T) {
	p, sw := serviceNode(t)
	for _, c := range []struct {
		verdict proxy.Verdict
		want    string // the actions' start
	}{{proxy.Reject, "userspace"}, {proxy.Drop, "drop"}} {
		svc := bigService(nil)
		svc.Ports[0].Internal = c.verdict
		if _, err := p.UpdateServices(context.Background(), []*proxy.Service{svc}, nil); err != nil {
			t.Fatal(err)
		}
		var ct conntrack
		k := fromDB(6, 40000, 443)
		k.SetIPDst(netip.MustParseAddr("10.96.0.20"))
		if out, _ := ct.walk(t, sw.pl, k); !strings.HasPrefix(out, c.want) {
			t.Fatalf("%s: %s, want %s", c.verdict, out, c.want)
		}
	}
}

// TestGroupIDsCollide: a colliding owner gets another id, stable while held.
func TestGroupIDsCollide(t *testing.T) {
	var g groupIDs
	a := g.alloc("a")
	g.byID[a+2] = "x" // squat the next candidates
	delete(g.byOwner, "a")
	delete(g.byID, a)
	g.byID[a] = "other"
	b := g.alloc("a")
	if b != a+4 || g.alloc("a") != b {
		t.Fatalf("ids %d %d: want the next free odd id", a, b)
	}
}

// TestServiceEndpointsSpreadEvenly: with 5000, 5300 (children of unequal
// size) and 6000 endpoints behind a parent select group, new connections
// from many clients spread over every endpoint as a fair die would: a
// chi-square test over the endpoints (5 connections each on average)
// and over the child groups. The selection is the switch's own
// (ofproto's select hash), walked pass by pass as in the tests above.
func TestServiceEndpointsSpreadEvenly(t *testing.T) {
	if testing.Short() {
		t.Skip("81 500 connections walked through the pipeline")
	}
	for _, n := range []int{5000, 5300, 6000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p, sw := serviceNode(t)
			eps := manyEndpoints(n)
			if _, err := p.UpdateServices(context.Background(), []*proxy.Service{bigService(eps)}, nil); err != nil {
				t.Fatal(err)
			}
			index := map[netip.AddrPort]int{}
			for i, e := range eps {
				index[netip.AddrPortFrom(e.Addr, e.Port)] = i
			}
			var ct conntrack
			conns := 5 * n
			hits := make([]int, n)
			for i := 0; i < conns; i++ {
				// One client pod (the pipeline checks its source), every
				// connection from its own source port.
				k := fromDB(6, uint16(1024+i), 443)
				k.SetIPDst(netip.MustParseAddr("10.96.0.20"))
				_, k2 := ct.walk(t, sw.pl, k)
				ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte(k2.IPDst[:4])), k2.TpDst)
				j, ok := index[ap]
				if !ok {
					t.Fatalf("connection %d went to %s, not an endpoint", i, ap)
				}
				hits[j]++
			}
			// Child groups hold consecutive endpoints, near-equal in size.
			children := (n + maxBucketsPerGroup - 1) / maxBucketsPerGroup
			byChild := make([]float64, children)
			wantChild := make([]float64, children)
			for c := 0; c < children; c++ {
				lo, hi := c*n/children, (c+1)*n/children
				for j := lo; j < hi; j++ {
					byChild[c] += float64(hits[j])
				}
				wantChild[c] = float64(conns) * float64(hi-lo) / float64(n)
			}
			chi := func(got, want []float64) (float64, float64) {
				var x float64
				for i := range got {
					d := got[i] - want[i]
					x += d * d / want[i]
				}
				df := float64(len(got) - 1)
				return x, df + 5*math.Sqrt(2*df) // about p = 3e-7 for a fair die
			}
			per := make([]float64, n)
			want := make([]float64, n)
			mn, mx := hits[0], hits[0]
			for j, h := range hits {
				per[j], want[j] = float64(h), float64(conns)/float64(n)
				mn, mx = min(mn, h), max(mx, h)
			}
			x, limit := chi(per, want)
			xc, limitc := chi(byChild, wantChild)
			t.Logf("%d connections over %d endpoints: chi-square %.0f (limit %.0f, df %d), per endpoint min %d max %d; over %d child groups: chi-square %.1f (limit %.1f)",
				conns, n, x, limit, n-1, mn, mx, children, xc, limitc)
			if x > limit {
				t.Errorf("endpoints not evenly used: chi-square %.0f > %.0f", x, limit)
			}
			if xc > limitc {
				t.Errorf("child groups not used in proportion to their size: chi-square %.1f > %.1f: %v", xc, limitc, byChild)
			}
		})
	}
}
