package pipeline

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var proxyMAC = net.HardwareAddr{0x0a, 0x58, 0xa9, 0xfe, 0x00, 0x07}

// redirectNode is the representative node with TCP port 80 redirected to
// the proxy on port 7; default/db opted out.
func redirectNode(t *testing.T, failClosed bool) (*Pipeline, *fakeSwitch) {
	return serviceNodeWith(t, func(p *Pipeline) {
		p.SetRedirect(&Redirect{Port: 7, MAC: proxyMAC, Ports: []uint16{80}, FailClosed: failClosed,
			OptOut: map[string]bool{"default/db": true}}, true)
	})
}

// TestRedirectFlowsSay pins the redirect flows in ovs-ofctl's words.
func TestRedirectFlowsSay(t *testing.T) {
	p := representativePipeline()
	p.SetRedirect(&Redirect{Port: 7, MAC: proxyMAC, Ports: []uint16{80, 9080},
		Destinations: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, OptOut: map[string]bool{"default/db": true}}, true)
	var all []string
	for _, f := range p.Desired() {
		all = append(all, f.String())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		"table=24,priority=220,ip,metadata=0x1/0x3,ct_state=-rpl-inv+trk,ct_mark=0x4/0x4 actions=set_field:0a:58:a9:fe:00:07->eth_dst,output:7",
		"table=24,priority=210,tcp,in_port=6,ct_state=+new+trk actions=resubmit(,25),resubmit(,26)",
		"table=24,priority=200,tcp,metadata=0x1/0x3,nw_dst=10.96.0.0/12,tp_dst=9080,ct_state=+new+trk actions=ct(commit,zone=65520,nat,exec(set_field:0x4/0x4->ct_mark)),set_field:0a:58:a9:fe:00:07->eth_dst,output:7",
	} {
		if !containsFlow(text, want) {
			t.Errorf("no flow like\n  %s\nin\n%s", want, text)
		}
	}
	if containsFlow(text, "table=24,priority=210,in_port=5") {
		t.Errorf("web did not opt out but has an opt-out flow:\n%s", text)
	}
	// A pod marked NoRedirect (its annotation) opts out as one named in OptOut does.
	web := p.pods["3f2a9c/eth0"]
	web.NoRedirect = true
	p.pods[web.Key] = web
	found := false
	for _, f := range p.Desired() {
		found = found || containsFlow(f.String(), "table=24,priority=210,tcp,in_port=5,ct_state=+new+trk actions=resubmit(,25),resubmit(,26)")
	}
	if !found {
		t.Errorf("no opt-out flow for a pod marked NoRedirect")
	}
	// Without redirection the node has none of them.
	for _, f := range representativePipeline().Desired() {
		if f.Cookie&cookieFeature == cookieRedirect || (f.TableID == TableConntrackState.ID && f.Priority >= prioRedirectNew) {
			t.Errorf("redirect flow without redirection: %s", f)
		}
	}
}

