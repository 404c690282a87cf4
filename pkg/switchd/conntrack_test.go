package switchd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nagare-net/nagare/pkg/ctlproto"
	"github.com/nagare-net/nagare/pkg/datapath"
)

// The Service pipeline a controller writes into Open vSwitch for a
// ClusterIP, written with the real ovs-ofctl: every IP packet through the
// tracker (zone 5, an established connection's NAT restored both ways),
// a new connection to the VIP load-balanced by a select group whose
// buckets load the backend into reg3 and resubmit to the table that
// commits with DNAT.
const (
	svcVIP  = "10.8.0.100"
	svcMAC  = "02:00:00:00:00:64"
	svcPort = 80
	bePort  = 8080
)

func serviceFlows(ts *testSwitch, backends ...int) {
	ts.t.Helper()
	var buckets []string
	for _, b := range backends {
		buckets = append(buckets, fmt.Sprintf("bucket=load:0x%08x->NXM_NX_REG3[],resubmit(,3)", 0x0a080000|b))
	}
	ts.ofctl("add-group", "group_id=1,type=select,"+strings.Join(buckets, ","))
	flows := []string{
		"table=0,priority=100,ip,actions=ct(table=1,zone=5,nat)",
		"table=0,priority=10,arp,actions=NORMAL",
		fmt.Sprintf("table=1,priority=100,ct_state=+new+trk,tcp,nw_dst=%s,tp_dst=%d,actions=group:1", svcVIP, svcPort),
		"table=1,priority=50,ct_state=+inv+trk,actions=drop",
		"table=1,priority=10,ip,actions=goto_table:2",
		"table=2,priority=10,ip,nw_dst=10.8.0.1,actions=output:1",
	}
	for _, b := range backends {
		ip := fmt.Sprintf("10.8.0.%d", b)
		flows = append(flows,
			fmt.Sprintf("table=3,priority=10,tcp,reg3=0x%08x,actions=ct(commit,table=2,zone=5,nat(dst=%s:%d),exec(load:0x1->NXM_NX_CT_MARK[0]))", 0x0a080000|b, ip, bePort),
			fmt.Sprintf("table=2,priority=10,ip,nw_dst=%s,actions=set_field:%s->eth_dst,output:%d", ip, podMAC(b), b))
	}
	for _, f := range flows {
		ts.ofctl("add-flow", f)
	}
}

