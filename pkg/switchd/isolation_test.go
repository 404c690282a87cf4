package switchd

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// sendDistinctFlows sends n UDP datagrams from pod i to pod j, each to
// another destination port: with megaflows off, each a new flow.
func sendDistinctFlows(t *testing.T, ts *testSwitch, i, j, n int) {
	t.Helper()
	if err := ts.Pods[i-1].Sh(t, "ip", "neigh", "replace", podIP(j), "lladdr", podMAC(j), "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	ts.Pods[i-1].In(t, func() {
		c, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for k := range n {
			addr := &net.UDPAddr{IP: net.ParseIP(podIP(j)), Port: 10000 + k}
			if _, err := c.WriteTo([]byte("x"), addr); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// One pod's flood of new flows is dropped in the fast path past its upcall
// budget and refused past its flow budget; both are counted for its port
// in nagarectl show and in /metrics, and the other pods keep working.
func TestDropsAndRefusalsByPort(t *testing.T) {
	ts := startSwitch(t, 3, func(c *Config) {
		c.DisableMegaflows = true
		c.UpcallRate, c.UpcallBurst, c.PortFlowLimit = 10, 40, 5
		c.MetricsAddr = "127.0.0.1:0"
	})
	ts.ofctl("add-flow", "priority=0,actions=NORMAL")
	sendDistinctFlows(t, ts, 1, 2, 1000)
	var p1, last PortReport
	// Until the counts have settled (the handler may still be at work).
	waitFor(t, "port 1's drops and refusals", func() bool {
		last, p1 = p1, ts.portReport(t, 1)
		return p1.Drops["upcall-port-budget"] > 0 && p1.Refused[refusedPortFlows] > 0 && reflect.DeepEqual(p1, last)
	})
	if p1.Flows != 5 || p1.Drops["upcall-port-budget"] < 900 {
		t.Fatalf("port 1: %+v", p1)
	}
	if err := ts.ping(2, 3); err != nil {
		t.Fatalf("other pods: %v", err)
	}

	r := ts.control(CtlRequest{Cmd: "show"})
	t.Logf("show:\n%s", strings.Join(r.Lines, "\n"))
	want := fmt.Sprintf("port 1 v1: flows 5, masks 1, drops: upcall-port-budget=%d", p1.Drops["upcall-port-budget"])
	if !strings.Contains(strings.Join(r.Lines, "\n"), want) {
		t.Fatalf("show lacks %q:\n%s", want, strings.Join(r.Lines, "\n"))
	}
	resp, err := http.Get("http://" + ts.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		fmt.Sprintf(`nagare_switch_port_drops_total{ofport="1",port="v1",reason="upcall-port-budget"} %d`, p1.Drops["upcall-port-budget"]),
		fmt.Sprintf(`nagare_switch_port_refused_total{ofport="1",port="v1",reason="port-flow-budget"} %d`, p1.Refused[refusedPortFlows]),
		`nagare_switch_port_flows{ofport="1",port="v1"} 5`,
	} {
		if !strings.Contains(string(body), line) {
			t.Fatalf("/metrics lacks %q:\n%s", line, body)
		}
	}
}

// A pod whose new flows are refused for its cache budget has its misses
// paced in the fast path to about what the budget takes (nagarectl show
// says so): the rest of its flood is dropped before the ring, counted as
// upcall-port-budget. Another pod is not paced and keeps working; once
// the flood stops the pacing is lifted.
func TestMissPacing(t *testing.T) {
	ts := startSwitch(t, 3, func(c *Config) {
		c.DisableMegaflows = true
		c.PortFlowLimit = 5
	})
	ts.ofctl("add-flow", "priority=0,actions=NORMAL")
	// The pacer looks at what was refused once a window (paceWindow) is
	// over, at the port's next miss: keep refusing until it has.
	waitFor(t, "port 1's misses paced", func() bool {
		sendDistinctFlows(t, ts, 1, 2, 50)
		return ts.portReport(t, 1).MissUpcallLimit > 0
	})
	p1 := ts.portReport(t, 1)
	if p1.MissUpcallLimit > 100 || p1.Flows != 5 || p1.Refused[refusedPortFlows] == 0 {
		t.Fatalf("port 1 (5 flows taken, the rest refused): %+v", p1)
	}
	if p2 := ts.portReport(t, 2); p2.MissUpcallLimit != 0 {
		t.Fatalf("port 2 paced: %+v", p2)
	}
	r := ts.control(CtlRequest{Cmd: "show"})
	if want := fmt.Sprintf("misses paced to %d/s", p1.MissUpcallLimit); !strings.Contains(strings.Join(r.Lines, "\n"), want) {
		t.Fatalf("show lacks %q:\n%s", want, strings.Join(r.Lines, "\n"))
	}
	// Paced: a flood of new flows is dropped before the ring, not read.
	upcalls := ts.stats.upcalls.Load()
	sendDistinctFlows(t, ts, 1, 2, 1000)
	waitFor(t, "the flood dropped", func() bool {
		return ts.portReport(t, 1).Drops["upcall-port-budget"] >= p1.Drops["upcall-port-budget"]+900
	})
	if n := ts.stats.upcalls.Load() - upcalls; n > 100 {
		t.Fatalf("%d of 1000 paced misses reached the handler", n)
	}
	if err := ts.ping(2, 3); err != nil {
		t.Fatalf("other pods: %v", err)
	}
	waitFor(t, "the pacing lifted", func() bool { return ts.portReport(t, 1).MissUpcallLimit == 0 })
}

// portReport is port no's line of the switch's per-port report.
func (ts *testSwitch) portReport(t *testing.T, no uint32) PortReport {
	t.Helper()
	ports, err := ts.portReports()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p.OFPort == no {
			return p
		}
	}
	t.Fatalf("no port %d", no)
	return PortReport{}
}