// TestRedirectWalk walks connections through the switch: web's
// connection to the ClusterIP's port 80 goes to the proxy unchanged (the
// original destination kept) and stays there; the proxy's answer (from
// the node's stack) reaches web; db (opted out), other ports and the
// node go direct; with the proxy down new connections go direct (fail
// open) and the redirected one keeps its path, and a direct connection
// stays direct when the proxy is back.
func TestRedirectWalk(t *testing.T) {
	p, sw := redirectNode(t, false)
	var ct conntrack
	toProxy := "set(eth_dst=0a:58:a9:fe:00:07),output:7"

	syn := ipKey(6, 5, webMAC, gatewayMAC, "10.77.1.2", "10.96.0.10", 40000, 80)
	out, k := ct.walk(t, sw.pl, syn)
	if !strings.HasSuffix(out, toProxy) || netip.AddrFrom4([4]byte(k.IPDst[:4])).String() != "10.96.0.10" || k.TpDst != 80 {
		t.Fatalf("web → ClusterIP:80: %s, to %v:%d", out, k.IPDst[:4], k.TpDst)
	}
	if c := ct.orig[keyTuple(syn)]; c == nil || c.mark&ctMarkRedirect == 0 {
		t.Fatalf("the redirected connection is not committed with the redirect mark: %+v", c)
	}
	// A retransmitted SYN (still +new, already committed): the proxy again, no second commit.
	if out, _ = ct.walk(t, sw.pl, syn); !strings.HasSuffix(out, toProxy) || strings.Contains(out, "commit") {
		t.Fatalf("retransmitted SYN: %s", out)
	}
	// The proxy answers from the node's stack, as the original destination.
	reply := ipKey(6, 2, gatewayMAC, webMAC, "10.96.0.10", "10.77.1.2", 80, 40000)
	if out, _ = ct.walk(t, sw.pl, reply); !strings.HasSuffix(out, "output:5") {
		t.Fatalf("proxy → web: %s", out)
	}
	if out, _ = ct.walk(t, sw.pl, syn); !strings.HasSuffix(out, toProxy) {
		t.Fatalf("web's established packet: %s", out)
	}

	// Not redirected: db (opted out), UDP 53, the node's own connection.
	for name, k := range map[string]struct {
		key  [2]string
		in   uint32
		mac  [6]byte
		prot uint8
		port uint16
	}{
		"db":   {[2]string{"10.77.1.3", "10.96.0.10"}, 6, dbMAC, 6, 80},
		"udp":  {[2]string{"10.77.1.2", "10.96.0.10"}, 5, webMAC, 17, 53},
		"node": {[2]string{"10.77.1.1", "10.96.0.10"}, 2, gatewayMAC, 6, 80},
	} {
		out, got := ct.walk(t, sw.pl, ipKey(k.prot, k.in, k.mac, gatewayMAC, k.key[0], k.key[1], 41000, k.port))
		if strings.Contains(out, "output:7") || netip.AddrFrom4([4]byte(got.IPDst[:4])).String() == "10.96.0.10" {
			t.Errorf("%s went to the proxy or was not DNATed: %s", name, out)
		}
	}

	// Proxy down, fail open: a new connection goes direct (DNAT to an endpoint).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.SetProxyUp(ctx, false); err != nil {
		t.Fatal(err)
	}
	direct := ipKey(6, 5, webMAC, gatewayMAC, "10.77.1.2", "10.96.0.10", 42000, 80)
	out, k = ct.walk(t, sw.pl, direct)
	if strings.Contains(out, "output:7") || netip.AddrFrom4([4]byte(k.IPDst[:4])).String() == "10.96.0.10" {
		t.Fatalf("proxy down, fail open: %s", out)
	}
	if out, _ = ct.walk(t, sw.pl, syn); !strings.HasSuffix(out, toProxy) {
		t.Fatalf("proxy down: the redirected connection left its path: %s", out)
	}
	// Back up: the direct connection stays direct, a new one is redirected.
	if err := p.SetProxyUp(ctx, true); err != nil {
		t.Fatal(err)
	}
	if out, _ = ct.walk(t, sw.pl, direct); strings.Contains(out, "output:7") {
		t.Fatalf("proxy up again: the direct connection moved to the proxy: %s", out)
	}
	if out, _ = ct.walk(t, sw.pl, ipKey(6, 5, webMAC, gatewayMAC, "10.77.1.2", "10.96.0.10", 42001, 80)); !strings.HasSuffix(out, toProxy) {
		t.Fatalf("proxy up again, new connection: %s", out)
	}

	// An agent restart (a new Pipeline with the same state) changes no flow.
	p2 := representativePipeline()
	p2.SetRedirect(&Redirect{Port: 7, MAC: proxyMAC, Ports: []uint16{80}, OptOut: map[string]bool{"default/db": true}}, true)
	p2.SetConn(p.conn)
	st, err := p2.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Added != 0 || st.Deleted != 0 {
		t.Fatalf("restarted agent's sync: %+v", st)
	}
}

// TestRedirectFailClosed: with the proxy down, a selected new connection is
// sent to the agent's Rejecter (refused, counted), never dropped silently.
func TestRedirectFailClosed(t *testing.T) {
	p, sw := redirectNode(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.SetProxyUp(ctx, false); err != nil {
		t.Fatal(err)
	}
	var ct conntrack
	out, _ := ct.walk(t, sw.pl, ipKey(6, 5, webMAC, gatewayMAC, "10.77.1.2", "10.96.0.10", 40000, 80))
	if !strings.Contains(out, "controller") && !strings.Contains(out, "userspace") {
		t.Fatalf("fail closed, proxy down: %s", out)
	}
	if len(ct.orig) != 0 {
		t.Fatalf("a refused connection was committed")
	}
}