// namedEchoServer answers every line of a connection with "NAME: line"
// in the namespace of pod i, on bePort.
func namedEchoServer(t *testing.T, ts *testSwitch, i int) {
	t.Helper()
	var l net.Listener
	var err error
	ts.Pods[i-1].In(t, func() { l, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", podIP(i), bePort)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := fmt.Fprintf(c, "p%d: %s", i, line); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// svcConn is a client connection to the VIP from pod 1.
type svcConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialService(t *testing.T, ts *testSwitch) *svcConn {
	t.Helper()
	c, err := dialServiceWithin(t, ts, 5*time.Second)
	if err != nil {
		t.Fatalf("connect to the Service: %v", err)
	}
	return c
}

// dialServiceWithin connects from pod 0 to the Service, giving up after d.
func dialServiceWithin(t *testing.T, ts *testSwitch, d time.Duration) (*svcConn, error) {
	t.Helper()
	var c net.Conn
	var err error
	ts.Pods[0].In(t, func() {
		c, err = net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", svcVIP, svcPort), d)
	})
	if err != nil {
		return nil, err
	}
	return &svcConn{c: c, r: bufio.NewReader(c)}, nil
}

// startService starts a switch with three pods, the Service of
// serviceFlows backed by pods 2 and 3 (each answering with its name), and
// pod 0 knowing the VIP's MAC.
func startService(t *testing.T) *testSwitch {
	t.Helper()
	ts := startSwitch(t, 3, nil)
	serviceFlows(ts, 2, 3)
	if err := ts.Pods[0].Sh(t, "ip", "neigh", "replace", svcVIP, "lladdr", svcMAC, "dev", "eth0", "nud", "permanent"); err != nil {
		t.Fatal(err)
	}
	namedEchoServer(t, ts, 2)
	namedEchoServer(t, ts, 3)
	return ts
}

// ask sends a line and returns which backend answered.
func (s *svcConn) ask(msg string) (string, error) {
	_ = s.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(s.c, "%s\n", msg); err != nil {
		return "", err
	}
	line, err := s.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	name, rest, ok := strings.Cut(strings.TrimSpace(line), ": ")
	if !ok || rest != msg {
		return "", fmt.Errorf("answer %q to %q", line, msg)
	}
	return name, nil
}

// A ClusterIP Service on real veths: TCP connections to the VIP reach both
// backends (DNAT), replies come back from the VIP (the reverse
// translation), each connection sticks to its backend, both passes are
// cached, and the tracker lists the connections with their NAT and mark.
func TestServiceDNATOnTheWire(t *testing.T) {
	ts := startService(t)

	seen := map[string]int{}
	var conns []*svcConn
	for i := range 16 {
		sc := dialService(t, ts)
		conns = append(conns, sc)
		first, err := sc.ask(fmt.Sprintf("hello %d", i))
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		for j := range 3 {
			again, err := sc.ask(fmt.Sprintf("again %d.%d", i, j))
			if err != nil || again != first {
				t.Fatalf("connection %d moved from %s to %s (%v)", i, first, again, err)
			}
		}
		seen[first]++
	}
	if len(seen) != 2 {
		t.Fatalf("16 connections all went to %v: the select group does not spread them", seen)
	}
	resp := ts.control(CtlRequest{Cmd: "conntrack"})
	var dnat int
	for _, l := range resp.Lines {
		if strings.Contains(l, "[DNAT]") && strings.Contains(l, "dst="+svcVIP) && strings.Contains(l, "mark=1") {
			dnat++
		}
	}
	if dnat < 16 {
		t.Fatalf("conntrack lists %d DNAT connections to the VIP with mark 1, want 16:\n%s", dnat, strings.Join(resp.Lines, "\n"))
	}
	cache := ts.control(CtlRequest{Cmd: "dump-cache"})
	var first, second bool
	for _, l := range cache.Lines {
		if strings.HasPrefix(l, "recirc_id=0x0,") && strings.Contains(l, "recirc(") {
			first = true
		}
		if !strings.HasPrefix(l, "recirc_id=0x0,") && strings.Contains(l, "ct_state(") {
			second = true
		}
	}
	if !first || !second {
		t.Fatalf("dump-cache lacks a pass (first %v, recirculated %v):\n%s", first, second, strings.Join(cache.Lines, "\n"))
	}
	for _, sc := range conns {
		sc.c.Close()
	}
}

// Established connections through a Service survive a restart of the
// switch: the tracker's table is pinned with the rest of the fast path,
// and the new process translates both passes again.
func TestServiceConnectionSurvivesSwitchRestart(t *testing.T) {
	ts := startService(t)
	sc := dialService(t, ts)
	defer sc.c.Close()
	backend, err := sc.ask("before")
	if err != nil {
		t.Fatal(err)
	}
	// Keep the connection busy across the restart.
	var mu sync.Mutex
	var asked int
	var maxGap time.Duration
	last := time.Now()
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				errc <- nil
				return
			default:
			}
			name, err := sc.ask(fmt.Sprintf("during %d", i))
			if err == nil && name != backend {
				err = fmt.Errorf("answered by %s, the connection was with %s", name, backend)
			}
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			asked++
			maxGap = max(maxGap, time.Since(last))
			last = time.Now()
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	runDir := ts.Config().RunDir
	ts.stop()
	ts2 := runSwitch(t, ts.Node, ts.Pods, runDir, nil)
	serviceFlows(ts2, 2, 3)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-errc; err != nil {
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.EOF) {
			t.Fatalf("the connection broke across the restart: %v", err)
		}
		t.Fatal(err)
	}
	if name, err := sc.ask("after"); err != nil || name != backend {
		t.Fatalf("after the restart: %s %v", name, err)
	}
	// New connections after the restart: their passes are upcalls the
	// new process translates (the first from its own tables, the second
	// from a frozen state it registered again).
	for i := range 4 {
		nc := dialService(t, ts2)
		if _, err := nc.ask(fmt.Sprintf("new %d", i)); err != nil {
			t.Fatalf("a new connection after the restart: %v", err)
		}
		nc.c.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if asked < 10 {
		t.Fatalf("only %d round trips during the restart", asked)
	}
	// A stall of a second or more is a lost packet and TCP's
	// retransmission timer: the restart dropped the connection's packets.
	if maxGap >= time.Second {
		t.Fatalf("the connection stalled %v across the restart", maxGap)
	}
	t.Logf("%d round trips on one connection across the restart, longest gap %v", asked, maxGap)
}

// TestNewServiceConnectionsRightAfterRestart: new connections to a
// Service behind a select group, made before the restarted switch's
// revalidator has run (here: never). Their first passes (ct, then the
// group's hash) are cached from the previous process, so the first miss is
// a later pass whose recirculation id the new process has not made yet; it
// must recover the whole chain back to a first pass, or the connection's
// SYNs are dropped until the revalidator's round (on a node, the first
// connection after a restart timed out).
func TestNewServiceConnectionsRightAfterRestart(t *testing.T) {
	ts := startService(t)
	for i := range 4 { // every pass cached, both buckets seen
		c := dialService(t, ts)
		if _, err := c.ask(fmt.Sprintf("before %d", i)); err != nil {
			t.Fatal(err)
		}
		c.c.Close()
	}
	runDir := ts.Config().RunDir
	ts.stop()
	ts2 := runSwitch(t, ts.Node, ts.Pods, runDir, func(c *Config) { c.RevalidateInterval = time.Hour })
	serviceFlows(ts2, 2, 3)
	backends := map[string]int{}
	for i := range 8 {
		// Under the SYN retransmission timer (1 s): a dropped SYN fails.
		sc, err := dialServiceWithin(t, ts2, 900*time.Millisecond)
		if err != nil {
			t.Fatalf("new connection %d after the restart: %v (recirculation states recovered: %d)", i, err, ts2.stats.recircRecovered.Load())
		}
		name, err := sc.ask(fmt.Sprintf("after %d", i))
		if err != nil {
			t.Fatalf("new connection %d after the restart: %v", i, err)
		}
		backends[name]++
		sc.c.Close()
	}
	t.Logf("8 new connections right after the restart: backends %v, recirculation states recovered %d", backends, ts2.stats.recircRecovered.Load())
}

// TestConnJSONForClients: a connection as "conntrack" lists it in Data
// decodes into the control protocol's Conn (the agent reads those to cut
// connections a policy denies), and a flush naming it selects only it.
func TestConnJSONForClients(t *testing.T) {
	orig := datapath.ConnTuple{Src: netip.MustParseAddr("10.77.1.2"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: 40000, DstPort: 80, Proto: 6}
	reply := datapath.ConnTuple{Src: netip.MustParseAddr("10.77.1.3"), Dst: orig.Src, SrcPort: 8080, DstPort: 40000, Proto: 6}
	b, err := json.Marshal([]datapath.Conn{{Zone: 65520, Orig: orig, Reply: reply, DNAT: true, TCPState: "ESTABLISHED"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []ctlproto.Conn
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Zone != 65520 || datapath.ConnTuple(got[0].Orig) != orig || datapath.ConnTuple(got[0].Reply) != reply || !got[0].DNAT {
		t.Fatalf("decoded %+v from %s", got, b)
	}
	m, err := connMatch(CtlRequest{Conns: []ctlproto.ConnTuple{got[0].Orig}})
	if err != nil {
		t.Fatal(err)
	}
	other := orig
	other.SrcPort++
	if !m.Matches(&datapath.Conn{Orig: orig, Reply: reply}) || m.Matches(&datapath.Conn{Orig: other, Reply: reply}) {
		t.Fatal("a flush by tuple must select that connection and no other")
	}
}
